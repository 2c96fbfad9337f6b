"""The Configure screen's pages (Mesh, LoRA, Data, Train, TOML): their fields, in tab order.

``MESH_FIELDS``/``DATA_FIELDS``/``TRAIN_FIELDS`` are (section, key, label, kind) of the plain
input fields; each field's id is ``f-<section>-<key>``.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Checkbox, Input, Label, Select, Static, TabPane

from adapters_lib.config import DATA_FORMATS, QUANTIZE_MODES, SCHEDULES, RunConfig
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


class FormScroll(VerticalScroll, can_focus=False):
    """A scrolling form page that tab skips (focus goes straight to its first field)."""


def field_id(section: str, key: str) -> str:
    return f"f-{section}-{key}"




def form_fields(spec: tuple, defaults: dict[str, dict[str, Any]]) -> ComposeResult:
    for section, key, label, kind in spec:
        value = defaults[section][key]
        with Horizontal(classes="row"):
            yield Label(label, classes="label")
            yield Input(f"{value:g}" if kind is float else str(value),
                        id=field_id(section, key),
                        type={int: "integer", float: "number"}.get(kind, "text"),
                        classes="short" if kind is not str else "long", compact=True)

def form_pages(base: RunConfig, d: dict[str, dict[str, Any]]) -> ComposeResult:
    with TabPane("Mesh", id="tab-mesh"):
        with FormScroll():
            with Horizontal(classes="row"):
                for section, key, label, _ in MESH_FIELDS:
                    yield Label(label, classes="label-short")
                    yield Input(str(d[section][key]), id=field_id(section, key),
                                type="integer", classes="tiny", compact=True)
            yield Static("", id="mesh-note", classes="note")
            yield DeviceGrid(id="device-grid")
    with TabPane("LoRA", id="tab-lora"):
        with FormScroll():
            yield LoraForm(base.lora, id="lora-form")
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
            yield from form_fields(TRAIN_FIELDS, d)
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
    with TabPane("TOML", id="tab-toml"):
        with FormScroll():
            yield Static("", id="toml-preview", classes="toml", markup=False)
