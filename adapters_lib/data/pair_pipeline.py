"""Batches of preference pairs for DPO (the pairs themselves: ``data.preference``).

``PairPipeline`` has the SFT ``Pipeline``'s interface: ``train_batch(step)`` (a pure
function of seed and step: epoch e visits the pairs in the permutation drawn from
(seed, e)), ``eval_batches(n)``, ``eval_examples`` (prompt + chosen answer, for the task
metrics), ``report``. A batch is ``train.batch_size`` pairs: ``chosen_<key>`` and
``rejected_<key>`` for each SFT row key (``train.objectives.dpo``). numpy only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from adapters_lib.data.batches import eval_split
from adapters_lib.data.packing import assemble
from adapters_lib.data.preference import SIDES, PairSet, looks_like_pairs, tokenize_pairs
from adapters_lib.data.tokenize import TokenCodec
from adapters_lib.data.validate import pair_report
from adapters_lib.errors import WorkbenchError


class PairPipeline:
    """Deterministic batches of preference pairs (see the module doc)."""

    def __init__(self, train: PairSet, eval_set: PairSet, report: Any, *, batch_size: int, seed: int,
                 max_length: int):
        self.train, self.eval, self.report = train, eval_set, report
        self.batch_size, self.seed, self.max_length = batch_size, seed, max_length
        self.eval_examples = [p.example("chosen").to_chat() for p in eval_set.pairs]
        self.eval_report = None
        self.packing = False

    @property
    def rows_per_epoch(self) -> int:
        return len(self.train)

    @property
    def steps_per_epoch(self) -> float:
        return len(self.train) / self.batch_size

    @property
    def eval_batch_count(self) -> int:
        return math.ceil(len(self.eval) / self.batch_size)

    def _batch(self, pset: PairSet, idx: list[int]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for side in SIDES:
            rows = assemble(getattr(pset, side), [[i] for i in idx], self.batch_size, self.max_length)
            out.update({f"{side}_{k}": v for k, v in rows.items()})
        return out

    def train_batch(self, step: int) -> dict[str, np.ndarray]:
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        n = len(self.train)
        first = step * self.batch_size
        idx = []
        for k in range(first, first + self.batch_size):
            epoch, at = divmod(k, n)
            idx.append(int(np.random.default_rng([self.seed, epoch]).permutation(n)[at]))
        return self._batch(self.train, idx)

    def eval_batches(self, n: int) -> list[dict[str, np.ndarray]]:
        want = min(n, self.eval_batch_count) * self.batch_size
        idx = list(range(len(self.eval)))
        if want < len(idx):
            idx = [int(i) for i in np.linspace(0, len(idx) - 1, num=want).astype(int)]
        return [self._batch(self.eval, idx[k:k + self.batch_size]) for k in range(0, len(idx), self.batch_size)]


def build_pair_pipeline(spec: Any, codec: TokenCodec, read: Any, *, batch_size: int, seed: int,
                        eval_read: Any = None) -> PairPipeline:
    """The DPO pipeline of ``[data]`` (``read``: its ``readers.read_path`` result)."""
    opts = dict(max_length=spec.max_length, truncation=spec.truncation, field_map=spec.field_map)
    if not looks_like_pairs(read.records):
        raise WorkbenchError(f"{spec.path} holds no preference pairs (records with chosen and rejected)",
                             where="[data] path",
                             hint='train.objective = "dpo" reads prompt/chosen/rejected records; '
                                  "use objective sft for this data")
    pset, issues = tokenize_pairs(read.records, codec, **opts)
    report = pair_report(spec.path, read, pset, issues, codec=codec, max_length=spec.max_length)
    report.raise_if_fatal()
    if eval_read is not None:
        eval_set, _ = tokenize_pairs(eval_read.records, codec, **opts)
        train = pset
    else:
        tr, ev = eval_split(len(pset), spec.eval_fraction, seed)
        train, eval_set = pset.take(tr), pset.take(ev)
    report.split = {"train_pairs": len(train), "eval_pairs": len(eval_set)}
    return PairPipeline(train, eval_set, report, batch_size=batch_size, seed=seed, max_length=spec.max_length)
