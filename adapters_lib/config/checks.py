"""The run config's checks: where a key was set and value ranges (``[sweep]``:
``config.sweep``; paths: ``config.paths``).

Used by ``adapters_lib.config`` only (the public API lives there). Every failure is a
``WorkbenchError`` whose ``where`` is ``file:line [section] key`` (or the ``--set`` item).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import fields
from typing import Any, get_type_hints

from adapters_lib.errors import WorkbenchError
from adapters_lib.jsontypes import coerce

INT32_MAX = 2**31 - 1
SEED_MAX = 2**32 - 1
MAX_LENGTH_MAX = 1 << 20
"""A million tokens per row is far beyond any Gemma context; a bigger value is a typo."""

PATH_KEYS = (("model", "tokenizer"), ("model", "quantize_calibration"), ("data", "path"),
             ("data", "eval_path"), ("run", "dir"))
"""Keys that always hold a path ("" = unset, data.path and model.quantize_calibration "demo" =
the built-in data; both also take a dataset reference)."""
DATA_KEYS = (("model", "quantize_calibration"), ("data", "path"), ("data", "eval_path"))
"""Path keys that name data: an ``hf:``/``tfds:`` reference is parsed, not resolved."""
LINE_KEYS = (("model", "source"), ("model", "backend"), ("run", "name")) + PATH_KEYS
"""Keys whose value is one line of text: control characters are refused."""


CONTROL = re.compile(r"[\x00-\x1f\x7f]")
"""Control characters (tab and newline included): never part of a name, a path or an id."""


def check_line_text(value: str, *, key: str, where: str | None = None) -> str:
    """A one-line text value (a name, a path, an id): no control characters, no NUL."""
    m = CONTROL.search(value)
    if m:
        raise WorkbenchError(f"{key} holds a control character ({m.group()!r} at position "
                             f"{m.start() + 1})", where=where, hint="remove it")
    return value


def closest(name: str, options: list[str]) -> str:
    match = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return f"did you mean {match[0]!r}?" if match else f"valid keys: {', '.join(options)}"


_KEY = r'(?:[A-Za-z0-9_\-]+|"[^"\n]*"|\'[^\'\n]*\')'


def _unquote(part: str) -> str:
    part = part.strip()
    return part[1:-1] if len(part) >= 2 and part[0] == part[-1] and part[0] in "\"'" else part


def _split_dotted(text: str) -> list[str]:
    return [_unquote(p) for p in re.findall(_KEY, text)]


def line_index(text: str) -> dict[tuple[str, str], int]:
    """Map (section, key) to the 1-based line where the key is set in TOML text.

    ``[data.field_map]`` and ``data.field_map = {…}`` both index as ("data", "field_map").
    """
    index: dict[tuple[str, str], int] = {}
    section: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = re.match(rf"^\[\[?\s*({_KEY}(?:\s*\.\s*{_KEY})*)\s*\]", stripped)
        if header:
            section = _split_dotted(header.group(1))
            index.setdefault((section[0], ""), n)
            if len(section) > 1:
                index.setdefault((section[0], section[1]), n)
            continue
        key = re.match(rf"^({_KEY}(?:\s*\.\s*{_KEY})*)\s*=", stripped)
        if key:
            path = section + _split_dotted(key.group(1))
            if len(path) == 1:
                index.setdefault((path[0], ""), n)
            else:
                index.setdefault((path[0], path[1]), n)
    return index


class Where:
    """Renders where a key was set: ``file:line [section] key`` or ``--set section.key``."""

    def __init__(self, source: str, lines: dict[tuple[str, str], int]):
        self.source = source
        self.lines = lines
        self.overrides: set[tuple[str, str]] = set()

    def __call__(self, section: str, key: str = "") -> str:
        if (section, key) in self.overrides:
            return f"--set {section}.{key}" if key else f"--set {section}"
        line = self.lines.get((section, key)) or self.lines.get((section, ""))
        loc = f"{self.source}:{line}" if line else self.source
        return f"{loc} [{section}]" + (f" {key}" if key else "")


def build_section(cls: type, name: str, raw: Any, where: Where) -> Any:
    """One section's dataclass from its TOML table, every key and type checked."""
    if not isinstance(raw, dict):
        raise WorkbenchError(f"[{name}] must be a table, got {type(raw).__name__}",
                             where=where(name), hint=f"write it as a [{name}] section")
    hints = get_type_hints(cls)
    valid = [f.name for f in fields(cls)]
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in valid:
            raise WorkbenchError(f"unknown key {name}.{key}", where=where(name, key),
                                 hint=closest(key, valid))
        if (name, key) == ("lora", "targets") and isinstance(value, str):
            value = value.split() if value.strip() != "all" else ["all"]
        if (name, key) == ("train", "eval_metrics") and isinstance(value, str):
            value = [v for v in re.split(r"[\s,]+", value) if v]
        values[key] = coerce(value, hints[key], key=f"{name}.{key}", where=where(name, key))
    return cls(**values)


# --------------------------------------------------------------------------- values

_POSITIVE = ("steps", "batch_size", "grad_accum", "eval_every", "checkpoint_every", "log_every",
             "keep_checkpoints", "eval_batches", "eval_examples")
EVAL_MAX_NEW_TOKENS = 4096
"""A generated eval answer longer than this is a typo (each eval step decodes it greedily)."""


def check_values(cfg: Any, where: Where, *, lora_targets: tuple[str, ...], schedules: tuple[str, ...],
                 dtypes: tuple[str, ...], backends: tuple[str, ...], data_formats: tuple[str, ...],
                 eval_metrics: tuple[str, ...] = (), quantize_modes: tuple[str, ...] = ("none",),
                 programs: tuple[str, ...] = ("auto",)) -> Any:
    """Every value in range; returns ``cfg`` with ``lora.targets = "all"`` expanded."""
    def fail(section: str, key: str, message: str, hint: str | None = None) -> None:
        raise WorkbenchError(message, where=where(section, key), hint=hint)

    for section, key in LINE_KEYS:
        value = getattr(getattr(cfg, section), key)
        check_line_text(value, key=f"{section}.{key}", where=where(section, key))
        if value != value.strip():
            fail(section, key, f"{section}.{key} {value!r} starts or ends with a space",
                 f"did you mean {value.strip()!r}?")
    for key, value in cfg.data.field_map.items():
        check_line_text(key, key="data.field_map key", where=where("data", "field_map"))
        check_line_text(value, key=f"data.field_map.{key}", where=where("data", "field_map"))
        if not key.strip() or not value.strip():
            fail("data", "field_map", f"data.field_map has an empty name ({key!r} = {value!r})",
                 'write it as {prompt = "question"}')
    for key, value in cfg.data.labels.items():
        check_line_text(key, key="data.labels key", where=where("data", "labels"))
        check_line_text(value, key=f"data.labels.{key}", where=where("data", "labels"))
        if not key.strip() or not value.strip():
            fail("data", "labels", f"data.labels has an empty label or answer ({key!r} = {value!r})",
                 'write it as {0 = "negative", 1 = "positive"}')
    for sec in fields(cfg):
        section = getattr(cfg, sec.name)
        for f in fields(section):
            value = getattr(section, f.name)
            if (isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT32_MAX
                    and (sec.name, f.name) != ("train", "seed")):
                fail(sec.name, f.name, f"{sec.name}.{f.name} is {value}",
                     f"use at most {INT32_MAX}")

    m, d, lo, me, t = cfg.model, cfg.data, cfg.lora, cfg.mesh, cfg.train
    if not m.source:
        fail("model", "source", "model.source is empty", 'use "demo", a catalog id or a path')
    if m.backend not in backends:
        fail("model", "backend", f"model.backend is {m.backend!r}", f"expected one of {', '.join(backends)}")
    if m.quantize not in quantize_modes:
        fail("model", "quantize", f"model.quantize is {m.quantize!r}",
             f"expected one of {', '.join(quantize_modes)}")
    table_modes = ("auto", "none", *(q for q in quantize_modes if q not in ("none", "gguf")))
    if m.quantize_embedding not in table_modes:
        fail("model", "quantize_embedding", f"model.quantize_embedding is {m.quantize_embedding!r}",
             f"expected one of {', '.join(table_modes)}")
    if m.quantize_embedding != "auto" and m.quantize in ("none", "gguf"):
        fail("model", "quantize_embedding", f"model.quantize_embedding = {m.quantize_embedding!r} "
             f"with quantize = {m.quantize!r}",
             'set quantize = "int8", "int4" or "nf4", or quantize_embedding = "auto"')
    if m.quantize_method not in ("rtn", "gptq"):  # config.QUANTIZE_METHODS
        fail("model", "quantize_method", f"model.quantize_method is {m.quantize_method!r}",
             'expected "rtn" (round to nearest) or "gptq" (calibrated on text)')
    if m.quantize_method == "gptq" and m.quantize in ("none", "gguf"):
        fail("model", "quantize_method", f'model.quantize_method = "gptq" with quantize = {m.quantize!r}',
             'set quantize = "int8", "int4" or "nf4" (GPTQ chooses their rounding), or quantize_method = "rtn"')
    if m.quantize_calibration and m.quantize_method != "gptq":
        fail("model", "quantize_calibration", "model.quantize_calibration is read by GPTQ only",
             'set quantize_method = "gptq", or remove quantize_calibration')
    if m.generation_dtype not in ("", "float32", "bfloat16"):
        fail("model", "generation_dtype", f"model.generation_dtype is {m.generation_dtype!r}",
             'expected "" (as trained), "float32" or "bfloat16"')
    if m.generation_dtype and m.backend == "keras":
        fail("model", "generation_dtype", "model.generation_dtype is gemma-route only",
             "leave it empty for a Keras-route run (it generates in its run's dtype)")
    if not 1 <= m.quantize_tile_size <= 1 << 20:
        fail("model", "quantize_tile_size", f"model.quantize_tile_size is {m.quantize_tile_size}",
             "use a positive tile that divides the projections' dims, e.g. 64")
    if not d.path:
        fail("data", "path", "data.path is empty", 'use "demo" or a data file or folder')
    if d.format not in data_formats:
        fail("data", "format", f"data.format is {d.format!r}", closest(d.format, list(data_formats)))
    if not 8 <= d.max_length <= MAX_LENGTH_MAX:
        fail("data", "max_length", f"data.max_length is {d.max_length}",
             f"use between 8 and {MAX_LENGTH_MAX} tokens")
    if not 0.0 <= d.eval_fraction < 1.0:
        fail("data", "eval_fraction", f"data.eval_fraction is {d.eval_fraction}", "use a fraction in [0, 1)")
    if d.loss_on not in ("model", "all"):
        fail("data", "loss_on", f"data.loss_on is {d.loss_on!r}", 'expected "model" or "all"')
    if d.truncation not in ("right", "drop"):
        fail("data", "truncation", f"data.truncation is {d.truncation!r}", 'expected "right" or "drop"')
    targets = lo.targets
    if targets == ("all",):  # every projection target; a MoE's ``experts`` is asked by name
        targets = tuple(t for t in lora_targets if t != "experts")
    for tname in targets:
        if tname not in lora_targets:
            fail("lora", "targets", f"unknown LoRA target {tname!r}",
                 f"{closest(tname, list(lora_targets))} (targets are {' '.join(lora_targets)} or \"all\")")
    if len(set(targets)) != len(targets):
        fail("lora", "targets", f"lora.targets names a target twice ({' '.join(targets)})",
             "name each target once")
    if lo.enabled and not targets:
        fail("lora", "targets", "lora.targets is empty", "name at least one of q k v o gate up down")
    if lo.rank < 1:
        fail("lora", "rank", f"lora.rank is {lo.rank}", "use a positive rank such as 8")
    if lo.alpha <= 0:
        fail("lora", "alpha", f"lora.alpha is {lo.alpha}", "use a positive alpha such as 2×rank")
    if lo.dtype not in dtypes:
        fail("lora", "dtype", f"lora.dtype is {lo.dtype!r}", f"expected one of {', '.join(dtypes)}")
    for key in ("data", "fsdp", "tensor"):
        v = getattr(me, key)
        if v == 0 or v < -1:
            fail("mesh", key, f"mesh.{key} is {v}", "use a positive size, or -1 to fill")
    if me.devices < 0:
        fail("mesh", "devices", f"mesh.devices is {me.devices}", "use 0 (all devices) or a positive count")
    if sum(1 for v in me.shape if v == -1) > 1:
        fail("mesh", "", "more than one mesh axis is -1", "at most one axis may fill")
    for key in _POSITIVE:
        if getattr(t, key) < 1:
            fail("train", key, f"train.{key} is {getattr(t, key)}", "use a positive integer")
    if t.learning_rate <= 0:
        fail("train", "learning_rate", f"train.learning_rate is {t.learning_rate}",
             "use a positive rate such as 1e-3")
    if t.schedule not in schedules:
        fail("train", "schedule", f"train.schedule is {t.schedule!r}", closest(t.schedule, list(schedules)))
    if t.warmup_steps < 0:
        fail("train", "warmup_steps", f"train.warmup_steps is {t.warmup_steps}", "use 0 or more")
    if t.clip_norm < 0:
        fail("train", "clip_norm", f"train.clip_norm is {t.clip_norm}", "use 0 (off) or a positive norm")
    if t.weight_decay < 0:
        fail("train", "weight_decay", f"train.weight_decay is {t.weight_decay}", "use 0 or more")
    if not 0 <= t.seed <= SEED_MAX:
        fail("train", "seed", f"train.seed is {t.seed}", f"use an integer from 0 to {SEED_MAX}")
    if t.eval_exact_match < -1:
        fail("train", "eval_exact_match", f"train.eval_exact_match is {t.eval_exact_match}",
             "use -1 (all on the demo data), 0 (off) or a positive count")
    if t.programs not in programs:
        fail("train", "programs", f"train.programs is {t.programs!r}", f"expected one of {', '.join(programs)}")
    if t.rank_bucket < 0 or (t.rank_bucket and lo.enabled and t.rank_bucket < lo.rank):
        fail("train", "rank_bucket", f"train.rank_bucket is {t.rank_bucket}, below lora.rank {lo.rank}"
             if t.rank_bucket > 0 else f"train.rank_bucket is {t.rank_bucket}",
             f"use 0 (the rule) or a bucket of at least {lo.rank}")
    for key in ("param_dtype", "compute_dtype"):
        value = getattr(t, key)
        if value not in dtypes:
            fail("train", key, f"train.{key} is {value!r}", f"expected one of {', '.join(dtypes)}")
    if eval_metrics:
        _check_eval_keys(t, fail, eval_metrics)
    _check_objective(t, lo, fail, m.backend)
    return dataclasses.replace(cfg, lora=dataclasses.replace(lo, targets=tuple(targets)))


OBJECTIVES = ("sft", "dpo")
REFERENCE = re.compile(r"^run:([A-Za-z0-9][A-Za-z0-9_.-]*)(?:@(\d+))?$")


def _check_objective(t: Any, lo: Any, fail: Any, backend: str = "gemma") -> None:
    """``train.objective`` and DPO's ``beta``, ``label_smoothing``, ``sft_weight``, ``reference``."""
    if t.objective not in OBJECTIVES:
        fail("train", "objective", f"train.objective is {t.objective!r}",
             f"{closest(t.objective, list(OBJECTIVES))} (objectives are {', '.join(OBJECTIVES)})")
    if not t.beta > 0:
        fail("train", "beta", f"train.beta is {t.beta}", "use a positive strength such as 0.1")
    if not 0 <= t.label_smoothing < 0.5:
        fail("train", "label_smoothing", f"train.label_smoothing is {t.label_smoothing}",
             "use a fraction in [0, 0.5), e.g. 0 (plain DPO) or 0.1")
    if not 0 <= t.sft_weight < float("inf"):
        fail("train", "sft_weight", f"train.sft_weight is {t.sft_weight}",
             "use 0 (plain DPO) or a positive weight such as 1.0")
    if t.reference != "base" and not REFERENCE.match(t.reference):
        fail("train", "reference", f"train.reference is {t.reference!r}",
             'use "base" (the adapters off) or "run:ID" / "run:ID@STEP" (a run\'s adapters)')
    if t.objective != "sft" and backend == "keras":
        fail("train", "objective", f"train.objective = {t.objective!r} runs on the gemma route only",
             'use model.backend = "gemma" (the Keras route trains sft)')
    if t.objective == "dpo" and not lo.enabled:
        fail("lora", "enabled", "train.objective = \"dpo\" trains LoRA adapters: lora.enabled is false",
             "set lora.enabled = true (the reference is the base with the adapters off: no second copy)")


def _check_eval_keys(t: Any, fail: Any, names: tuple[str, ...]) -> None:
    """``train.eval_metrics``, ``best_metric`` and the early stop."""
    metrics_hint = f"metrics are {', '.join(names)}"
    for name in t.eval_metrics:
        if name not in names:
            fail("train", "eval_metrics", f"unknown eval metric {name!r}",
                 f"{closest(name, list(names))} ({metrics_hint})")
    if len(set(t.eval_metrics)) != len(t.eval_metrics):
        fail("train", "eval_metrics", "train.eval_metrics names a metric twice", "name each metric once")
    if t.best_metric and t.best_metric not in names:
        fail("train", "best_metric", f"train.best_metric is {t.best_metric!r}",
             f"{closest(t.best_metric, list(names))} ({metrics_hint})")
    if t.early_stop_patience < 0:
        fail("train", "early_stop_patience", f"train.early_stop_patience is {t.early_stop_patience}",
             "use 0 (off) or the number of evals without improvement to stop after")
    if t.early_stop_min_delta < 0:
        fail("train", "early_stop_min_delta", f"train.early_stop_min_delta is {t.early_stop_min_delta}",
             "use 0 or a positive improvement")
    if not 0 <= t.eval_max_new_tokens <= EVAL_MAX_NEW_TOKENS:
        fail("train", "eval_max_new_tokens", f"train.eval_max_new_tokens is {t.eval_max_new_tokens}",
             f"use 0 (the longest reference + 16) or up to {EVAL_MAX_NEW_TOKENS} tokens")
