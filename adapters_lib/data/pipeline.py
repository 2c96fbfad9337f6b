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
from typing import Any

import numpy as np

from adapters_lib.config import DataSpec
from adapters_lib.data.batches import Pipeline, eval_split
from adapters_lib.data.formats import demo_examples, to_examples
from adapters_lib.data.sources import is_dataset_ref, open_source, read_for
from adapters_lib.data.tokenize import TokenCodec, subset
from adapters_lib.data.validate import report_for
from adapters_lib.errors import WorkbenchError

log = logging.getLogger(__name__)

def build_pipeline(spec: DataSpec, tokenizer: Any, *, batch_size: int, seed: int,
                   kind: str = "examples") -> Pipeline:
    """Read, validate, tokenize and split ``spec``'s data; raise ``WorkbenchError`` if unusable.

    An ``hf:``/``tfds:`` source that streams (``[data] streaming``) gets a
    ``StreamingPipeline`` (``adapters_lib.data.streaming``), which has the same interface.
    ``kind``: what the objective trains on (``objectives.Objective.data``): "examples", or
    "pairs" (preference pairs from any source, ``data.pair_pipeline.PairPipeline``, the same
    interface; read whole, not streamed)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise WorkbenchError(f"seed {seed!r}: the data order's seed is a whole number >= 0",
                             where="[train] seed", hint="set train.seed = 0 (or any number >= 0)")
    codec = TokenCodec.from_any(tokenizer)
    if kind == "pairs":
        from adapters_lib.data.pair_pipeline import build_pair_pipeline

        if spec.path == "demo":
            raise WorkbenchError("the demo data has no preference pairs", where="[data] path",
                                 hint="point at prompt/chosen/rejected records, e.g. examples/dpo/")
        return build_pair_pipeline(spec, codec, read_for(spec.path, spec.field_map)[0],
                                   batch_size=batch_size, seed=seed,
                                   eval_read=read_for(spec.eval_path, spec.field_map)[0] if spec.eval_path else None)
    if is_dataset_ref(spec.path) and spec.streaming is not False:
        from adapters_lib.data.streaming import build_streaming, wants_streaming

        source = open_source(spec.path, field_map=spec.field_map)
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
        read, names = read_for(spec.path, spec.field_map)
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
            train_pos, eval_pos = eval_split(len(usable), spec.eval_fraction, seed)
            train_idx, eval_idx = usable[train_pos], usable[eval_pos]
    report.raise_if_fatal()
    train = subset(tset, train_idx)
    eval_set = subset(tset, eval_idx)
    kept = set(np.unique(tset.example).tolist())
    eval_examples = [all_ex[i].to_chat() for i in eval_idx if all_ex[i].kind == "chat" and int(i) in kept]
    if spec.eval_path and spec.path != "demo":
        read, names = read_for(spec.eval_path, spec.field_map)
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
