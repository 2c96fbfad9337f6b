"""The model a run's hooks probe (``train.session.ModelProbe``): the base with the run's
adapters merged in, one apply function (and greedy decoder) per model in this process."""

from __future__ import annotations

import functools
from typing import Any

from adapters_lib.config import RunConfig


class ProbeModel:
    """The model the probe applies: LoRA merged into the base, one apply function for the run
    (one compiled decoder for every greedy answer the eval hooks ask for). With a LoRA family,
    the family's program spec with the run's runtime values folded into the adapters: one
    decoder for every rank, alpha and targets of the family."""

    def __init__(self, cfg: RunConfig, loaded: Any, family: Any = None):
        self.cfg = cfg
        self.loaded = loaded
        self.family = family
        self.apply_fn = None

    @property
    def spec(self) -> Any:
        return self.family.program if self.family is not None else self.cfg.lora

    def model_params(self, trainable: Any) -> tuple[Any, Any]:
        """(the model to apply, its params) for the trainable tree (LoRA merged in)."""
        from adapters_lib.lora import targeted as lora

        cfg, loaded = self.cfg, self.loaded
        if cfg.lora.enabled:
            if self.family is not None:
                from adapters_lib.lora.family import apply_runtime

                trainable = apply_runtime(trainable, self.family.runtime())
            return lora.wrap(loaded.model, self.spec), lora.merge_lora(loaded.params, trainable)
        return loaded.model, trainable

    def apply(self) -> Any:
        if self.apply_fn is None:
            from adapters_lib.lora import targeted as lora

            model = lora.wrap(self.loaded.model, self.spec) if self.cfg.lora.enabled else self.loaded.model
            self.apply_fn = probe_apply(model)
        return self.apply_fn


@functools.lru_cache(maxsize=8)
def probe_apply(model: Any) -> Any:
    """One apply function per model (LoRA-wrapped or not) in this process: the greedy decoder
    it carries (``greedy_cache``) is compiled once for every run of that model and spec, so a
    second run's exact match traces nothing either."""
    from adapters_lib import evaluate

    return evaluate.model_apply_fn(model)
