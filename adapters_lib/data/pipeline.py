"""The training data pipeline: ``build_pipeline(spec, tokenizer, batch_size=, seed=) -> Pipeline``.

``Pipeline.train_batch(step)`` is a pure function of ``(seed, step)``: the sequences of
epoch ``e`` are visited in the permutation drawn from ``(seed, e)``, packed into rows, and
the rows of all epochs, one after another, are cut into batches of ``batch_size``. A run
resumed at step N therefore sees exactly the batches it would have seen. Layouts are
computed on demand and cached.

The eval split is ``[data] eval_path`` when set, else an ``eval_fraction`` of the training
examples drawn by ``seed`` (a whole example at a time: chunks of one text stay together).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from adapters_lib.config import DataSpec
from adapters_lib.data.formats import demo_examples, to_examples
from adapters_lib.data.packing import assemble, pack_rows
from adapters_lib.data.readers import ReadResult, read_path
from adapters_lib.data.sources import is_dataset_ref, open_source
from adapters_lib.data.tokenize import TokenCodec, TokenizedSet, subset
from adapters_lib.data.validate import Report, report_for
from adapters_lib.errors import WorkbenchError

log = logging.getLogger(__name__)

Batch = dict[str, np.ndarray]
_EVAL_SPLIT_STREAM = 0x5E1EC7


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


def _split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, eval) example indices, eval = ``fraction`` of ``n`` drawn by seed, both sorted."""
    k = 0 if fraction <= 0 or n < 2 else min(n - 1, max(1, round(fraction * n)))
    perm = np.random.default_rng([seed, _EVAL_SPLIT_STREAM]).permutation(n)
    return np.sort(perm[k:]), np.sort(perm[:k])


def read_for(path: str) -> tuple[ReadResult, list[str]]:
    """``path``'s records and, for a dataset source, its label class names."""
    if is_dataset_ref(path):
        source = open_source(path)
        return source.read_all(), source.label_names
    return read_path(path), []


def build_pipeline(spec: DataSpec, tokenizer: Any, *, batch_size: int, seed: int,
                   kind: str = "examples") -> Pipeline:
    """Read, validate, tokenize and split ``spec``'s data; raise ``WorkbenchError`` if unusable.

    An ``hf:``/``tfds:`` source that streams (``[data] streaming``) gets a
    ``StreamingPipeline`` (``adapters_lib.data.streaming``), which has the same interface.
    ``kind``: what the objective trains on (``objectives.Objective.data``): "examples", or
    "pairs" (preference pairs from any source, ``data.preference.PairPipeline``, the same
    interface; read whole, not streamed)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise WorkbenchError(f"seed {seed!r}: the data order's seed is a whole number >= 0",
                             where="[train] seed", hint="set train.seed = 0 (or any number >= 0)")
    codec = TokenCodec.from_any(tokenizer)
    if kind == "pairs":
        from adapters_lib.data.preference import build_pair_pipeline

        if spec.path == "demo":
            raise WorkbenchError("the demo data has no preference pairs", where="[data] path",
                                 hint="point at prompt/chosen/rejected records, e.g. examples/dpo/")
        return build_pair_pipeline(spec, codec, read_for(spec.path)[0], batch_size=batch_size, seed=seed,
                                   eval_read=read_for(spec.eval_path)[0] if spec.eval_path else None)
    if is_dataset_ref(spec.path) and spec.streaming is not False:
        from adapters_lib.data.streaming import build_streaming, wants_streaming

        source = open_source(spec.path)
        if wants_streaming(spec, source):
            return build_streaming(spec, source, codec, batch_size=batch_size, seed=seed)  # type: ignore[return-value]
    opts = dict(codec=codec, max_length=spec.max_length, loss_on=spec.loss_on, truncation=spec.truncation)
    eval_report = None
    if spec.path == "demo":
        train_ex, eval_ex = demo_examples()
        report = report_for("demo", len(train_ex) + len(eval_ex), [], [], train_ex + eval_ex, [],
                            {"demo": "chat"}, **opts)
        tset = report._tset
        assert tset is not None
        train_idx, eval_idx = np.arange(len(train_ex)), np.arange(len(train_ex), len(train_ex) + len(eval_ex))
        all_ex = train_ex + eval_ex
    else:
        read, names = read_for(spec.path)
        all_ex, conv_issues, file_formats = to_examples(read.records, spec.format, spec.field_map,
                                                        labels=spec.labels, label_names=names)
        report = report_for(spec.path, len(read.records), read.files, read.issues, all_ex, conv_issues,
                            file_formats, **opts)
        report.raise_if_fatal()
        tset = report._tset
        assert tset is not None
        usable = np.unique(tset.example)  # examples that survived tokenization
        if spec.eval_path:
            train_idx, eval_idx = usable, np.zeros(0, np.int64)
        else:
            train_pos, eval_pos = _split(len(usable), spec.eval_fraction, seed)
            train_idx, eval_idx = usable[train_pos], usable[eval_pos]
    report.raise_if_fatal()
    train = subset(tset, train_idx)
    eval_set = subset(tset, eval_idx)
    kept = set(np.unique(tset.example).tolist())
    eval_examples = [all_ex[i].to_chat() for i in eval_idx if all_ex[i].kind == "chat" and int(i) in kept]
    if spec.eval_path and spec.path != "demo":
        read, names = read_for(spec.eval_path)
        ev_ex, ev_issues, ev_formats = to_examples(read.records, spec.format, spec.field_map,
                                                   labels=spec.labels, label_names=names)
        eval_report = report_for(spec.eval_path, len(read.records), read.files, read.issues, ev_ex,
                                 ev_issues, ev_formats, **opts)
        if eval_report.fatal:
            raise WorkbenchError(f"eval data: {eval_report.fatal}", where=spec.eval_path,
                                 hint="run: gemma-workbench data check " + spec.eval_path)
        eval_set = eval_report._tset  # type: ignore[assignment]
        ev_kept = set(np.unique(eval_set.example).tolist())
        eval_examples = [ex.to_chat() for i, ex in enumerate(ev_ex) if ex.kind == "chat" and i in ev_kept]
    if len(train) == 0:
        raise WorkbenchError("no training examples left after the eval split", where="[data] path",
                             hint="lower [data] eval_fraction or add data")
    report.split = {"train_examples": len(np.unique(train.example)), "eval_examples": len(np.unique(eval_set.example)),
                    "train_sequences": len(train), "eval_sequences": len(eval_set)}
    log.info("data: %s, %d train / %d eval sequences, %d tokens", report.format, len(train), len(eval_set),
             report.tokens)
    return Pipeline(train, eval_set, eval_examples, report, batch_size=batch_size, seed=seed,
                    max_length=spec.max_length, packing=spec.packing, eval_report=eval_report)
