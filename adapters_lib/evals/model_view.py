"""The model as a route hands it to the eval hooks at an eval point: ``ModelAtStep``.

A trainer calls ``RunSession.model_at(view)`` before the first step of a fresh run (phase
``"base"``: the base weights, or fresh LoRA adapters, which change nothing) and at each eval
step (phase ``"tuned"``). The view is valid during that call only (the next step may donate
the buffers): a hook scores with it and keeps numbers, never the params.

- ``apply_fn(params, tokens, positions, mask) -> logits`` is the same function object for the
  whole run (the greedy decoder compiles once per function);
- ``eval_loss()`` is the eval split's mean token loss at these params, computed (and fetched
  from the device) on the first call only;
- ``examples``: the eval split's chat examples; ``trainable_params``: the number of values
  the run trains.

``GemmaViews`` builds them for the gemma route (LoRA adapters merged into the base for
generation, as sampling does); the Keras route builds its own from
``keras_route.generate``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelAtStep:
    step: int
    phase: str
    """"base" or "tuned"."""
    tokenizer: Any
    apply_fn: Any
    params: Any
    loss_fn: Callable[[], float | None] = field(default=lambda: None, repr=False)
    examples: list[dict[str, Any]] = field(default_factory=list, repr=False)
    """The eval split's chat examples (the generated metrics answer those with an answer)."""
    max_length: int = 128
    trainable_params: int | None = None

    @functools.cached_property
    def _loss(self) -> float | None:
        value = self.loss_fn()
        return None if value is None else float(value)

    def eval_loss(self) -> float | None:
        return self._loss


def count_params(tree: Any) -> int:
    import jax
    import numpy as np

    return int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(tree)))


class GemmaViews:
    """``ModelAtStep`` views of a gemma-route run (one apply function for the run)."""

    def __init__(self, loaded: Any, cfg: Any):
        from adapters_lib import evaluate, lora

        self.loaded = loaded
        self.cfg = cfg
        model = lora.wrap(loaded.model, cfg.lora) if cfg.lora.enabled else loaded.model
        self.apply_fn = evaluate.model_apply_fn(model)
        self._count: int | None = None

    def at(self, step: int, phase: str, trainable: Any, loss_fn: Callable[[], float | None],
           examples: list[dict[str, Any]]) -> ModelAtStep:
        from adapters_lib import lora

        if self._count is None:
            self._count = count_params(trainable)
        params = lora.merge_lora(self.loaded.params, trainable) if self.cfg.lora.enabled else trainable
        return ModelAtStep(step=step, phase=phase, tokenizer=self.loaded.tokenizer,
                           apply_fn=self.apply_fn, params=params, loss_fn=loss_fn,
                           examples=examples, max_length=self.cfg.data.max_length,
                           trainable_params=self._count)


def keras_view(trainer: Any, step: int, phase: str, loss: float | None = None) -> ModelAtStep:
    """The view of a Keras-route trainer's model (``keras_route.generate``'s apply function
    and tokenizer; the base = the LoRA B kernels zeroed, ``W + A·0 = W``)."""
    import numpy as np

    from adapters_lib.keras_route import generate

    lm = trainer.model.causal_lm
    base = phase == "base"
    return ModelAtStep(
        step=step, phase=phase, tokenizer=generate._sp(trainer.model),
        apply_fn=generate._apply_fn(lm), params=generate.params(trainer.model, base=base),
        loss_fn=(lambda: loss) if loss is not None else trainer.eval_loss,
        examples=list(trainer.pipeline.eval_examples), max_length=trainer.cfg.data.max_length,
        trainable_params=int(sum(np.prod(v.shape) for v in lm.trainable_variables)))
