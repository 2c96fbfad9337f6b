"""Training defaults that depend on the model, each with where it came from.

``RunConfig()``'s own defaults (lr 1e-3, rank 8, 200 steps, batch 8) are made for the demo
model and its tasks: a tiny model learns them in minutes. A real model trained with them
overshoots (the 270M wrote "redmobilpayassignment…" after 12 steps at 1e-3), so a real model
starts from the LoRA defaults its peers use (Unsloth, PEFT's examples, Axolotl: lr 2e-4,
rank 16, alpha 2×rank), a short run and bf16 matmuls. Pure: no JAX, no files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adapters_lib.config import RunConfig, config_from_dict


@dataclass(frozen=True)
class ModelDefaults:
    origin: str
    """The words a form shows beside a value that came from here ("real-model default")."""
    why: str
    """One sentence: what these defaults are for and whose they are."""
    values: dict[str, Any] = field(default_factory=dict)
    """``"section.key"`` → value, where these differ from ``RunConfig()``."""


DEMO = ModelDefaults("demo default", "the built-in defaults, made for the demo model and "
                     "its tasks (a tiny model learns them in minutes)")
REAL = ModelDefaults(
    "real-model default",
    "a real model's LoRA defaults, as its peers (Unsloth, PEFT, Axolotl) use them: lr 2e-4, "
    "rank 16, alpha 32; 60 steps of batch 4, bf16 matmuls",
    {"train.learning_rate": 2e-4, "train.warmup_steps": 5, "train.steps": 60,
     "train.batch_size": 4, "train.eval_every": 20, "train.checkpoint_every": 20,
     "train.compute_dtype": "bfloat16", "lora.rank": 16, "lora.alpha": 32.0})
KEYS = tuple(REAL.values)
"""Every key whose default depends on the model."""


def defaults_for(source: str) -> ModelDefaults:
    """The demo's own defaults for ``demo``; a real model's for every other source."""
    return DEMO if source.strip() in ("", "demo") else REAL


def default_value(source: str, key: str) -> Any:
    """The default of ``"section.key"`` for the model ``source``."""
    chosen = defaults_for(source)
    if key in chosen.values:
        return chosen.values[key]
    section, name = key.split(".", 1)
    return getattr(getattr(RunConfig(), section), name)


def with_model_defaults(cfg: RunConfig) -> RunConfig:
    """``cfg`` with its model's defaults for every key in ``KEYS`` (use on a default config:
    values set on purpose are not told apart from defaults here)."""
    d = cfg.to_dict()
    for key in KEYS:
        section, name = key.split(".", 1)
        d[section][name] = default_value(cfg.model.source, key)
    return config_from_dict(d, source="model defaults")
