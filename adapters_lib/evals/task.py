"""Scoring a model on a task: greedy answers to eval prompts, and the likelihood metrics.

``TaskSet(tokenizer, examples, plan)`` holds the eval examples that have an answer (a last
assistant turn), their prompts already tokenized, and the answers' token budget;
``TaskSet.score(apply_fn, params)`` answers them greedily with
``evaluate.greedy_answers`` (one compiled decoder per ``apply_fn``: call it with the same
function for the base and every tuned eval) and returns the generated metrics.
``apply_fn(params, tokens, positions, mask) -> logits`` is what both routes give
(``evaluate.model_apply_fn`` for a gemma model, the Keras route's own).

``likelihood(loss, names)`` turns a mean eval loss into the ``loss``/``perplexity`` values.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.evals import metrics as metrics_lib
from adapters_lib.evals.plan import EvalPlan

log = logging.getLogger(__name__)

DECODE_BATCH = 64


def likelihood(loss: float | None, names: Sequence[str]) -> dict[str, float]:
    """``{"loss": x, "perplexity": exp(x)}`` for those of the two in ``names``."""
    if loss is None or not math.isfinite(loss):
        return {}
    out = {}
    if "loss" in names:
        out["loss"] = float(loss)
    if "perplexity" in names:
        out["perplexity"] = math.exp(min(float(loss), 700.0))
    return out


def answerable(examples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat examples whose last turn is an assistant's answer (the reference)."""
    out = []
    for ex in examples:
        messages = ex.get("messages") or []
        if len(messages) >= 2 and messages[-1].get("role") in ("assistant", "model"):
            out.append(ex)
    return out


def spread(items: Sequence[Any], n: int) -> list[Any]:
    """``n`` of ``items`` evenly spaced over them, in order (all of them when ``n`` covers
    them): an eval file sorted by task — the demo split is — is answered across its tasks,
    not only on the first ones."""
    items = list(items)
    if n >= len(items):
        return items
    return [items[i * len(items) // n] for i in range(max(n, 0))]


@dataclass
class Scored:
    values: dict[str, float]
    answered: int
    seconds: float
    samples: list[dict[str, str]] = field(default_factory=list)
    """A few {prompt, reference, prediction}, for the log."""
    correct: int = 0
    """exact_match: answers that match (the old ``exact_match`` event's counts)."""
    per_task: dict[str, float] = field(default_factory=dict)
    """exact_match per example ``task`` (the demo tasks)."""


class TaskSet:
    """The eval examples a run's generated metrics answer (see the module doc)."""

    def __init__(self, tokenizer: Any, examples: Sequence[dict[str, Any]], plan: EvalPlan, *,
                 max_length: int, where: str = "[train] eval_metrics"):
        from adapters_lib import evaluate
        from adapters_lib.sample import prompts

        self.plan = plan
        self.tokenizer = tokenizer
        self.max_length = max_length
        chosen = spread(answerable(examples), plan.examples) if plan.generated else []
        if plan.generated and not chosen:
            raise WorkbenchError(
                f"{', '.join(plan.generated)} need eval examples with an answer, and the eval "
                "split has none (plain text, or no eval split)", where=where,
                hint="use prompt/response or chat data with an eval split (data.eval_fraction "
                     "or data.eval_path), or keep to loss and perplexity")
        self.examples = chosen
        self.prompts: list[list[int]] = []
        self.references: list[str] = []
        codec = prompts.codec_of(tokenizer)  # the one prompt tokenizer (sample.prompts)
        for ex in chosen:
            messages, ref = evaluate.split_example(ex)
            self.prompts.append(prompts.prompt_ids(codec, messages))
            self.references.append(ref)
        lengths = [len(tokenizer.encode(r)) for r in self.references]
        self.max_new_tokens = metrics_lib.max_new_tokens(lengths, plan.max_new_tokens)

    def __len__(self) -> int:
        return len(self.examples)

    def answers(self, apply_fn: Any, params: Any) -> list[str]:
        from adapters_lib import evaluate

        if not self.examples:
            return []
        return evaluate.greedy_answers(apply_fn, params, self.tokenizer, self.prompts,
                                       max_new_tokens=self.max_new_tokens,
                                       batch_size=min(DECODE_BATCH, len(self.prompts)),
                                       max_length=max(self.max_length, 64) + self.max_new_tokens)

    def score(self, apply_fn: Any, params: Any, names: Sequence[str] | None = None) -> Scored:
        """The generated metrics (``names``, default the plan's) of ``params``."""
        t0 = time.perf_counter()
        predictions = self.answers(apply_fn, params)
        names = self.plan.generated if names is None else names
        values = metrics_lib.score_answers(names, predictions, self.references)
        samples = [{"prompt": str(ex["messages"][-2].get("content", "")), "reference": ref,
                    "prediction": pred}
                   for ex, ref, pred in zip(self.examples[:3], self.references, predictions, strict=False)]
        out = Scored(values, len(predictions), time.perf_counter() - t0, samples)
        if "exact_match" in values:
            hits = [metrics_lib.exact_match(p, r) for p, r in zip(predictions, self.references, strict=True)]
            out.correct = int(sum(hits))
            by_task: dict[str, list[float]] = {}
            for ex, hit in zip(self.examples, hits, strict=True):
                by_task.setdefault(str(ex.get("task", "all")), []).append(hit)
            out.per_task = {k: sum(v) / len(v) for k, v in by_task.items()}
        return out
