"""The gemma route's tuned model: base weights plus a LoRA tree, or a full fine-tune's tree.

- LoRA (a run or an exported adapter folder): one ``Sampler`` with the LoRA spec; the base
  side is the zero-adapter variant, so both sides decode in one batched computation (each
  with its own prompts when their histories differ).
- Full fine-tune: the base and the tuned weights are two models; the sides run one after
  the other.
- A bare base model (``sample --model M``): the base side only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from adapters_lib.config import LoraSpec
from adapters_lib.sample.prompts import Prompt
from adapters_lib.sample.settings import Piece, SamplingSettings
from adapters_lib.tuned.base import TunedModel

COMPARE_BUCKETS = (32, 64)
"""The prompt buckets (``sample.PROMPT_BUCKETS``) a Compare's programs are compiled ahead for:
a short prompt, then a longer one."""


class GemmaTuned(TunedModel):
    backend = "gemma"

    def __init__(self, loaded: Any, *, lora: LoraSpec | None = None, adapters: Any = None,
                 tuned_params: Any = None, step: int | None = None, run: Any = None, cfg: Any = None,
                 source: str = ""):
        from adapters_lib.sample.family import on_host, serving
        from adapters_lib.sample.sampler import Sampler

        self.loaded = loaded
        self.lora = lora if lora is not None and lora.enabled and adapters is not None else None
        adapters = adapters if self.lora is not None else None
        # a run's final adapters as the trainer left them in memory (host numpy): the sampler
        # takes them folded and placed once; the run's own tree is placed when asked (export)
        self._host_adapters = adapters if adapters is not None and on_host(adapters) else None
        self._adapters = None if self._host_adapters is not None else adapters
        self.tuned_params = tuned_params
        self.has_tuned = adapters is not None or tuned_params is not None
        self.step = step
        self.cfg = cfg
        self.run_path = Path(run.path) if run is not None else None
        self.run_id = run.run_id if run is not None else ""
        self.source = source or (cfg.model.source if cfg is not None else "")
        # the sampler's program serves the run's LoRA family where ``train.programs`` asks
        # (``sample.family``): the tuned side's adapters padded, scale and masks folded in
        self.serving_spec, self.serving_adapters = serving(loaded.model, self.lora, adapters, cfg)
        if self._host_adapters is not None and self.serving_spec is self.lora:  # the exact program:
            self._adapters, self._host_adapters = self.serving_adapters, None  # the same tree, placed
        self.sampler = Sampler.from_loaded(loaded, self.serving_spec)
        self._tuned_sampler: Any = None
        self._apply: dict[str, Any] = {}

    @property
    def adapters(self) -> Any:
        """The tuned side's adapters in the run's own shapes, on the device (None: no LoRA)."""
        if self._adapters is None and self._host_adapters is not None:
            from adapters_lib.sample.family import placed

            self._adapters, self._host_adapters = placed(self._host_adapters), None
        return self._adapters

    # ---------------------------------------------------------------- loading

    @classmethod
    def from_run(cls, run: Any, step: int | None = None, *, quantize: str = "",
                 generation_dtype: str = "") -> GemmaTuned:
        """A run's checkpoint; ``generation_dtype`` (not ""): its base as a generation copy in
        that dtype (``models.loader.load_model``), the trained tree cast alike."""
        from adapters_lib.sample.family import placed
        from adapters_lib.tuned.checkpoint import load_checkpoint
        from adapters_lib.tuned.phases import mark

        cfg, loaded, trainable, got = load_checkpoint(run, step, quantize=quantize,
                                                      generation_dtype=generation_dtype, host=True)
        if not cfg.lora.enabled:  # a full fine-tune's tree kept on the host: placed as a restore
            trainable = placed(trainable)
        if generation_dtype:
            trainable = _cast(trainable, loaded)
            if not cfg.lora.enabled:  # a full fine-tune's tree is the model: the same layout
                from adapters_lib.models import decode_layout

                trainable = decode_layout.permute(trainable, loaded.config, loaded.family)
        if cfg.lora.enabled:
            model = cls(loaded, lora=cfg.lora, adapters=trainable, step=got, run=run, cfg=cfg)
        else:
            model = cls(loaded, tuned_params=trainable, step=got, run=run, cfg=cfg)
        mark("sides")
        return model

    @classmethod
    def from_adapter_dir(cls, directory: str | Path, model: str = "", *,
                         quantize: str = "", generation_dtype: str = "") -> GemmaTuned:
        """A base model plus an exported adapter folder (``model`` defaults to the adapter's base)."""
        from adapters_lib.config import ModelSpec
        from adapters_lib.export.peft import load_adapter, read_adapter_config
        from adapters_lib.models.loader import load_model
        from adapters_lib.tuned.base import generation_dtype_of

        spec, base_model = read_adapter_config(directory)
        source = model or base_model or "demo"
        loaded = load_model(ModelSpec(source=source, quantize=quantize or "none"),
                            param_dtype="float32", generation_dtype=generation_dtype_of(generation_dtype))
        adapters = load_adapter(directory, loaded.model, spec)
        return cls(loaded, lora=spec, adapters=_cast(adapters, loaded) if generation_dtype else adapters,
                   source=source)

    @classmethod
    def base_model(cls, source: str = "demo", *, quantize: str = "",
                   generation_dtype: str = "") -> GemmaTuned:
        from adapters_lib.config import ModelSpec
        from adapters_lib.models.loader import load_model
        from adapters_lib.tuned.base import generation_dtype_of

        spec = ModelSpec(source=source or "demo", quantize=quantize or "none")
        return cls(load_model(spec, generation_dtype=generation_dtype_of(generation_dtype)),
                   source=source or "demo")

    # ---------------------------------------------------------------- precision

    def precision(self, side: str) -> dict[str, str]:
        """What a side ran on: the weights' ``dtype`` and the base's ``quantize`` (the Compare
        header shows them)."""
        params = self.tuned_params if side == "tuned" and self.tuned_params is not None else self.loaded.params
        return {"dtype": _float_dtype(params), "quantize": getattr(self.loaded, "quantize", "none") or "none"}

    # ---------------------------------------------------------------- generation

    @property
    def tuned_sampler(self) -> Any:
        """A full fine-tune's own sampler (its weights are not the base's)."""
        if self._tuned_sampler is None and self.tuned_params is not None:
            from adapters_lib.sample.sampler import Sampler

            self._tuned_sampler = Sampler(self.loaded.model, self.tuned_params, self.loaded.tokenizer)
        return self._tuned_sampler

    def stream(self, prompts: Mapping[str, Sequence[Prompt]], settings: SamplingSettings, *,
               chat: bool = True) -> Iterator[Piece]:
        sides = list(prompts)
        self.check_sides(sides)
        lists = [list(prompts[s]) for s in sides]
        if self.tuned_params is not None:  # two models: one side after the other
            for i, side in enumerate(sides):
                sampler = self.tuned_sampler if side == "tuned" else self.sampler
                for piece in sampler.stream_grid(lists[i], [None], settings, chat=chat):
                    piece.variant, piece.side = i, side
                    yield piece
            return
        adapters = [self.serving_adapters if side == "tuned" else None for side in sides]
        shared = all(rows == lists[0] for rows in lists)
        for piece in self.sampler.stream_grid(lists[0], adapters, settings, chat=chat,
                                              variant_prompts=None if shared else lists):
            piece.side = sides[piece.variant]
            yield piece

    def compile_behind(self, submit: Any, settings: SamplingSettings,
                       prompt_buckets: Sequence[int] = COMPARE_BUCKETS) -> list[Any]:
        """Queue the compiles of a Compare (base and tuned in one program, one prompt) for
        each prompt bucket through ``submit(fn) -> Future`` (the engine's compile thread);
        the futures of those that were not compiled yet."""
        if self.tuned_params is not None or not self.has_tuned:
            variants: list[Any] = [None]  # the sides run one after the other, each alone
        else:
            variants = [None, self.serving_adapters]
        futures = [self.sampler.compile_behind(submit, variants, settings, prompt_bucket=b)
                   for b in prompt_buckets]
        if self.tuned_params is not None:
            futures += [self.tuned_sampler.compile_behind(submit, [None], settings, prompt_bucket=b)
                        for b in prompt_buckets]
        return [f for f in futures if f is not None]

    def prime(self) -> None:
        """Run the Compare's per-call preparation once (the base and tuned sides' adapters
        stacked: ``Sampler._stack``), so that its program is compiled before the first Compare."""
        if self.lora is not None:
            import jax

            jax.block_until_ready(self.sampler._stack([None, self.serving_adapters])[0])

    # ---------------------------------------------------------------- evaluation

    def apply_fn(self, side: str = "tuned") -> tuple[Any, Any]:
        """``(apply(params, tokens, positions, mask) -> logits, params)`` of one side, for the
        evaluation area (``evaluate.greedy_answers``, loss/perplexity over a file)."""
        from adapters_lib import evaluate
        from adapters_lib.lora import targeted as lora_lib

        self.check_sides([side])
        if side not in self._apply:
            if side == "tuned" and self.lora is not None:
                net = lora_lib.wrap(self.loaded.model, self.serving_spec)
                self._apply[side] = (evaluate.model_apply_fn(net),
                                     lora_lib.merge_lora(self.loaded.params, self.serving_adapters))
            else:
                params = self.tuned_params if side == "tuned" else self.loaded.params
                self._apply[side] = (evaluate.model_apply_fn(self.loaded.model), params)
        return self._apply[side]

    def exact_match(self, examples: Sequence[dict[str, Any]], *, side: str = "tuned") -> Any:
        from adapters_lib import evaluate

        apply, params = self.apply_fn(side)
        return evaluate.exact_match(None, params, self.loaded.tokenizer, examples, apply_fn=apply)

    # ---------------------------------------------------------------- export

    def export(self, fmt: str, out: str | Path | None = None, *, force: bool = False,
               quant: str = "") -> dict[str, Any]:
        from adapters_lib.export.run import export_gemma
        from adapters_lib.models import decode_layout

        if decode_layout.holds(self.loaded.params):
            from adapters_lib.errors import WorkbenchError

            raise WorkbenchError("this model is a generation copy (generation_dtype): not exported",
                                 hint="export the run as trained (gemma-workbench export RUN)")
        return export_gemma(self, fmt, out, force=force, quant=quant)


def _float_dtype(tree: Any) -> str:
    """The dtype of a params tree's first floating leaf (a quantized base's scales and table)."""
    import jax
    import jax.numpy as jnp

    for leaf in jax.tree.leaves(tree):
        dtype = getattr(leaf, "dtype", None)
        if dtype is not None and jnp.issubdtype(dtype, jnp.floating):
            return str(jnp.dtype(dtype))
    return ""


def _cast(tree: Any, loaded: Any) -> Any:
    """Adapters (or a full fine-tune's tree) in the base's float dtype: a bf16 generation copy
    reads bf16 adapters too (one dtype through the model). A host tree is cast in numpy
    (``ml_dtypes``: the same rounding as the device's cast)."""
    import jax
    import jax.numpy as jnp

    dtype = _float_dtype(loaded.params)
    if not dtype or tree is None:
        return tree
    dtype = jnp.dtype(dtype)
    return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)
