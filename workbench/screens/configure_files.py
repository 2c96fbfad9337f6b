"""Configure's files: open a run config into the form (``ctrl+o``; the picked model's
example is offered, so ``ctrl+o`` ``enter`` opens it), save the form as TOML (``ctrl+s``).

A mixin of ``ConfigureScreen``.
"""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Checkbox, Input, Select

from adapters_lib.config import RunConfig
from adapters_lib.config.model_defaults import load_with_model_defaults
from adapters_lib.errors import WorkbenchError
from workbench.example_configs import shown_path
from workbench.screens.configure_form import (
    DATA_FIELDS,
    MESH_FIELDS,
    TRAIN_FIELDS,
    field_id,
    field_text,
)
from workbench.screens.prompt import PromptScreen
from workbench.widgets.lora_form import LoraForm


class ConfigFilesMixin:
    """Open and save, for ``ConfigureScreen``."""

    base_config: RunConfig
    config: RunConfig | None
    suggestion: Path | None
    opened: str
    error: str

    def fill_form(self, cfg: RunConfig, origin: str | dict[str, str]) -> None:
        """Show ``cfg`` in the form, every value ``origin`` (or each its own: ``"section.key"``
        → origin); keys the form has no field for are kept as they are."""
        self.base_config = cfg
        d = cfg.to_dict()
        for section, key, _, _ in MESH_FIELDS + DATA_FIELDS + TRAIN_FIELDS:
            self.query_one(f"#{field_id(section, key)}", Input).value = field_text(
                section, key, d[section][key])
        self.query_one(f"#{field_id('data', 'format')}", Select).value = cfg.data.format
        self.query_one(f"#{field_id('data', 'packing')}", Checkbox).value = cfg.data.packing
        self.query_one(f"#{field_id('train', 'schedule')}", Select).value = cfg.train.schedule
        self.query_one(f"#{field_id('model', 'quantize')}", Select).value = cfg.model.quantize
        self.query_one(f"#{field_id('model', 'quantize_method')}", Select).value = cfg.model.quantize_method
        self.query_one(LoraForm).show_spec(cfg.lora)
        self.model_seen = getattr(self.app, "model_choice", None)
        self.origins.all_from(cfg, self.tracked_texts(), origin)
        self.model_changed(cfg.model.source)

    def action_open_toml(self) -> None:
        def load(path: str | None) -> None:
            if not path or not path.strip():
                return
            target = Path(path.strip()).expanduser()
            try:  # a real model gets its defaults where the file is silent, as `train FILE` does
                loaded = load_with_model_defaults(target)
            except WorkbenchError as err:
                self.notify(str(err), title="cannot open", severity="error", timeout=8)
                return
            cfg = loaded.config
            self.opened = path.strip()
            self.fill_form(cfg, {key: f"from {target.name}" if origin.startswith("from ") else origin
                                 for key, origin in loaded.origins.items()})
            self.notify(f"opened {path.strip()}: every field is the file's (model "
                        f"{cfg.model.source}, data {Path(cfg.data.path).name}); ctrl+l "
                        "launches it", timeout=6)

        offer = shown_path(self.suggestion) if self.suggestion is not None else self.opened
        title = ("Open a run config (TOML) — enter opens the model's example" if
                 self.suggestion is not None else "Open a run config (TOML)")
        self.app.push_screen(PromptScreen(title, "path.toml, e.g. examples/real-270m.toml",
                                          offer), load)

    def action_save_toml(self) -> None:
        if self.config is None:
            self.notify(self.error or "the config is not valid yet", severity="error")
            return
        cfg = self.config

        def save(path: str | None) -> None:
            if not path:
                return
            target = Path(path).expanduser()
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(cfg.to_toml(), encoding="utf-8")
            except OSError as err:
                self.notify(f"could not save: {err}", severity="error")
                return
            self.notify(f"saved {target}\nrun it with: gemma-workbench train {target}", timeout=6)

        self.app.push_screen(PromptScreen("Save the config as TOML", "path.toml",
                                          str(Path.cwd() / "run.toml")), save)


