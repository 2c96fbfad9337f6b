"""Deterministic batches of a tokenized data set: ``Pipeline`` (built by
``data.pipeline.build_pipeline``, and for a streamed source's eval split by
``data.streaming``). ``train_batch(step)`` is a pure function of ``(seed, step)``; see
``data.pipeline`` for how the rows of each epoch are drawn."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from adapters_lib.data.packing import assemble, pack_rows
from adapters_lib.data.tokenize import TokenizedSet
from adapters_lib.data.validate import Report
from adapters_lib.errors import WorkbenchError

Batch = dict[str, np.ndarray]

_EVAL_SPLIT_STREAM = 0x5E1EC7


def eval_split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, eval) indices of ``n`` examples (or pairs), eval = ``fraction`` of them drawn
    by seed, both sorted; at least one of each when ``fraction`` > 0 and ``n`` >= 2."""
    k = 0 if fraction <= 0 or n < 2 else min(n - 1, max(1, round(fraction * n)))
    perm = np.random.default_rng([seed, _EVAL_SPLIT_STREAM]).permutation(n)
    return np.sort(perm[k:]), np.sort(perm[:k])


class Pipeline:
    """Deterministic batches for training and eval (see the module doc)."""

    def __init__(self, train: TokenizedSet, eval_set: TokenizedSet, eval_examples: list[dict[str, Any]],
                 report: Report, *, batch_size: int, seed: int, max_length: int, packing: bool,
                 eval_report: Report | None = None):
        if batch_size < 1:
            raise WorkbenchError(f"batch_size is {batch_size}", where="[train] batch_size",
                                 hint="use a positive batch size")
        self.train = train
        self.eval = eval_set
        self.eval_examples = eval_examples
        self.report = report
        self.eval_report = eval_report
        self.batch_size = batch_size
        self.seed = seed
        self.max_length = max_length
        self.packing = packing
        self._layouts: dict[int, list[list[int]]] = {}
        self._epoch_rows: list[int] = []  # rows per epoch, epochs 0..k
        self._eval_rows = pack_rows(eval_set.lengths, np.arange(len(eval_set)), max_length, packing=packing)

    # ---------------------------------------------------------------- training
    def _layout(self, epoch: int) -> list[list[int]]:
        rows = self._layouts.get(epoch)
        if rows is None:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.train))
            rows = pack_rows(self.train.lengths, order, self.max_length, packing=self.packing)
            if len(self._layouts) >= 3:  # keep memory bounded on long runs
                self._layouts.pop(min(self._layouts))
            self._layouts[epoch] = rows
        return rows

    def _rows_in(self, epoch: int) -> int:
        while len(self._epoch_rows) <= epoch:
            self._epoch_rows.append(len(self._layout(len(self._epoch_rows))))
        return self._epoch_rows[epoch]

    @property
    def rows_per_epoch(self) -> int:
        return self._rows_in(0)

    @property
    def steps_per_epoch(self) -> float:
        return self.rows_per_epoch / self.batch_size

    def locate(self, step: int) -> tuple[int, int]:
        """(epoch, row within the epoch) of the first row of ``step``."""
        row = step * self.batch_size
        epoch = 0
        while row >= self._rows_in(epoch):
            row -= self._rows_in(epoch)
            epoch += 1
        return epoch, row

    def train_batch(self, step: int) -> Batch:
        """The batch for ``step`` (0-based): a pure function of (seed, step)."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        epoch, row = self.locate(step)
        rows: list[list[int]] = []
        while len(rows) < self.batch_size:
            layout = self._layout(epoch)
            take = layout[row:row + self.batch_size - len(rows)]
            rows.extend(take)
            epoch, row = epoch + 1, 0
        return assemble(self.train, rows, self.batch_size, self.max_length)

    def batches(self, start_step: int = 0) -> Iterator[Batch]:
        """``train_batch(start_step)``, ``train_batch(start_step + 1)``, ... (endless)."""
        step = start_step
        while True:
            yield self.train_batch(step)
            step += 1

    # ---------------------------------------------------------------- eval
    @property
    def eval_batch_count(self) -> int:
        return math.ceil(len(self._eval_rows) / self.batch_size)

    def eval_batches(self, n: int) -> list[Batch]:
        """``n`` eval batches (fewer if the split is smaller; the last may hold padding rows,
        whose ``loss_mask`` is 0). When ``n`` batches hold only part of the split, their rows
        are spread evenly over it, in file order: a file sorted by task (or by length) is
        scored on all of it, not on its first tasks. The same rows at every eval."""
        rows = self._eval_rows
        want = min(n, self.eval_batch_count) * self.batch_size
        if want < len(rows):  # spacing >= 1: the floors are distinct rows
            rows = [rows[i] for i in np.linspace(0, len(rows) - 1, num=want).astype(int)]
        return [assemble(self.eval, rows[k:k + self.batch_size], self.batch_size, self.max_length)
                for k in range(0, len(rows), self.batch_size)]
