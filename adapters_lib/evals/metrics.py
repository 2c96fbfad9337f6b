"""The task metrics (contract names) and how each text metric scores an answer.

======================  =========  ====================================================
name                    better     what it is
======================  =========  ====================================================
``loss``                lower      mean cross-entropy per scored eval token (nats)
``perplexity``          lower      ``exp(loss)``
``exact_match``         higher     the answer equals the reference (case, surrounding
                                   whitespace and a final full stop ignored)
``contains``            higher     the reference appears inside the answer (same folding)
``rouge_l``             higher     ROUGE-L F1 of answer vs reference (``rouge-score``'s
                                   LCS; words are Unicode word characters, lower-cased,
                                   no stemming)
``numeric_match``       higher     the answer's number equals the reference's: the number
                                   after the last ``####`` (GSM8K style), else the last
                                   number in the text; ``1,000`` = ``1000``, ``3.50`` = ``3.5``
======================  =========  ====================================================

``loss`` and ``perplexity`` come from the model's log-likelihood of the eval split; the other
four are **generated**: each eval prompt is answered greedily (see ``GENERATION``) and the
answer scored against the example's last assistant turn. A generated metric's value is the
mean over the answered examples, in [0, 1].

Pure Python: no JAX. ``rouge-score`` (and the nltk it imports, ~2 s) is imported only when
ROUGE-L is asked for.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from adapters_lib.config import EVAL_METRICS

GENERATION = {
    "sampling": "greedy (arg-max at every step; no temperature, top-k or top-p)",
    "stop": "<end_of_turn> or EOS",
    "max_new_tokens": "train.eval_max_new_tokens, or when 0: the longest reference in tokens + 16, "
                      "at most 256",
    "prompt": "the example's turns before its last assistant turn, in the Gemma chat template",
}
"""The fixed settings of the generated metrics (written into docs/config.md and eval reports)."""

MAX_NEW_TOKENS_MARGIN = 16
MAX_NEW_TOKENS_CAP = 256

LOWER_IS_BETTER = frozenset({"loss", "perplexity"})
LIKELIHOOD = ("loss", "perplexity")
GENERATED = ("exact_match", "contains", "rouge_l", "numeric_match")


@dataclass(frozen=True)
class Metric:
    name: str
    higher_is_better: bool
    generated: bool


METRICS: dict[str, Metric] = {
    name: Metric(name, name not in LOWER_IS_BETTER, name in GENERATED) for name in EVAL_METRICS
}
assert set(METRICS) == set(LIKELIHOOD) | set(GENERATED)


def metric(name: str) -> Metric:
    return METRICS[name]


def improves(name: str, value: float, best: float | None, min_delta: float = 0.0) -> bool:
    """``value`` beats ``best`` by more than ``min_delta`` in ``name``'s direction."""
    if value is None or not math.isfinite(value):
        return False
    if best is None:
        return True
    return value < best - min_delta if name in LOWER_IS_BETTER else value > best + min_delta


def best_index(name: str, values: Sequence[float | None]) -> int | None:
    """Index of the best value (the first of equals), None when none is finite."""
    best: int | None = None
    for i, v in enumerate(values):
        if v is not None and math.isfinite(v) and (best is None or improves(name, v, values[best])):
            best = i
    return best


def max_new_tokens(reference_lengths: Iterable[int], configured: int = 0) -> int:
    """The generated answers' token budget (see ``GENERATION``)."""
    if configured > 0:
        return configured
    longest = max(reference_lengths, default=0)
    return min(longest + MAX_NEW_TOKENS_MARGIN, MAX_NEW_TOKENS_CAP)


# --------------------------------------------------------------------------- text metrics


def _fold(text: str) -> str:
    return " ".join(text.strip().rstrip(".").split()).lower()


def exact_match(prediction: str, reference: str) -> float:
    return float(_fold(prediction) == _fold(reference))


def contains(prediction: str, reference: str) -> float:
    ref = _fold(reference)
    return float(bool(ref) and ref in _fold(prediction))


class _WordTokenizer:
    """rouge-score's tokenizer interface: lower-cased Unicode words (its default keeps a-z0-9
    only, which scores every non-Latin answer 0)."""

    def tokenize(self, text: str) -> list[str]:
        return re.findall(r"\w+", text.lower())


@functools.lru_cache(maxsize=1)
def _rouge() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False, tokenizer=_WordTokenizer())


def rouge_l(prediction: str, reference: str) -> float:
    return float(_rouge().score(reference, prediction)["rougeL"].fmeasure)


_NUMBER = re.compile(r"[-+]?\$?\d[\d,]*(?:\.\d+)?|[-+]?\$?\.\d+")


def read_number(text: str) -> Decimal | None:
    """The answer number of ``text``: after the last ``####`` if there is one, else the last
    number in the text. Commas, ``$`` and trailing zeros are ignored."""
    tail = text.rsplit("####", 1)[1] if "####" in text else text
    found = _NUMBER.findall(tail)
    if not found:
        return None
    raw = (found[0] if "####" in text else found[-1]).replace(",", "").replace("$", "")
    try:
        return Decimal(raw).normalize()
    except InvalidOperation:
        return None


def numeric_match(prediction: str, reference: str) -> float:
    want = read_number(reference)
    got = read_number(prediction)
    return float(want is not None and got is not None and want == got)


SCORERS = {"exact_match": exact_match, "contains": contains, "rouge_l": rouge_l,
           "numeric_match": numeric_match}


def scorers(names: Iterable[str] = GENERATED) -> dict[str, Any]:
    """``{name: (prediction, reference) -> float}`` for the generated metrics in ``names``: what
    ``sample.compare_sets.score`` takes to score a saved compare set with these metrics."""
    return {n: SCORERS[n] for n in names if n in SCORERS}


def score_answers(names: Iterable[str], predictions: Sequence[str],
                  references: Sequence[str]) -> dict[str, float]:
    """Mean of each generated metric in ``names`` over (prediction, reference) pairs.

    Likelihood metrics in ``names`` are skipped (they need the model). No pairs → {}.
    """
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    out: dict[str, float] = {}
    if not predictions:
        return out
    for name in names:
        scorer = SCORERS.get(name)
        if scorer is not None:
            out[name] = sum(scorer(p, r) for p, r in zip(predictions, references, strict=True)) / len(predictions)
    return out


def per_answer(names: Iterable[str], prediction: str, reference: str) -> dict[str, float]:
    """Each generated metric of one answer (for reports that list answers)."""
    return {n: SCORERS[n](prediction, reference) for n in names if n in SCORERS}
