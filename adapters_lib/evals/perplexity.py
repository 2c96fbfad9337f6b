"""Loss and perplexity of a model over a data file: what ``gemma-workbench eval`` reports.

``score_tokens(model, params, tset, ...)`` is the computation: the file's sequences (as the
data pipeline tokenizes them: BOS + text + EOS for text — a ``.txt`` file is one text, as
written, its final newline included (``evals.text_file``) — the Gemma chat template with the
per-token "trained" flags for chat, so chat files score only the model turns, or every
token with ``loss_on = "all"``) packed into rows, each row scored by one jitted function
of (params, batch) — the train step's chunked cross-entropy over the final hidden states,
so the ``[B, L, V]`` logits never exist. It returns the summed negative log-likelihood and
the number of scored tokens; ``loss`` is their ratio, ``perplexity = exp(loss)``.

``evaluate_file(...)`` reads and tokenizes a file (``[data]`` rules: format detection,
``max_length`` windows for long texts, truncation of long chats) and scores it with a base
model, or a base model plus a run's LoRA adapters (``lora_spec``), or a full fine-tune.

What compiles: one scorer a (model, LoRA program spec) and batch shape. The batch is always
``batch_size`` rows (missing rows are padding) of ``eval_width``: the next power of two from
32 of the longest packed row, at most ``max_length`` (a file of packed text is ``max_length``
wide). A run's adapters are scored in its LoRA family's program (``sample.family``, as
``train.programs`` says), so another rank, alpha or targets compiles nothing;
``compile_behind`` compiles a run's scorer ahead (the engine, after a run).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from typing import Any

import numpy as np

from adapters_lib.config import DataSpec, LoraSpec
from adapters_lib.data.tokenize import TokenCodec
from adapters_lib.errors import WorkbenchError
from adapters_lib.evals.eval_result import EvalResult

log = logging.getLogger(__name__)

DEFAULT_MAX_LENGTH = 512
DEFAULT_BATCH = 4


def _rows(lengths: np.ndarray, max_length: int) -> list[list[int]]:
    from adapters_lib.data.packing import pack_rows

    return pack_rows(lengths, np.arange(len(lengths)), max_length, packing=True)


@functools.lru_cache(maxsize=8)
def _scorer(model: Any, spec: LoraSpec | None, chunk_budget: int) -> Any:
    """The jitted ``(base, adapters, batch) -> (nll_sum, count)`` for one model (compiled once
    per batch shape)."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.lora import targeted as lora_lib
    from adapters_lib.train import loss as loss_lib

    net = lora_lib.wrap(model, spec) if spec is not None else model
    softcap = model.config.final_logit_softcap

    def score(base, adapters, batch):
        params = lora_lib.merge_lora(base, adapters) if spec is not None else base
        mask = loss_lib.attention_mask(batch["segment_ids"])
        out = net.apply({"params": params}, batch["tokens"], positions=batch["positions"],
                        attention_mask=mask, return_hidden_states=True)
        rows, length = batch["tokens"].shape
        chunk = loss_lib.chunk_length(length, rows, model.config.num_embed, chunk_budget)
        table = params["embedder"]["input_embedding"]
        hidden = out.hidden_states.astype(table.dtype)
        total = loss_lib.chunked_ce_sum(hidden, table, batch["targets"], batch["loss_mask"],
                                        chunk=chunk, softcap=softcap)
        return total, jnp.sum(batch["loss_mask"])

    key = (type(model).__module__, type(model).__qualname__, repr(model), repr(spec), chunk_budget)
    return _Scorer(jax.jit(score), key)


class _Scorer:
    """The jitted scorer, and its executables compiled ahead (``warm``: abstract arguments, the
    compile thread) or through the program store (the engine), by argument signature."""

    def __init__(self, jitted: Any, key: tuple):
        self.jitted, self.key = jitted, key
        self.compiled: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self._under_way: dict[tuple, threading.Event] = {}

    def warm(self, *args: Any) -> Any:
        """The executable for these arguments' signature: compiled (or read back) once; a
        caller that finds it compiling on another thread (the compile-ahead's, while ``eval
        --run`` asks) waits for that compile instead of compiling it a second time."""
        from adapters_lib import program_store
        from adapters_lib.sample.program import signature

        sig = signature(args)
        with self._lock:
            if sig in self.compiled:
                return self.compiled[sig]
            event = self._under_way.get(sig)
            mine = event is None
            if mine:
                event = self._under_way[sig] = threading.Event()
        if not mine:
            event.wait()
            return self.compiled.get(sig)  # None when that compile failed: the jitted one
        try:
            self.compiled[sig] = program_store.load_or_compile(
                "eval scorer", (self.key, sig), lambda: self.jitted.lower(*args))
        finally:
            with self._lock:
                self._under_way.pop(sig, None)
            event.set()
        return self.compiled[sig]

    def __call__(self, *args: Any) -> Any:
        from adapters_lib import program_store
        from adapters_lib.sample.program import signature

        sig = signature(args)
        fn = self.compiled.get(sig)
        if fn is None and sig not in self.compiled and (program_store.folder() is not None
                                                        or sig in self._under_way):
            fn = self.warm(*args)
        if fn is not None:
            try:
                return fn(*args)
            except (TypeError, ValueError):  # another layout than compiled for: the jitted one
                self.compiled[sig] = None
        return self.jitted(*args)


def score_tokens(model: Any, params: Any, tset: Any, *, max_length: int,
                 batch_size: int = DEFAULT_BATCH, adapters: Any = None,
                 lora_spec: LoraSpec | None = None) -> tuple[float, int]:
    """(Σ NLL, scored tokens) of a ``TokenizedSet`` (see the module doc)."""
    import jax

    from adapters_lib.data.packing import assemble
    from adapters_lib.memory.estimate import ce_chunk_budget

    if len(tset) == 0:
        return 0.0, 0
    spec = lora_spec if adapters is not None and lora_spec is not None else None
    score = _scorer(model, spec, ce_chunk_budget(jax.devices()[0]))
    rows = _rows(tset.lengths, max_length)
    width = eval_width(max(sum(int(tset.lengths[i]) for i in row) for row in rows), max_length)
    rows_per_batch = batch_size  # one shape a file, whatever its row count
    total, count = 0.0, 0
    for start in range(0, len(rows), rows_per_batch):
        batch = assemble(tset, rows[start:start + rows_per_batch], rows_per_batch, width)
        nll, n = score(params, adapters if spec is not None else None, batch)
        total += float(nll)
        count += int(round(float(n)))
    return total, count


def eval_width(longest: int, max_length: int) -> int:
    """The scored batch's width (a compiled shape): the next power of two from 32, at most
    ``max_length``."""
    return min(max_length, max(32, 1 << (int(longest) - 1).bit_length()))


def compile_behind(model: Any, params: Any, adapters: Any, cfg: Any, submit: Any,
                   batch_size: int = DEFAULT_BATCH, tokenizer: Any = None) -> Any:
    """Queue the compiles of ``eval --run``'s scorer for a LoRA run (``batch_size`` rows, its
    family's program) through ``submit(fn) -> Future``, from abstract arguments: ``[data]
    max_length`` wide, and as wide as the run's eval file scores (``eval_widths``, with the
    ``tokenizer``); the future, None when it is not a LoRA run."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.memory.estimate import ce_chunk_budget
    from adapters_lib.sample.family import serving

    if adapters is None or not cfg.lora.enabled:
        return None
    spec, adapters = serving(model, cfg.lora, adapters, cfg)
    score = _scorer(model, spec, ce_chunk_budget(jax.devices()[0]))
    widths = eval_widths(cfg, tokenizer) if tokenizer is not None else [cfg.data.max_length]

    def batch(width: int) -> dict[str, Any]:
        ints = {k: jax.ShapeDtypeStruct((batch_size, width), jnp.int32)
                for k in ("tokens", "targets", "positions", "segment_ids")}
        return {**ints, "loss_mask": jax.ShapeDtypeStruct((batch_size, width), jnp.float32)}

    def abstract(tree: Any) -> Any:
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)

    base, lora = abstract(params), abstract(adapters)
    return submit(lambda: [score.warm(base, lora, batch(w)) for w in widths])


def eval_widths(cfg: Any, tokenizer: Any) -> list[int]:
    """The scored widths of ``eval --run`` for a run (``eval_width``): the run's ``[data]
    eval_path`` as its eval would read it (when set and readable), and ``max_length``."""
    widths = [cfg.data.max_length]
    if cfg.data.eval_path:
        try:
            tset = tokenize_file(cfg.data.eval_path, tokenizer, max_length=cfg.data.max_length,
                                 field_map=cfg.data.field_map).train
            rows = _rows(tset.lengths, cfg.data.max_length)
            longest = max(sum(int(tset.lengths[i]) for i in row) for row in rows)
            widths.insert(0, eval_width(longest, cfg.data.max_length))
        except Exception as e:  # noqa: BLE001 - a warm-up guess: eval compiles it when asked
            log.info("eval scorer ahead: the run's eval file not read (%s)", e)
    return sorted(set(widths))


def tokenize_file(path: str, tokenizer: Any, *, fmt: str = "auto", max_length: int,
                  loss_on: str = "model", field_map: dict[str, str] | None = None) -> Any:
    """The file's ``Pipeline`` with every usable example in its train split (no eval split);
    a ``.txt`` file is one text, as written (``evals.text_file``)."""
    from adapters_lib.data.pipeline import build_pipeline
    from adapters_lib.evals.text_file import is_text_file, tokenize_as_written

    if is_text_file(path, fmt):
        return tokenize_as_written(path, tokenizer, max_length=max_length)

    spec = DataSpec(path=path, format=fmt, max_length=max_length, eval_fraction=0.0,
                    packing=True, loss_on=loss_on, truncation="right",
                    field_map=dict(field_map or {}), streaming=False)
    return build_pipeline(spec, tokenizer, batch_size=1, seed=0)


def evaluate_file(model: Any, params: Any, tokenizer: Any, path: str, *, fmt: str = "auto",
                  max_length: int = DEFAULT_MAX_LENGTH, loss_on: str = "model",
                  batch_size: int = DEFAULT_BATCH, adapters: Any = None,
                  lora_spec: LoraSpec | None = None,
                  field_map: dict[str, str] | None = None) -> EvalResult:
    """Loss/perplexity/tokens of ``path`` under the model (see the module doc)."""
    if max_length < 8:
        raise WorkbenchError(f"max_length is {max_length}", where="--max-length",
                             hint="use at least 8 tokens (512 is the default)")
    from adapters_lib.evals.text_file import TextFile, scored_as_written

    start = time.perf_counter()
    pipe = tokenize_file(path, tokenizer, fmt=fmt, max_length=max_length, loss_on=loss_on,
                         field_map=field_map)
    total, count = score_tokens(model, params, pipe.train, max_length=max_length,
                                batch_size=batch_size, adapters=adapters, lora_spec=lora_spec)
    if count == 0:
        raise WorkbenchError("no tokens to score in the file", where=path,
                             hint="a chat file needs model turns (or use --loss-on all)")
    loss = total / count
    report = pipe.report
    codec = TokenCodec.from_any(tokenizer)
    text = str(report.format) == "text"
    if isinstance(pipe, TextFile):
        words = scored_as_written(codec.bos, codec.eos, count, windows=len(pipe.train))
    else:
        words = scored_words(codec.bos, codec.eos, text=text, loss_on=loss_on,
                             windows=int(report.chunked) > 0)
    issues = [str(i) for i in report.issues][:20]
    return EvalResult(loss=loss, perplexity=math.exp(min(loss, 700.0)), tokens=count,
                      sequences=len(pipe.train), examples=len(np.unique(pipe.train.example)),
                      dropped=int(report.dropped), format=str(report.format), loss_on=loss_on,
                      max_length=max_length, seconds=time.perf_counter() - start, data=str(path),
                      issues=issues, scored=words, bos_id=codec.bos, eos_id=codec.eos, eos_scored=text)


def scored_words(bos: int, eos: int, *, text: bool, loss_on: str = "model", windows: bool = False) -> str:
    """One line saying which tokens ``eval`` scores, for comparing with keras-hub or llama.cpp."""
    head = f"BOS (id {bos}) first, not scored"
    if text:
        tail = "; each --max-length window starts with its own BOS" if windows else ""
        return f"{head}; every text token, then EOS (id {eos}) appended and scored{tail}"
    what = "every token after it" if loss_on == "all" else "the model turns only (end-of-turn markers included)"
    return f"{head}; {what}; no EOS added"


def evaluate(*, model: str = "", run: str = "", step: int | None = None, data: str,
             fmt: str = "auto", max_length: int | None = None, loss_on: str = "model",
             batch_size: int = DEFAULT_BATCH, quantize: str = "") -> EvalResult:
    """``eval`` end to end: load the model (or the run's base + checkpoint) and score ``data``.

    ``quantize`` (not ""): the base held that way (``[model] quantize``) instead of the run's.

    ``max_length`` defaults to the run's ``[data] max_length``, else ``DEFAULT_MAX_LENGTH``.
    """
    from pathlib import Path

    from adapters_lib.dataset_refs import is_dataset_ref

    if not is_dataset_ref(data) and not Path(data).exists():
        raise WorkbenchError(f"data file {data!r} not found", where="--data",
                             hint="a .jsonl/.json/.csv/.parquet/.txt file or a folder of them, "
                                  "a saved dataset folder[@SPLIT], or hf:NAME / tfds:NAME")
    if loss_on not in ("model", "all"):
        raise WorkbenchError(f"loss_on is {loss_on!r}", where="--loss-on", hint='use "model" or "all"')
    if step is not None and not run:
        raise WorkbenchError("--step needs --run", where="--step",
                             hint="name the run whose checkpoint to score")
    if run:
        from adapters_lib import runs

        run_dir = runs.find_run(run)
        cfg = run_dir.config()
        if model and model != cfg.model.source:
            raise WorkbenchError(f"--model {model!r} with --run: the run's base is "
                                 f"{cfg.model.source!r}", where="--model", hint="drop --model")
        if cfg.model.backend == "keras":
            raise WorkbenchError("eval scores gemma-route runs; this run used the Keras route",
                                 where="--run", hint=f"export it (gemma-workbench export "
                                 f"{run_dir.run_id} --format hf) and eval the export with --model")
        from adapters_lib.tuned import load_checkpoint

        cfg, loaded, trainable, got = load_checkpoint(run_dir, step, quantize=quantize)
        length = max_length or cfg.data.max_length
        if cfg.lora.enabled:
            from adapters_lib.sample.family import serving

            spec, adapters = serving(loaded.model, cfg.lora, trainable, cfg)  # the family's program
            result = evaluate_file(loaded.model, loaded.params, loaded.tokenizer, data, fmt=fmt,
                                   max_length=length, loss_on=loss_on, batch_size=batch_size,
                                   adapters=adapters, lora_spec=spec)
        else:
            result = evaluate_file(loaded.model, trainable, loaded.tokenizer, data, fmt=fmt,
                                   max_length=length, loss_on=loss_on, batch_size=batch_size)
        return result.replace(model=cfg.model.source, run=run_dir.run_id, step=got)
    from adapters_lib.config import ModelSpec
    from adapters_lib.models.loader import load_model

    source = model or "demo"
    loaded = load_model(ModelSpec(source=source, quantize=quantize or "none"))
    result = evaluate_file(loaded.model, loaded.params, loaded.tokenizer, data, fmt=fmt,
                           max_length=max_length or DEFAULT_MAX_LENGTH, loss_on=loss_on,
                           batch_size=batch_size)
    return result.replace(model=source)
