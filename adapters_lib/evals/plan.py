"""What a run evaluates, read once from its config: ``plan_for(cfg) -> EvalPlan``.

- the metrics: ``train.eval_metrics`` in the order written, plus ``train.best_metric`` and
  ``sweep.metric`` when they are not in it (a metric that selects must be measured). Empty
  ``eval_metrics`` = ``loss`` and ``perplexity``, plus ``exact_match`` where
  ``train.eval_exact_match`` asks for it (-1: on the demo data; N > 0: on N examples);
- how many eval examples the generated metrics answer: ``train.eval_examples`` (with the
  empty default, ``eval_exact_match``'s count);
- the answers' token budget (``metrics.max_new_tokens``) and the selection (metric, patience,
  min delta).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adapters_lib.evals.metrics import GENERATED, LIKELIHOOD
from adapters_lib.evals.selection import selection_metric


@dataclass(frozen=True)
class EvalPlan:
    metrics: tuple[str, ...]
    examples: int
    """Eval examples the generated metrics answer (0 when none is asked for)."""
    max_new_tokens: int = 0
    """``train.eval_max_new_tokens`` (0 = the rule in ``metrics.max_new_tokens``)."""
    select: str = ""
    """The metric naming the best checkpoint; "" = none."""
    ends_only: tuple[str, ...] = ()
    """Metrics scored at the base and the last step only (the default exact-match, as the
    loop measured it before eval.jsonl: not at every eval step)."""
    patience: int = 0
    min_delta: float = 0.0

    @property
    def generated(self) -> tuple[str, ...]:
        return tuple(m for m in self.metrics if m in GENERATED)

    @property
    def likelihood(self) -> tuple[str, ...]:
        return tuple(m for m in self.metrics if m in LIKELIHOOD)


def _exact_match_default(cfg: Any) -> int:
    """``train.eval_exact_match``'s count: -1 = all on the demo data and on classification
    data (``[data] labels``: exact match is the accuracy), else N."""
    n = cfg.train.eval_exact_match
    if n < 0:
        return -1 if cfg.data.path == "demo" or getattr(cfg.data, "labels", None) else 0
    return n


def plan_for(cfg: Any) -> EvalPlan:
    """The plan of ``cfg`` (a ``RunConfig``); see the module doc."""
    t = cfg.train
    select = selection_metric(t)
    ends_only: tuple[str, ...] = ()
    sweep_metric = getattr(getattr(cfg, "sweep", None), "metric", "") or ""
    if t.eval_metrics:
        names = list(t.eval_metrics)
        examples = t.eval_examples
    else:
        names = list(LIKELIHOOD)
        em = _exact_match_default(cfg)
        if em:
            names.append("exact_match")
            ends_only = ("exact_match",)
        examples = t.eval_examples if em == 0 else (1 << 30 if em < 0 else em)
    for extra in (select, sweep_metric):
        if extra and extra not in names:
            names.append(extra)
    if not any(n in GENERATED for n in names):
        examples = 0
    ends_only = tuple(m for m in ends_only if m not in (select, sweep_metric))
    return EvalPlan(metrics=tuple(names), examples=examples, max_new_tokens=t.eval_max_new_tokens,
                    select=select, patience=t.early_stop_patience, min_delta=t.early_stop_min_delta,
                    ends_only=ends_only)
