"""The streaming pipeline: an ``hf:``/``tfds:`` dataset trained a block at a time, never whole.

``[data] streaming = true`` (or "auto" and more than ``AUTO_ROWS`` rows). The training rows are
the source's rows ``0 … n-k-1`` (the last ``k`` rows are the eval split, read whole: ``k`` is
``eval_fraction`` of the rows, at most ``EVAL_MAX``; or ``[data] eval_path``). Epoch ``e``
visits them in blocks of ``BLOCK`` rows: the block order is a permutation drawn from
``(seed, e)``, and the rows of block ``b`` a permutation drawn from ``(seed, e, b)``. So the row
at position ``p`` of the run, and with it ``train_batch(step)``, is a pure function of
``(seed, step)``: a resumed run reads the very record it would have read, without replaying
the ones before (``record_at(step)`` says which). Only the blocks in use are read and
tokenized (a few are cached).

One record is one row (no packing): a chat example longer than ``max_length`` follows
``truncation``, a text keeps its first ``max_length`` tokens; a record that cannot be used
(bad format, an unknown label, nothing to train on) is an all-padding row (``loss_mask`` 0),
so positions never shift. The report is the one of the first block, with the split counts.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from adapters_lib.config import DataSpec
from adapters_lib.data.batches import Pipeline
from adapters_lib.data.formats import to_examples
from adapters_lib.data.sources import BLOCK, Source, read_for
from adapters_lib.data.tokenize import TokenCodec, TokenizedSet, tokenize_examples
from adapters_lib.data.validate import Report, report_for
from adapters_lib.errors import WorkbenchError

log = logging.getLogger(__name__)

AUTO_ROWS = 200_000
"""``streaming = "auto"`` streams a dataset with more rows than this."""
EVAL_MAX = 512
"""The held-out tail of a streamed dataset is at most this many rows."""
_CACHED_BLOCKS = 4
_STREAM = 0x57EA


def wants_streaming(spec: DataSpec, source: Source) -> bool:
    if spec.streaming == "auto":
        return source.num_rows > AUTO_ROWS
    return bool(spec.streaming)


class StreamingPipeline:
    """``Pipeline``'s interface over a ``Source`` read on demand (see the module doc)."""

    packing = False

    def __init__(self, source: Source, spec: DataSpec, codec: TokenCodec, *, train_rows: int,
                 fmt: str, report: Report, evals: Any, batch_size: int, seed: int,
                 block: int = BLOCK):
        if batch_size < 1:
            raise WorkbenchError(f"batch_size is {batch_size}", where="[train] batch_size",
                                 hint="use a positive batch size")
        self.source, self.spec, self.codec, self.fmt = source, spec, codec, fmt
        self.train_rows, self.batch_size, self.seed = train_rows, batch_size, seed
        self.max_length = spec.max_length
        self.report = report
        self._evals = evals
        self.eval = evals.eval
        self.eval_examples = evals.eval_examples
        self.eval_report = evals.eval_report
        self.block = block
        self.n_blocks = math.ceil(train_rows / block)
        self._orders: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._blocks: dict[int, tuple[TokenizedSet, np.ndarray]] = {}
        self.blocks_read = 0

    # ------------------------------------------------------------ positions
    @property
    def rows_per_epoch(self) -> int:
        return self.train_rows

    @property
    def steps_per_epoch(self) -> float:
        return self.train_rows / self.batch_size

    def _block_size(self, b: int) -> int:
        return min(self.block, self.train_rows - b * self.block)

    def _order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(block order, cumulative rows after each block in that order) of ``epoch``."""
        got = self._orders.get(epoch)
        if got is None:
            order = np.random.default_rng([self.seed, _STREAM, epoch]).permutation(self.n_blocks)
            sizes = np.minimum(self.block, self.train_rows - order * self.block)
            got = (order, np.cumsum(sizes))
            if len(self._orders) >= 3:
                self._orders.pop(min(self._orders))
            self._orders[epoch] = got
        return got

    def record_of(self, position: int) -> tuple[int, int]:
        """(epoch, source row) visited at ``position`` (rows counted from the run's start)."""
        epoch, p = divmod(position, self.train_rows)
        order, cum = self._order(epoch)
        j = int(np.searchsorted(cum, p, side="right"))
        b = int(order[j])
        offset = p - (int(cum[j - 1]) if j else 0)
        inner = np.random.default_rng([self.seed, _STREAM, epoch, b]).permutation(self._block_size(b))
        return epoch, b * self.block + int(inner[offset])

    def record_at(self, step: int) -> tuple[int, int]:
        """(epoch, source row) of the first row of ``step``'s batch."""
        return self.record_of(step * self.batch_size)

    def locate(self, step: int) -> tuple[int, int]:
        epoch, p = divmod(step * self.batch_size, self.train_rows)
        return epoch, p

    # ------------------------------------------------------------ rows
    def _block(self, b: int) -> tuple[TokenizedSet, np.ndarray]:
        """Block ``b`` tokenized: (sequences, sequence index of each of its rows, -1 = unusable)."""
        got = self._blocks.get(b)
        if got is None:
            records = self.source.read(b * self.block, b * self.block + self._block_size(b))
            examples, _, _ = to_examples(records, self.fmt, self.spec.field_map, labels=self.spec.labels,
                                         label_names=self.source.label_names)
            tset = tokenize_examples(examples, self.codec, max_length=self.max_length,
                                     loss_on=self.spec.loss_on, truncation=self.spec.truncation)
            seq_of = np.full(len(records), -1, np.int64)
            row_of_example = np.array([ex.where.row - 1 - b * self.block for ex in examples], np.int64)
            first = np.unique(tset.example, return_index=True)  # a chunked text: its first window
            seq_of[row_of_example[first[0]]] = first[1]
            if len(self._blocks) >= _CACHED_BLOCKS:
                self._blocks.pop(next(iter(self._blocks)))
            self._blocks[b] = got = (tset, seq_of)
            self.blocks_read += 1
        return got

    def train_batch(self, step: int) -> dict[str, np.ndarray]:
        """The batch for ``step`` (0-based): a pure function of (seed, step)."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        shape = (self.batch_size, self.max_length)
        out = {k: np.zeros(shape, np.float32 if k == "loss_mask" else np.int32)
               for k in ("tokens", "targets", "loss_mask", "positions", "segment_ids")}
        for r in range(self.batch_size):
            _, row = self.record_of(step * self.batch_size + r)
            tset, seq_of = self._block(row // self.block)
            i = int(seq_of[row % self.block])
            if i < 0:
                continue
            ids, trained = tset.sequence(i)
            n = len(ids)
            out["tokens"][r, :n] = ids
            out["targets"][r, :n - 1] = ids[1:]
            out["loss_mask"][r, :n - 1] = trained[1:]
            out["positions"][r, :n] = np.arange(n, dtype=np.int32)
            out["segment_ids"][r, :n] = 1
        return out

    def batches(self, start_step: int = 0):
        step = start_step
        while True:
            yield self.train_batch(step)
            step += 1

    # ------------------------------------------------------------ eval
    @property
    def eval_batch_count(self) -> int:
        return self._evals.eval_batch_count

    def eval_batches(self, n: int) -> list[dict[str, np.ndarray]]:
        return self._evals.eval_batches(n)


def build_streaming(spec: DataSpec, source: Source, codec: TokenCodec, *, batch_size: int,
                    seed: int, block: int = BLOCK) -> StreamingPipeline:
    """The streaming pipeline of ``source`` (see the module doc)."""
    opts = dict(codec=codec, max_length=spec.max_length, loss_on=spec.loss_on, truncation=spec.truncation)
    n = source.num_rows
    k = 0 if spec.eval_path or spec.eval_fraction <= 0 or n < 2 else min(EVAL_MAX, n - 1, max(1, round(spec.eval_fraction * n)))
    train_rows = n - k
    if train_rows < 1:
        raise WorkbenchError(f"{source.ref} has no rows", where="[data] path", hint="pick another split")
    sample = source.read(0, min(block, train_rows))
    ex, issues, formats = to_examples(sample, spec.format, spec.field_map, labels=spec.labels,
                                      label_names=source.label_names)
    report = report_for(source.ref, len(sample), [source.ref], [], ex, issues, formats, **opts)
    report.raise_if_fatal()
    fmt = spec.format if spec.format != "auto" else next(iter(formats.values()))
    if spec.eval_path:
        read, names = read_for(spec.eval_path, spec.field_map)
        eval_records, what = read.records, spec.eval_path
    else:
        eval_records, names, what = source.read(train_rows, n), source.label_names, source.ref
    ev_ex, ev_issues, ev_formats = to_examples(eval_records, spec.format, spec.field_map,
                                               labels=spec.labels, label_names=names)
    eval_report = report_for(what, len(eval_records), [what], [], ev_ex, ev_issues, ev_formats, **opts)
    ev_tset = eval_report._tset
    assert ev_tset is not None
    kept = set(np.unique(ev_tset.example).tolist())
    eval_examples = [e.to_chat() for i, e in enumerate(ev_ex) if e.kind == "chat" and i in kept]
    evals = Pipeline(ev_tset, ev_tset, eval_examples, eval_report, batch_size=batch_size, seed=seed,
                     max_length=spec.max_length, packing=spec.packing,
                     eval_report=eval_report if spec.eval_path else None)
    report.split = {"train_examples": train_rows, "eval_examples": len(kept),
                    "train_sequences": train_rows, "eval_sequences": len(ev_tset), "streaming": True}
    log.info("data: streaming %s, %d train rows in %d blocks, %d eval rows", source.ref, train_rows,
             math.ceil(train_rows / block), len(eval_records))
    return StreamingPipeline(source, spec, codec, train_rows=train_rows, fmt=fmt, report=report,
                             evals=evals, batch_size=batch_size, seed=seed, block=block)
