"""The run config (contract): TOML in, frozen validated specs out.

Parse at the edge, once: ``load_config(path, overrides)`` reads TOML, applies ``--set``
overrides, checks every key (an unknown key names the closest valid one) and every value
(types, ranges, finite numbers), makes every path absolute (a file's paths against its
folder, ``--set`` paths against the current directory, ``~`` expanded) and returns a
``RunConfig``. Inside the engine, functions take these specs, never dicts. Errors cite
``file:line`` and the config key. ``RunConfig.to_toml()`` writes with ``tomli_w`` and what it
writes loads back to the same config.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import tomli_w

from adapters_lib.config import checks
from adapters_lib.config.backends import check_backend_options
from adapters_lib.config.paths import cwd, resolve_paths
from adapters_lib.config.sweep import check_sweep
from adapters_lib.config.toml import read_toml
from adapters_lib.errors import WorkbenchError

LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
"""The projection targets every family has (the default)."""
ALL_LORA_TARGETS = (*LORA_TARGETS, "experts")
"""Every target a family may offer (``experts``: a MoE expert bank, Gemma 4; asked by name)."""
SCHEDULES = ("constant", "linear", "cosine")
DTYPES = ("float32", "bfloat16")
BACKENDS = ("gemma", "keras")
QUANTIZE_MODES = ("none", "int8", "int4", "nf4", "gguf")
PROGRAMS = ("auto", "family", "exact")
"""``train.programs``: how the train step covers LoRA tweaks (``lora.family``)."""
"""``[model] quantize`` (contract): how the frozen base is held (``models.quantize``)."""
QUANTIZE_METHODS = ("rtn", "gptq")
"""``[model] quantize_method`` (contract): round to nearest, or GPTQ (``models.quantize.quantize_gptq``)."""
DATA_FORMATS = ("auto", "text", "prompt_response", "alpaca", "chat", "qa")
EVAL_METRICS = ("loss", "perplexity", "exact_match", "contains", "rouge_l", "numeric_match")
"""The task metrics (contract names; ``adapters_lib.evals.metrics`` computes them)."""


@dataclass(frozen=True)
class ModelSpec:
    source: str = "demo"
    """"demo", a catalog id, or a path to a checkpoint folder."""
    backend: str = "gemma"
    """"gemma" (the gm API, default) or "keras" (keras-hub GemmaCausalLM)."""
    tokenizer: str = ""
    """Path to tokenizer.model; empty = found beside the weights (or the demo tokenizer)."""
    quantize: str = "none"
    """The frozen base held quantized on the device (weight-only): "none", "int8", "int4",
    "nf4", or "gguf" (a GGUF's own blocks where they map; ``models.quantize``)."""
    quantize_tile_size: int = 64
    """Weights per scale along each projection's contracted axis; must divide it."""
    quantize_embedding: str = "auto"
    """How the embedding/logits table is held under ``quantize``: "auto" (like the projections;
    a GGUF's own blocks for "gguf"), "none" (the param dtype), "int8", "int4" or "nf4"."""
    quantize_method: str = "rtn"
    """How the projections are rounded under ``quantize`` (contract): "rtn" (to nearest, per
    tile) or "gptq" (GPTQ on calibration text: ``models.quantize.quantize_gptq``)."""
    quantize_calibration: str = ""
    """GPTQ's calibration text: any ``[data] path`` value; "" = the run's own ``[data] path``."""
    generation_dtype: str = ""
    """The base's dtype when this run generates (sample, compare): "" = as trained
    (``train.param_dtype``), "bfloat16" = a bf16 copy of a float base (half the bytes a token
    reads; made once, kept), "float32"."""


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
    labels: dict[str, str] = field(default_factory=dict)
    """Classification as generation: a record's ``label`` value → the answer text, e.g.
    {0 = "negative", 1 = "positive"}; the record's text is the prompt."""
    streaming: bool | Literal["auto"] = "auto"
    """Read an ``hf:``/``tfds:`` dataset a block at a time instead of whole: true, false, or
    "auto" (when it has more than ``data.streaming.AUTO_ROWS`` rows)."""


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
        if known < 1 or len(fill) > 1:  # a 0 (or a negative) size: a RunConfig refuses it too
            raise WorkbenchError(f"mesh {self.shape_text()}: each axis is ≥ 1, or -1 on one "
                                 "axis to fill", where="[mesh]", hint="e.g. data = 1, tensor = -1")
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
                f"= {product}, but there {'is' if device_count == 1 else 'are'} {device_count} "
                f"device{'s' if device_count != 1 else ''}",
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
    eval_metrics: tuple[str, ...] = ()
    """Metrics scored on the eval split at each eval and at the end, for the base and the
    tuned model, into eval.jsonl (names in ``EVAL_METRICS``). Empty = loss and perplexity,
    plus exact_match where ``eval_exact_match`` asks for it (the demo data)."""
    eval_examples: int = 64
    """Eval examples answered (greedy) for the generated metrics: the first N of the split."""
    eval_max_new_tokens: int = 0
    """Tokens a generated answer may take; 0 = the rule: the longest reference + 16, ≤ 256."""
    best_metric: str = ""
    """The metric that names the best checkpoint (kept whatever ``keep_checkpoints`` says);
    "" = none (``--step best`` then picks by eval loss)."""
    early_stop_patience: int = 0
    """Stop after N evals without improvement of ``best_metric`` ("loss" when unset); 0 = off."""
    early_stop_min_delta: float = 0.0
    """An eval improves only by more than this (in the metric's units)."""
    log_every: int = 1
    checkpoint_every: int = 50
    keep_checkpoints: int = 3
    remat: bool = False
    programs: str = "auto"
    """How the train step's compiled program covers LoRA tweaks (``lora.family``): "family" —
    the adapters padded to a rank bucket, every target present (the unchosen ones masked), alpha
    a runtime value, so a change of rank within the bucket, alpha or targets compiles nothing;
    "exact" — the run's own rank and targets (fewest FLOPs; each change compiles); "auto" — a
    family on an accelerator (a TPU compile is ~90 s), exact on a CPU (seconds)."""
    rank_bucket: int = 0
    """With a family program: the rank the adapters are padded to (0 = the rule: the next
    multiple of 128 on a TPU, the next power of two from 16 elsewhere)."""
    param_dtype: str = "float32"
    compute_dtype: str = "float32"
    objective: str = "sft"
    """What the step minimises (``train.objectives``): "sft" (the answer tokens' cross-entropy)
    or "dpo" (preference pairs: chosen over rejected, against a frozen reference)."""
    beta: float = 0.1
    """DPO: the strength of the reference's pull (the β of the DPO paper)."""
    label_smoothing: float = 0.0
    """DPO: the assumed fraction of flipped labels (conservative DPO), in [0, 0.5)."""
    reference: str = "base"
    """DPO: the reference model: "base" (the same params with the adapters off) or
    "run:ID[@STEP]" (that run's adapters, at STEP or its latest checkpoint)."""
    sft_weight: float = 1.0
    """DPO: the weight of the chosen answers' cross-entropy (per token) added to the loss
    (LLaMA-Factory's ``pref_ftx``, TRL's ``rpo_alpha``, RPO's 1); 0 = plain DPO, which from a
    pretrained base saturates the reward without changing the answers (docs/dpo.md)."""
    length_norm: bool = False
    """DPO: the margin compares the answers' log-probs per token (their means) instead of
    their sums (length-normalised DPO, as SimPO scores answers); use a larger ``beta`` (1-2)."""


@dataclass(frozen=True)
class RunSpec:
    name: str = ""
    dir: str = ""
    """Parent directory of run directories; empty = <data dir>/runs."""


@dataclass(frozen=True)
class SweepSpec:
    """A grid of configs (``gemma-workbench sweep``); a sweep's runs also name their point."""

    grid: dict[str, Any] = field(default_factory=dict)
    """``{"lora.rank" = [4, 8], "train.learning_rate" = [1e-4, 3e-4]}``: one run per point."""
    metric: str = ""
    """The metric that ranks the points; "" = ``train.best_metric``, else "loss"."""
    name: str = ""
    """Part of the sweep id and of its runs' names (``run.name`` when empty)."""
    id: str = ""
    """Set by the workbench on each run of a sweep: the sweep it belongs to."""
    point: dict[str, Any] = field(default_factory=dict)
    """Set by the workbench on each run of a sweep: its values of the grid's keys."""


@dataclass(frozen=True)
class RunConfig:
    model: ModelSpec = field(default_factory=ModelSpec)
    data: DataSpec = field(default_factory=DataSpec)
    lora: LoraSpec = field(default_factory=LoraSpec)
    mesh: MeshSpec = field(default_factory=MeshSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    run: RunSpec = field(default_factory=RunSpec)
    sweep: SweepSpec = field(default_factory=SweepSpec)

    def replace(self, **sections: Any) -> RunConfig:
        return dataclasses.replace(self, **sections)

    def model_spec(self) -> ModelSpec:
        """``[model]`` as a load of this run reads it: GPTQ's ``quantize_calibration = ""`` is
        the run's own ``[data] path`` (kept "" in the config, so a changed data path moves it)."""
        m = self.model
        if m.quantize_method == "gptq" and not m.quantize_calibration:
            return dataclasses.replace(m, quantize_calibration=self.data.path)
        return m

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
    "sweep": SweepSpec,
}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


# --------------------------------------------------------------------------- parsing


def parse_override(item: str) -> tuple[str, str, Any]:
    """``"train.steps=20"`` → ("train", "steps", 20). Values are TOML; bare words are strings."""
    if "=" not in item:
        raise WorkbenchError(f"--set {item!r} has no '='", where="--set", hint="use --set section.key=value")
    dotted, text = item.split("=", 1)
    dotted = dotted.strip()
    if dotted.count(".") != 1 or not all(dotted.split(".")):
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
    base_dir: str | Path | None = None, overrides_dir: str | Path | None = None,
) -> RunConfig:
    """Validate a config given as a dict (a parsed TOML table, a JSON body, the TUI's form).

    ``base_dir``: the folder the dict's relative paths are relative to (a config file's
    folder); ``overrides_dir``: the same for ``overrides`` (the current directory of the
    command line). Left None, a relative path is refused (the engine cannot know it).
    """
    where = checks.Where(source, checks.line_index(text) if text else {})
    if not isinstance(raw, dict):
        raise WorkbenchError("a config must be a table of sections", where=source)
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for item in overrides:
        section, key, value = parse_override(item)
        if section not in raw:
            where.overrides.add((section, ""))  # a section only --set names: blame the --set
        raw.setdefault(section, {})
        if isinstance(raw[section], dict):
            raw[section][key] = value
        where.overrides.add((section, key))
    sections: dict[str, Any] = {}
    for name, value in raw.items():
        if name not in SECTIONS:
            if not isinstance(value, dict):
                raise WorkbenchError(f"key {name!r} is outside any section", where=where(name),
                                     hint=f"put it under its section, e.g. [train] {name} = …")
            raise WorkbenchError(
                f"unknown section [{name}]", where=where(name), hint=checks.closest(name, list(SECTIONS))
            )
        sections[name] = checks.build_section(SECTIONS[name], name, value, where)
    cfg = checks.check_values(RunConfig(**sections), where, lora_targets=ALL_LORA_TARGETS,
                              schedules=SCHEDULES, dtypes=DTYPES, backends=BACKENDS,
                              quantize_modes=QUANTIZE_MODES, programs=PROGRAMS,
                              data_formats=DATA_FORMATS, eval_metrics=EVAL_METRICS)
    cfg = check_sweep(cfg, where, SECTIONS, eval_metrics=EVAL_METRICS)
    cfg = resolve_paths(cfg, where, base_dir=Path(base_dir) if base_dir else None,
                               overrides_dir=Path(overrides_dir) if overrides_dir else None)
    check_backend_options(cfg)  # options one backend has and the other lacks
    return cfg


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Read a TOML run config (or the defaults when ``path`` is None) and validate it.

    The file's relative paths resolve against its folder; ``overrides`` (``--set``) against
    the current directory.
    """
    here = cwd()
    if path is None:
        return config_from_dict({}, source="<defaults>", overrides=overrides, overrides_dir=here)
    p = Path(path).expanduser()
    raw, text = read_toml(p)
    folder = Path(os.path.abspath(p)).parent  # the folder as named (a symlinked file's own)
    return config_from_dict(raw, source=str(path), text=text, overrides=overrides,
                            base_dir=folder, overrides_dir=here)


# --------------------------------------------------------------------------- writing


def dumps_toml(data: dict[str, dict[str, Any]]) -> str:
    """Write a table of sections as TOML (``tomli_w``: every string and key escaped)."""
    return tomli_w.dumps(data)
