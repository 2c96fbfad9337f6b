"""The LoRA form: rank, alpha, target checkboxes, dtype and the full-fine-tune switch.

``values()`` returns the ``[lora]`` table as typed so far (strings the user typed are kept
as they are; the Configure screen validates the whole config with ``config_from_dict`` and
shows the one-line error). The trainable-parameter count is set from the engine's estimate.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.validation import Integer, Number
from textual.widgets import Checkbox, Input, Label, Select, Static

from adapters_lib.config import DTYPES, LORA_TARGETS, LoraSpec
from adapters_lib.lora.shapes import lora_param_count


def parse_number(text: str, kind: type) -> Any:
    """``"8"`` → 8; keep what cannot be parsed so that validation names it."""
    text = text.strip()
    try:
        return kind(text) if kind is int else float(text)
    except ValueError:
        return text


def trainable_count(arch: dict[str, Any], lora: dict[str, Any]) -> int | None:
    """Adapter size from a catalog ``arch``: ``rank ×`` the family's per-rank count of each chosen
    target (``lora_per_rank``, the engine's ``families.lora_per_rank``: Gemma 4's own layers and
    experts), else the Gemma 2/3 closed form (``lora.shapes.lora_param_count``)."""
    per_rank = arch.get("lora_per_rank")
    if isinstance(per_rank, dict):
        try:
            rank = int(lora["rank"])
        except (KeyError, TypeError, ValueError):
            return None
        return rank * sum(int(per_rank.get(t, 0)) for t in lora.get("targets", ()))
    keys = ("embed_dim", "num_heads", "num_kv_heads", "head_dim", "hidden_dim")
    try:
        fields = {key: int(arch[key]) for key in keys}
        fields["num_layers"] = int(arch.get("num_layers") or len(arch["attention"]))
        rank = int(lora["rank"])
    except (KeyError, TypeError, ValueError):
        return None
    return lora_param_count(fields, rank, tuple(t for t in lora.get("targets", ()) if t in LORA_TARGETS))


class LoraForm(Vertical):
    DEFAULT_CLASSES = "form lora-form"

    def __init__(self, spec: LoraSpec | None = None, *, id: str | None = None):
        super().__init__(id=id)
        self.spec = spec or LoraSpec()

    def compose(self) -> ComposeResult:
        s = self.spec
        with Horizontal(classes="row"):
            yield Label("mode", classes="label")
            yield Checkbox("full fine-tune (no LoRA)", value=not s.enabled, id="lora-full", compact=True)
        with Horizontal(classes="row"):
            yield Label("rank", classes="label")
            yield Input(str(s.rank), id="lora-rank", type="integer", classes="short", compact=True,
                        validators=[Integer(minimum=1)])
            yield Label("alpha", classes="label")
            yield Input(f"{s.alpha:g}", id="lora-alpha", type="number", classes="short", compact=True,
                        validators=[Number(minimum=0)])
        with Horizontal(classes="row targets"):
            yield Label("targets", classes="label")
            for name in LORA_TARGETS:
                yield Checkbox(name, value=name in s.targets, id=f"lora-t-{name}", compact=True)
            experts = Checkbox("experts", value="experts" in s.targets, id="lora-t-experts", compact=True)
            experts.display = "experts" in s.targets  # shown for a model with an expert bank
            yield experts
        with Horizontal(classes="row"):
            yield Label("dtype", classes="label")
            yield Select([(d, d) for d in DTYPES], value=s.dtype, allow_blank=False,
                         id="lora-dtype", compact=True)
        yield Static("trainable: …", id="lora-trainable", classes="note")

    def show_spec(self, spec: LoraSpec) -> None:
        self.query_one("#lora-full", Checkbox).value = not spec.enabled
        self.query_one("#lora-rank", Input).value = str(spec.rank)
        self.query_one("#lora-alpha", Input).value = f"{spec.alpha:g}"
        for name in (*LORA_TARGETS, "experts"):
            self.query_one(f"#lora-t-{name}", Checkbox).value = name in spec.targets
        if "experts" in spec.targets:
            self.offer_experts(True)
        self.query_one("#lora-dtype", Select).value = spec.dtype

    def offer_experts(self, offered: bool) -> None:
        """Show the ``experts`` target (a MoE model's expert bank) or hide and clear it."""
        box = self.query_one("#lora-t-experts", Checkbox)
        box.display = offered
        if not offered:
            box.value = False

    def values(self) -> dict[str, Any]:
        targets = [n for n in (*LORA_TARGETS, "experts") if self.query_one(f"#lora-t-{n}", Checkbox).value]
        return {
            "enabled": not self.query_one("#lora-full", Checkbox).value,
            "rank": parse_number(self.query_one("#lora-rank", Input).value, int),
            "alpha": parse_number(self.query_one("#lora-alpha", Input).value, float),
            "targets": targets,
            "dtype": str(self.query_one("#lora-dtype", Select).value),
        }

    def set_trainable(self, trainable: int | None, total: int | None) -> None:
        label = self.query_one("#lora-trainable", Static)
        if trainable is None:
            label.update("trainable: ?")
            return
        share = f" of {total:,} ({100 * trainable / total:.2f}%)" if total else ""
        label.update(f"trainable parameters: {trainable:,}{share}")
