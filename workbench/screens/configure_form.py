"""The Configure screen's pages (Mesh, LoRA, Data, Train, TOML): their fields, in tab order.

``MESH_FIELDS``/``DATA_FIELDS``/``TRAIN_FIELDS`` are (section, key, label, kind) of the plain
input fields; each field's id is ``f-<section>-<key>``, and beside a Train field a dim tag
(``o-<section>-<key>``) says where its value came from. Each field takes only what it means
(``Input`` validators: whole numbers, ≥ 1, one mesh axis -1); ``mesh.devices`` shows empty
for 0 (= all of the engine's devices, the count in its placeholder).
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.validation import Function, Integer, Number, Validator
from textual.widgets import Button, Checkbox, Input, Label, Select, Static, TabPane

from adapters_lib.config import DATA_FORMATS, QUANTIZE_METHODS, QUANTIZE_MODES, SCHEDULES, RunConfig
from workbench.widgets.device_grid import DeviceGrid
from workbench.widgets.lora_form import LoraForm

# (section, key, label, kind) of the plain input fields, in tab order.
MESH_FIELDS = (("mesh", "data", "data", int), ("mesh", "fsdp", "fsdp", int),
               ("mesh", "tensor", "tensor", int), ("mesh", "devices", "devices", int))
DATA_FIELDS = (("data", "path", "path", str), ("data", "max_length", "max length", int),
               ("data", "eval_fraction", "eval fraction", float))
TRAIN_FIELDS = (("model", "source", "model", str), ("run", "name", "run name", str),
                ("train", "steps", "steps", int), ("train", "batch_size", "batch size", int),
                ("train", "learning_rate", "learning rate", float),
                ("train", "warmup_steps", "warmup steps", int),
                ("train", "eval_every", "eval every", int),
                ("train", "checkpoint_every", "ckpt every", int),
                ("train", "seed", "seed", int))


AT_LEAST_0 = ("data.max_length", "train.warmup_steps", "train.seed", "mesh.devices")
"""Whole-number fields where 0 means something (none, all); the other counts are ≥ 1."""


def validators(section: str, key: str, kind: type) -> list[Validator]:
    """What the field takes: a mesh axis ≥ 1 or -1 (fills), counts ≥ 1 (or ≥ 0), numbers."""
    name = f"{section}.{key}"
    if section == "mesh" and key != "devices":
        return [Integer(), Function(lambda v: v.strip() in ("-1",) or v.strip().isdigit()
                                    and int(v) >= 1, "a mesh axis is ≥ 1, or -1 to fill")]
    if name == "mesh.devices":  # empty = all
        return [Function(lambda v: not v.strip() or v.strip().isdigit(),
                         "the devices to use (empty: all)")]
    if kind is int:
        return [Integer(minimum=0 if name in AT_LEAST_0 else 1)]
    if kind is float:
        return [Number(minimum=0)]
    return []


def field_text(section: str, key: str, value: Any) -> str:
    """A value as its field shows it (``mesh.devices`` 0 = all: empty)."""
    if section == "mesh" and key == "devices" and value == 0:
        return ""
    return f"{value:g}" if isinstance(value, float) else str(value)


class FormScroll(VerticalScroll, can_focus=False):
    """A scrolling form page that tab skips (focus goes straight to its first field)."""


def field_id(section: str, key: str) -> str:
    return f"f-{section}-{key}"


def origin_id(section: str, key: str) -> str:
    return f"o-{section}-{key}"


def form_fields(spec: tuple, defaults: dict[str, dict[str, Any]],
                tags: bool = False) -> ComposeResult:
    for section, key, label, kind in spec:
        with Horizontal(classes="row"):
            yield Label(label, classes="label")
            yield Input(field_text(section, key, defaults[section][key]),
                        id=field_id(section, key), validators=validators(section, key, kind),
                        type={int: "integer", float: "number"}.get(kind, "text"),
                        classes="short" if kind is not str else "long", compact=True)
            if tags and kind is not str:
                yield Static("", id=origin_id(section, key), classes="origin")

def form_pages(base: RunConfig, d: dict[str, dict[str, Any]]) -> ComposeResult:
    with TabPane("Mesh", id="tab-mesh"):
        with FormScroll():
            with Horizontal(classes="row"):
                for section, key, label, kind in MESH_FIELDS:
                    yield Label(label, classes="label-short")
                    yield Input(field_text(section, key, d[section][key]),
                                id=field_id(section, key), placeholder="all" * (key == "devices"),
                                validators=validators(section, key, kind),
                                type="integer", classes="tiny", compact=True)
            yield Static("", id="mesh-note", classes="note")
            yield DeviceGrid(id="device-grid")
    with TabPane("LoRA", id="tab-lora"):
        with FormScroll():
            yield LoraForm(base.lora, id="lora-form")
            yield Static("", id="lora-origin", classes="note")
    with TabPane("Data", id="tab-data"):
        with FormScroll():
            yield from form_fields(DATA_FIELDS[:1], d)
            with Horizontal(classes="row"):
                yield Label("format", classes="label")
                yield Select([(f, f) for f in DATA_FORMATS], value=base.data.format,
                             allow_blank=False, id=field_id("data", "format"),
                             compact=True)
                yield Checkbox("packing", value=base.data.packing,
                               id=field_id("data", "packing"), compact=True)
            yield from form_fields(DATA_FIELDS[1:], d)
            with Horizontal(classes="row"):
                yield Button("Check data (ctrl+d)", id="check-data", compact=True)
            yield Static("", id="data-report", classes="report")
    with TabPane("Train", id="tab-train"):
        with FormScroll():
            yield from form_fields(TRAIN_FIELDS, d, tags=True)
            with Horizontal(classes="row"):
                yield Label("schedule", classes="label")
                yield Select([(s, s) for s in SCHEDULES], value=base.train.schedule,
                             allow_blank=False, id=field_id("train", "schedule"),
                             compact=True)
            with Horizontal(classes="row"):
                yield Label("base quantize", classes="label")
                yield Select([(q, q) for q in QUANTIZE_MODES], value=base.model.quantize,
                             allow_blank=False, id=field_id("model", "quantize"),
                             compact=True)
            with Horizontal(classes="row"):
                yield Label("base rounding", classes="label")
                yield Select([(m, m) for m in QUANTIZE_METHODS],
                             value=base.model.quantize_method, allow_blank=False,
                             id=field_id("model", "quantize_method"), compact=True)
            yield Static("", id="defaults-why", classes="note")
    with TabPane("TOML", id="tab-toml"):
        with FormScroll():
            yield Static("", id="toml-preview", classes="toml", markup=False)
