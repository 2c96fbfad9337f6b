"""Generation with a Keras run's model: greedy answers from the base or the tuned weights.

The decoder is ``adapters_lib.evaluate``'s (fixed shapes, one compile; prompts tokenized by
the one prompt tokenizer, ``sample.prompts``) over
``CausalLM.stateless_call``; "base" is the same model with the LoRA ``B`` kernels zeroed
(``W + A·0 = W``), so one model serves both sides of an A/B.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError


def _sp(model: Any):
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=model.tokenizer_path)


def _apply_fn(causal_lm: Any):
    cached = getattr(causal_lm, "_workbench_apply", None)
    if cached is not None:
        return cached
    import jax.numpy as jnp

    from adapters_lib.keras_route.backbones import model_inputs

    def apply(params, tokens, positions, mask):
        tv, ntv = params
        x = model_inputs(causal_lm.backbone, tokens, jnp.ones_like(tokens), positions)
        logits, _ = causal_lm.stateless_call(tv, ntv, x)
        return logits

    causal_lm._workbench_apply = apply
    return apply


def params(model: Any, *, base: bool) -> tuple[list[Any], list[Any]]:
    """(trainable, non-trainable) values; ``base`` zeroes the LoRA B kernels."""
    import jax.numpy as jnp

    from adapters_lib.keras_route.experts import is_lora_b

    lm = model.causal_lm
    tv = [jnp.zeros_like(v.value) if base and is_lora_b(v.path) else v.value
          for v in lm.trainable_variables]
    return tv, [v.value for v in lm.non_trainable_variables]


def exact_match(model: Any, examples: Sequence[dict[str, Any]], *, base: bool):
    from adapters_lib import evaluate

    return evaluate.exact_match(None, params(model, base=base), _sp(model), examples,
                                apply_fn=_apply_fn(model.causal_lm), batch_size=16, max_length=256)


def completions(model: Any, prompts: Sequence[str | Sequence[dict[str, str]]], *, base: bool,
                max_new_tokens: int = 32) -> list[tuple[list[int], bool]]:
    """Greedy ``(ids, stopped)`` for ``prompts`` (a user message, or a list of chat messages
    each), tokenized by the one prompt tokenizer (``sample.prompts``)."""
    from adapters_lib import evaluate
    from adapters_lib.sample.prompts import as_messages, codec_of, prompt_ids

    sp = _sp(model)
    codec = codec_of(sp)
    encoded = [prompt_ids(codec, as_messages(p)) for p in prompts]
    return evaluate.greedy_completions(_apply_fn(model.causal_lm), params(model, base=base), sp, encoded,
                                       max_new_tokens=max_new_tokens, batch_size=16, max_length=256)


def answers(model: Any, prompts: Sequence[str | Sequence[dict[str, str]]], *, base: bool,
            max_new_tokens: int = 32) -> list[str]:
    """Greedy replies to ``prompts`` (a user message, or a list of chat messages each)."""
    sp = _sp(model)
    return [sp.decode(ids) if ids else "" for ids, _ in
            completions(model, prompts, base=base, max_new_tokens=max_new_tokens)]


@dataclass
class KerasTuned:
    cfg: Any
    model: Any
    step: int
    distribution: Any

    def _scope(self) -> Any:
        import contextlib

        return self.distribution.scope() if self.distribution is not None else contextlib.nullcontext()

    def answers(self, prompts: Sequence[Any], *, tuned: bool = True, max_new_tokens: int = 32) -> list[str]:
        with self._scope():
            return answers(self.model, prompts, base=not tuned, max_new_tokens=max_new_tokens)

    def completions(self, prompts: Sequence[Any], *, tuned: bool = True,
                    max_new_tokens: int = 32) -> list[tuple[list[int], bool]]:
        with self._scope():
            return completions(self.model, prompts, base=not tuned, max_new_tokens=max_new_tokens)

    def exact_match(self, examples: Sequence[dict[str, Any]], *, tuned: bool = True) -> Any:
        with self._scope():
            return exact_match(self.model, examples, base=not tuned)

    def tokenizer(self) -> Any:
        return _sp(self.model)


def load_keras_tuned(run_dir: str | Path, step: int | None = None) -> KerasTuned:
    """A Keras run's model with the weights of checkpoint ``step`` (the latest when None)."""
    from adapters_lib.keras_route import checkpoints
    from adapters_lib.keras_route.layout import make_distribution, plan_for
    from adapters_lib.keras_route.model import build_model, import_keras, keras_source, model_dims
    from adapters_lib.runs import RunDir

    run = RunDir(Path(run_dir))
    cfg = run.config()
    if cfg.model.backend != "keras":
        raise WorkbenchError(f"run {run.run_id} is a {cfg.model.backend} run", hint="load it with tuned.load_checkpoint")
    steps = run.checkpoints()
    if not steps:
        raise WorkbenchError(f"run {run.run_id} has no checkpoint yet", where=str(run.checkpoints_dir))
    step = steps[-1] if step is None else step
    if step not in steps:
        raise WorkbenchError(f"run {run.run_id} has no checkpoint at step {step}",
                             hint=f"checkpoints: {', '.join(map(str, steps))}")
    import_keras()
    source = keras_source(cfg)  # the model source, resolved once
    distribution = make_distribution(plan_for(cfg, model_dims(cfg, source)))
    model = build_model(cfg, distribution, source)
    scope = distribution.scope() if distribution is not None else None
    if scope is None:
        checkpoints.restore(run.checkpoints_dir, step, model.causal_lm, optimizer=False)
    else:
        with scope:
            checkpoints.restore(run.checkpoints_dir, step, model.causal_lm, optimizer=False)
    return KerasTuned(cfg, model, step, distribution)
