"""The run config (contract): TOML in, frozen validated specs out.

Parse at the edge, once: ``load_config(path, overrides)`` reads TOML, applies ``--set``
overrides, checks every key (an unknown key names the closest valid one) and every value,
and returns a ``RunConfig``. Inside the engine, functions take these specs, never dicts.
Errors cite ``file:line`` and the config key.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

from adapters_lib.errors import WorkbenchError

LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
SCHEDULES = ("constant", "linear", "cosine")
DTYPES = ("float32", "bfloat16")
BACKENDS = ("gemma", "keras")
DATA_FORMATS = ("auto", "text", "prompt_response", "alpaca", "chat", "qa")


@dataclass(frozen=True)
class ModelSpec:
    source: str = "demo"
    """"demo", a catalog id, or a path to a checkpoint folder."""
    backend: str = "gemma"
    """"gemma" (the gm API, default) or "keras" (keras-hub GemmaCausalLM)."""
    tokenizer: str = ""
    """Path to tokenizer.model; empty = found beside the weights (or the demo tokenizer)."""


@dataclass(frozen=True)
class DataSpec:
    path: str = "demo"
    format: str = "auto"
    max_length: int = 128
    eval_fraction: float = 0.05
    eval_path: str = ""
    packing: bool = True
    loss_on: str = "model"
    """"model": loss on model turns only; "all": every token."""
    truncation: str = "right"
    """"right" cuts the end of a long example, "drop" drops it."""
    field_map: dict[str, str] = field(default_factory=dict)
    """Renames source fields to the format's names, e.g. {prompt = "question"}."""


@dataclass(frozen=True)
class LoraSpec:
    enabled: bool = True
    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = LORA_TARGETS
    dtype: str = "float32"

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


@dataclass(frozen=True)
class MeshSpec:
    data: int = 1
    fsdp: int = 1
    tensor: int = -1
    """One axis may be -1: it takes what is left of the device count."""
    devices: int = 0
    """Use the first N devices; 0 = all of them."""

    def resolve(self, device_count: int) -> MeshSpec:
        """Fill the -1 axis and check the product equals ``device_count``."""
        sizes = {"data": self.data, "fsdp": self.fsdp, "tensor": self.tensor}
        fill = [k for k, v in sizes.items() if v == -1]
        known = 1
        for v in sizes.values():
            if v != -1:
                known *= v
        if fill:
            if device_count % known:
                raise WorkbenchError(
                    f"mesh {self.shape_text()} cannot fill {device_count} devices "
                    f"({device_count} is not a multiple of {known})",
                    where="[mesh]",
                    hint=f"choose sizes whose product divides {device_count}",
                )
            sizes[fill[0]] = device_count // known
        product = sizes["data"] * sizes["fsdp"] * sizes["tensor"]
        if product != device_count:
            raise WorkbenchError(
                f"mesh data×fsdp×tensor = {sizes['data']}×{sizes['fsdp']}×{sizes['tensor']} "
                f"= {product}, but there are {device_count} devices",
                where="[mesh]",
                hint=f"make the product {device_count}, or set one axis to -1 to fill",
            )
        return MeshSpec(**sizes, devices=self.devices)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.data, self.fsdp, self.tensor)

    def shape_text(self) -> str:
        return "×".join(str(s) for s in self.shape)


@dataclass(frozen=True)
class TrainSpec:
    steps: int = 200
    batch_size: int = 8
    grad_accum: int = 1
    learning_rate: float = 1e-3
    schedule: str = "cosine"
    warmup_steps: int = 10
    weight_decay: float = 0.0
    clip_norm: float = 1.0
    seed: int = 0
    eval_every: int = 50
    eval_batches: int = 4
    eval_exact_match: int = -1
    """Eval examples answered greedily for exact-match before and after training:
    -1 = all of them on the demo data, none otherwise; 0 = off; N = the first N."""
    log_every: int = 1
    checkpoint_every: int = 50
    keep_checkpoints: int = 3
    remat: bool = False
    param_dtype: str = "float32"
    compute_dtype: str = "float32"


@dataclass(frozen=True)
class RunSpec:
    name: str = ""
    dir: str = ""
    """Parent directory of run directories; empty = <data dir>/runs."""


@dataclass(frozen=True)
class RunConfig:
    model: ModelSpec = field(default_factory=ModelSpec)
    data: DataSpec = field(default_factory=DataSpec)
    lora: LoraSpec = field(default_factory=LoraSpec)
    mesh: MeshSpec = field(default_factory=MeshSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    run: RunSpec = field(default_factory=RunSpec)

    def replace(self, **sections: Any) -> RunConfig:
        return dataclasses.replace(self, **sections)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for f in fields(self):
            section = getattr(self, f.name)
            out[f.name] = {k: _plain(v) for k, v in dataclasses.asdict(section).items()}
        return out

    def to_toml(self) -> str:
        return dumps_toml(self.to_dict())


SECTIONS: dict[str, type] = {
    "model": ModelSpec,
    "data": DataSpec,
    "lora": LoraSpec,
    "mesh": MeshSpec,
    "train": TrainSpec,
    "run": RunSpec,
}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


# --------------------------------------------------------------------------- parsing


def _closest(name: str, options: list[str]) -> str:
    match = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return f"did you mean {match[0]!r}?" if match else f"valid keys: {', '.join(options)}"


def _line_index(text: str) -> dict[tuple[str, str], int]:
    """Map (section, key) to the 1-based line where the key is set in TOML text."""
    index: dict[tuple[str, str], int] = {}
    section = ""
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = re.match(r"^\[\s*([A-Za-z0-9_.\-]+)\s*\]", stripped)
        if header:
            section = header.group(1)
            index.setdefault((section, ""), n)
            continue
        key = re.match(r"^([A-Za-z0-9_\-\"']+(?:\.[A-Za-z0-9_\-]+)?)\s*=", stripped)
        if key:
            name = key.group(1).strip("\"'")
            if "." in name and not section:
                sec, name = name.split(".", 1)
                index.setdefault((sec, name), n)
            else:
                index.setdefault((section, name), n)
    return index


class _Where:
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


def _coerce(value: Any, typ: Any, where: str, key: str) -> Any:
    origin = getattr(typ, "__origin__", None)
    if typ is bool:
        if isinstance(value, bool):
            return value
        raise WorkbenchError(f"{key} must be true or false, got {value!r}", where=where)
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise WorkbenchError(f"{key} must be an integer, got {value!r}", where=where)
        return value
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise WorkbenchError(f"{key} must be a number, got {value!r}", where=where)
        return float(value)
    if typ is str:
        if not isinstance(value, str):
            raise WorkbenchError(f"{key} must be a string, got {value!r}", where=where)
        return value
    if origin is tuple:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise WorkbenchError(f"{key} must be a list of strings, got {value!r}", where=where)
        return tuple(value)
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise WorkbenchError(f"{key} must be a table of strings, got {value!r}", where=where)
        return dict(value)
    raise AssertionError(f"unhandled type {typ}")


def _build_section(name: str, raw: Any, where: _Where) -> Any:
    cls = SECTIONS[name]
    if not isinstance(raw, dict):
        raise WorkbenchError(f"[{name}] must be a table", where=where(name))
    hints = get_type_hints(cls)
    valid = [f.name for f in fields(cls)]
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in valid:
            raise WorkbenchError(
                f"unknown key {name}.{key}", where=where(name, key), hint=_closest(key, valid)
            )
        values[key] = _coerce(value, hints[key], where(name, key), f"{name}.{key}")
    return cls(**values)


def _check(cfg: RunConfig, where: _Where) -> RunConfig:
    def fail(section: str, key: str, message: str, hint: str | None = None) -> None:
        raise WorkbenchError(message, where=where(section, key), hint=hint)

    m, d, lo, me, t = cfg.model, cfg.data, cfg.lora, cfg.mesh, cfg.train
    if not m.source.strip():
        fail("model", "source", "model.source is empty", 'use "demo", a catalog id or a path')
    if m.backend not in BACKENDS:
        fail("model", "backend", f"model.backend is {m.backend!r}", f"expected one of {', '.join(BACKENDS)}")
    if d.format not in DATA_FORMATS:
        fail("data", "format", f"data.format is {d.format!r}", _closest(d.format, list(DATA_FORMATS)))
    if d.max_length < 8:
        fail("data", "max_length", f"data.max_length is {d.max_length}", "use at least 8 tokens")
    if not 0.0 <= d.eval_fraction < 1.0:
        fail("data", "eval_fraction", f"data.eval_fraction is {d.eval_fraction}", "use a fraction in [0, 1)")
    if d.loss_on not in ("model", "all"):
        fail("data", "loss_on", f"data.loss_on is {d.loss_on!r}", 'expected "model" or "all"')
    if d.truncation not in ("right", "drop"):
        fail("data", "truncation", f"data.truncation is {d.truncation!r}", 'expected "right" or "drop"')
    targets = lo.targets
    if targets == ("all",):
        targets = LORA_TARGETS
    for tname in targets:
        if tname not in LORA_TARGETS:
            fail("lora", "targets", f"unknown LoRA target {tname!r}",
                 f"{_closest(tname, list(LORA_TARGETS))} (targets are {' '.join(LORA_TARGETS)} or \"all\")")
    if lo.enabled and not targets:
        fail("lora", "targets", "lora.targets is empty", "name at least one of q k v o gate up down")
    if lo.rank < 1:
        fail("lora", "rank", f"lora.rank is {lo.rank}", "use a positive rank such as 8")
    if lo.alpha <= 0:
        fail("lora", "alpha", f"lora.alpha is {lo.alpha}", "use a positive alpha such as 2×rank")
    for key, value in (("dtype", lo.dtype),):
        if value not in DTYPES:
            fail("lora", key, f"lora.{key} is {value!r}", f"expected one of {', '.join(DTYPES)}")
    for key in ("data", "fsdp", "tensor"):
        v = getattr(me, key)
        if v == 0 or v < -1:
            fail("mesh", key, f"mesh.{key} is {v}", "use a positive size, or -1 to fill")
    if me.devices < 0:
        fail("mesh", "devices", f"mesh.devices is {me.devices}", "use 0 (all devices) or a positive count")
    if sum(1 for v in me.shape if v == -1) > 1:
        fail("mesh", "", "more than one mesh axis is -1", "at most one axis may fill")
    positive = ("steps", "batch_size", "grad_accum", "eval_every", "checkpoint_every", "log_every",
                "keep_checkpoints", "eval_batches")
    for key in positive:
        if getattr(t, key) < 1:
            fail("train", key, f"train.{key} is {getattr(t, key)}", "use a positive integer")
    if t.learning_rate <= 0:
        fail("train", "learning_rate", f"train.learning_rate is {t.learning_rate}", "use a positive rate such as 1e-3")
    if t.schedule not in SCHEDULES:
        fail("train", "schedule", f"train.schedule is {t.schedule!r}", _closest(t.schedule, list(SCHEDULES)))
    if t.warmup_steps < 0:
        fail("train", "warmup_steps", f"train.warmup_steps is {t.warmup_steps}", "use 0 or more")
    if t.clip_norm < 0 or t.weight_decay < 0:
        fail("train", "clip_norm", "train.clip_norm and train.weight_decay must be ≥ 0")
    for key in ("param_dtype", "compute_dtype"):
        value = getattr(t, key)
        if value not in DTYPES:
            fail("train", key, f"train.{key} is {value!r}", f"expected one of {', '.join(DTYPES)}")
    return cfg.replace(lora=dataclasses.replace(lo, targets=tuple(targets)))


def parse_override(item: str) -> tuple[str, str, Any]:
    """``"train.steps=20"`` → ("train", "steps", 20). Values are TOML; bare words are strings."""
    if "=" not in item:
        raise WorkbenchError(f"--set {item!r} has no '='", where="--set", hint="use --set section.key=value")
    dotted, text = item.split("=", 1)
    dotted = dotted.strip()
    if dotted.count(".") != 1:
        raise WorkbenchError(
            f"--set {dotted!r} is not section.key", where="--set",
            hint=f"sections are {', '.join(SECTIONS)}; e.g. --set train.steps=20",
        )
    section, key = dotted.split(".")
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = text.strip()
    return section, key, value


def config_from_dict(
    raw: dict[str, Any], *, source: str = "<config>", text: str = "",
    overrides: list[str] | tuple[str, ...] = (),
) -> RunConfig:
    where = _Where(source, _line_index(text) if text else {})
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for item in overrides:
        section, key, value = parse_override(item)
        raw.setdefault(section, {})
        if isinstance(raw[section], dict):
            raw[section][key] = value
        where.overrides.add((section, key))
    sections: dict[str, Any] = {}
    for name, value in raw.items():
        if name not in SECTIONS:
            raise WorkbenchError(
                f"unknown section [{name}]", where=where(name), hint=_closest(name, list(SECTIONS))
            )
        sections[name] = _build_section(name, value, where)
    cfg = _check(RunConfig(**sections), where)
    # options one backend has and the other lacks (pure; keras is not imported)
    from adapters_lib.keras_route.options import check_backend_options

    check_backend_options(cfg)
    return cfg


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Read a TOML run config (or the defaults when ``path`` is None) and validate it."""
    if path is None:
        return config_from_dict({}, source="<defaults>", overrides=overrides)
    p = Path(path)
    if not p.is_file():
        raise WorkbenchError(f"config file {str(p)!r} not found", where=str(p),
                             hint="pass the path of a .toml run config")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise WorkbenchError(f"config is not UTF-8 text ({e.reason})", where=str(p)) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        # Python 3.14 gives .lineno/.msg; 3.12 only says "(at line N, column M)" in the text.
        at = re.search(r"\s*\(at line (\d+), column \d+\)", str(e))
        line = getattr(e, "lineno", None) or (int(at.group(1)) if at else None)
        msg = getattr(e, "msg", None) or (str(e)[:at.start()] if at else str(e))
        raise WorkbenchError(f"invalid TOML: {msg}", where=f"{p}:{line}" if line else str(p),
                             hint="fix the syntax at that line") from None
    return config_from_dict(raw, source=str(p), text=text, overrides=overrides)


# --------------------------------------------------------------------------- writing


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def dumps_toml(data: dict[str, dict[str, Any]]) -> str:
    """Write a two-level table (sections of scalars) as TOML."""
    chunks = []
    for section, values in data.items():
        lines = [f"[{section}]"] + [f"{k} = {_toml_value(v)}" for k, v in values.items()]
        chunks.append("\n".join(lines))
    return "\n\n".join(chunks) + "\n"
