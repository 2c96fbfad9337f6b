"""Configure's model side: a picked model brings its defaults, each field says where its
value came from, and a real model on the demo tasks is offered its example config.

A mixin of ``ConfigureScreen`` (it reads and writes the form's widgets); the bookkeeping is
``configure_origins.FieldOrigins``, the defaults ``adapters_lib.config.model_defaults``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from textual.widgets import Input, Static

from adapters_lib.config import RunConfig, config_from_dict
from adapters_lib.config.model_defaults import default_origin
from adapters_lib.runs.registry import default_name
from workbench.example_configs import example_for, shown_path
from workbench.screens.configure_form import (
    DATA_FIELDS,
    TRAIN_FIELDS,
    field_id,
    field_text,
    origin_id,
)
from workbench.screens.configure_origins import (
    LORA_KEYS,
    FieldOrigins,
    model_default_updates,
    why_note,
)


class ModelDefaultsMixin:
    """The model's defaults and the values' origins, for ``ConfigureScreen``."""

    origins: FieldOrigins
    base_config: RunConfig
    config: RunConfig | None
    suggestion: Path | None

    def use_model(self, source: str) -> None:
        """The model picked on Models: its defaults come with it (``model_changed``)."""
        self.query_one(f"#{field_id('model', 'source')}", Input).value = source
        self.model_changed(source)

    # ------------------------------------------------------------------ origins, defaults

    @staticmethod
    def key_of(widget_id: str) -> str:
        """``f-train-steps`` → ``train.steps``; ``lora-rank`` → ``lora.rank``."""
        if widget_id.startswith("f-"):
            section, _, key = widget_id[2:].partition("-")
            return f"{section}.{key}"
        return f"lora.{widget_id[5:]}" if widget_id in ("lora-rank", "lora-alpha") else ""

    def tracked_texts(self) -> dict[str, str]:
        """The fields whose origin is shown (and the dtype, which has none), as shown now."""
        texts = {f"{s}.{k}": self.query_one(f"#{field_id(s, k)}", Input).value
                 for s, k, _, kind in TRAIN_FIELDS if kind is not str}
        texts.update({key: self.query_one(f"#lora-{key[5:]}", Input).value for key in LORA_KEYS})
        texts["train.compute_dtype"] = self.base_config.train.compute_dtype
        return texts

    def set_value(self, key: str, value: Any) -> str:
        """Show ``value`` in ``key``'s field (or keep it in the base config); its text."""
        section, name = key.split(".", 1)
        text = field_text(section, name, value)
        if key in LORA_KEYS:
            self.query_one(f"#lora-{name}", Input).value = text
        elif any((s, k) == (section, name) for s, k, _, _ in TRAIN_FIELDS + DATA_FIELDS):
            self.query_one(f"#{field_id(section, name)}", Input).value = text
        else:
            d = self.base_config.to_dict()
            d[section][name] = value
            self.base_config = config_from_dict(d, source="form")
        return text

    def model_changed(self, source: str) -> None:
        """Values still at a default move to ``source``'s defaults; say where each came from."""
        for key, value in model_default_updates(source, self.origins).items():
            self.origins.set(key, self.set_value(key, value), default_origin(source, key))
        self.query_one(f"#{field_id('run', 'name')}", Input).placeholder = self.derived_name()
        self.show_origins()
        self.show_suggestion()

    def derived_name(self) -> str:
        model = self.query_one(f"#{field_id('model', 'source')}", Input).value
        data = self.query_one(f"#{field_id('data', 'path')}", Input).value
        return f"{default_name(model, data)} (from the model and the data)"

    def show_origins(self) -> None:
        for key in self.origins.shown:
            section, name = key.split(".", 1)
            tag = self.query(f"#{origin_id(section, name)}")
            if tag:
                tag.first(Static).update(f"[dim]{escape(self.origins.origin(key))}[/]")
        self.query_one("#lora-origin", Static).update(self.origins.lora_note())
        source = self.query_one(f"#{field_id('model', 'source')}", Input).value
        self.query_one("#defaults-why", Static).update(
            why_note(source, self.origins, self.base_config))

    def show_suggestion(self) -> None:
        """A real model on the demo tasks: offer the model's example config (ctrl+o)."""
        source = self.query_one(f"#{field_id('model', 'source')}", Input).value.strip()
        data = self.query_one(f"#{field_id('data', 'path')}", Input).value.strip()
        before = self.suggestion
        self.suggestion = example_for(source) if data in ("", "demo") else None
        self.query_one(f"#{field_id('run', 'name')}", Input).placeholder = self.derived_name()
        if self.suggestion is not None and self.suggestion != before:
            self.notify(f"{source} on the demo tasks (made for the demo model): its example "
                        f"{shown_path(self.suggestion)} brings data made for it — ctrl+o, "
                        "enter opens it", title="data", timeout=8)
        if self.config is not None:
            self.query_one("#config-status", Static).update(
                "[b green]✓[/] config valid" + self.suggestion_text())

    def suggestion_text(self) -> str:
        """What follows "config valid": the route that trains it, and an example to open."""
        route = ROUTES.get(self.config.model.backend, self.config.model.backend) if self.config is not None else ""
        text = f" · [b]{escape(route)}[/]" if route else ""
        if self.suggestion is None:
            return text
        return text + f" · [yellow]its example: ctrl+o enter → {escape(shown_path(self.suggestion))}[/]"


ROUTES = {"gemma": "gemma route (the gemma library)",
          "keras": "Keras route (keras-hub GemmaCausalLM, enable_lora, LayoutMap)"}
"""Configure's words for ``model.backend``: which route trains the config."""

