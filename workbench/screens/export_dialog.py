"""Runs → ``e``: choose what to export (adapter, merged gemma/HF, GGUF per quant type, LoRA GGUF),
each with the size it will be on disk, estimated from the run's parameter counts (the engine's
``estimate`` of its config: no weights loaded) by ``export.formats.estimate_bytes``."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from adapters_lib.export import formats

Choice = tuple[str, str]
"""(format, quant); quant "" for the formats that have none."""


def human(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def export_choices(config: dict[str, Any], total_params: int | None = None,
                   lora_params: int | None = None) -> list[tuple[Choice, str]]:
    """Every export this run can give, labelled with its estimated size ("?" unknown)."""
    lora_on = bool((config.get("lora") or {}).get("enabled", True))
    keras = (config.get("model") or {}).get("backend") == "keras"

    def est(fmt: str, quant: str = "") -> str:
        if not total_params or (fmt in ("adapter", "gguf-lora") and not lora_params):
            return "?"
        return human(formats.estimate_bytes(fmt, quant, matrix_params=total_params,
                                            lora_params=lora_params or 0))

    out: list[tuple[Choice, str]] = []
    if lora_on:
        out.append((("adapter", ""), f"adapter — LoRA, PEFT safetensors  ~{est('adapter')}"))
    if keras:
        return out
    out.append((("gemma", ""), f"gemma — merged, orbax checkpoint  ~{est('gemma')}"))
    out.append((("hf", ""), f"hf — merged, HF safetensors  ~{est('hf')}"))
    for q in formats.GGUF_QUANTS:
        if q != "base":
            out.append((("gguf", q), f"gguf {q} — merged, llama.cpp/Ollama/LM Studio  ~{est('gguf', q)}"))
    if lora_on:
        for q in formats.LORA_QUANTS:
            out.append((("gguf-lora", q), f"gguf-lora {q} — LoRA adapter GGUF  ~{est('gguf-lora', q)}"))
    return out


class ExportScreen(ModalScreen[Choice | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="export.cancel")]

    def __init__(self, run_id: str, config: dict[str, Any], total_params: int | None = None,
                 lora_params: int | None = None) -> None:
        super().__init__()
        self.run_id = run_id
        self.choices = export_choices(config, total_params, lora_params)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Export {self.run_id}", classes="dialog-title")
            yield OptionList(*[Option(label, id=f"{f}:{q}") for (f, q), label in self.choices],
                             id="export-choices")
            yield Label("enter: export · escape: cancel · sizes are estimates; "
                        "K-quants: llama-quantize an f16 export", classes="note")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        fmt, _, quant = str(event.option.id).partition(":")
        self.dismiss((fmt, quant))

    def action_cancel(self) -> None:
        self.dismiss(None)
