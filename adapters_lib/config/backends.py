"""Which config options each backend accepts: one-line causes before anything is built.

Pure Python (no keras import): ``config.load_config`` calls ``check_backend_options(cfg)`` on
every resolved config, whatever its backend.

Gemma-only (refused with ``backend = "keras"``):
- ``train.remat = true``: keras-hub's Gemma backbones have no rematerialisation switch;
- ``train.grad_accum > 1``: one ``fit`` step is one optimizer update here;
- ``mesh.fsdp > 1``: the Keras mesh has two axes, ``batch`` (= mesh.data) and ``model`` (= mesh.tensor);
- ``lora.dtype = "bfloat16"``: Keras LoRA kernels take the layer's variable dtype (train.param_dtype);
- ``train.param_dtype = "bfloat16"`` with ``compute_dtype = "float32"``: no Keras dtype policy does that;
- ``model.quantize`` other than "none"/"int8": the Keras route uses Keras' own ``quantize("int8")``.
A Keras preset folder (config.json + model.weights.h5 or its shards) is a ``model.source`` of
either backend: the gemma route reads its weights (``models.hf.keras_weights``).
Accepted but different: ``data.packing`` — the Keras backbones take a padding mask, not
segment ids, so the Keras route always trains one example per row (unpacked).
"""

from __future__ import annotations

from typing import Any

from adapters_lib.errors import WorkbenchError


def gemma_only_problems(cfg: Any) -> list[tuple[str, str, str]]:
    """(where, cause, hint) for each option the Keras route cannot honour."""
    out = []
    t, lo, me = cfg.train, cfg.lora, cfg.mesh
    alt = 'or use [model] backend = "gemma"'
    if t.remat:
        out.append(("[train] remat", "train.remat is gemma-only (keras-hub Gemma has no remat switch)",
                    f"set train.remat = false, {alt}"))
    if t.grad_accum > 1:
        out.append(("[train] grad_accum", f"train.grad_accum = {t.grad_accum} is gemma-only on this route",
                    f"set train.grad_accum = 1 and raise train.batch_size, {alt}"))
    if me.fsdp not in (1,):
        out.append(("[mesh] fsdp", f"mesh.fsdp = {me.fsdp}: the Keras mesh has only batch (mesh.data) and model (mesh.tensor) axes",
                    "set mesh.fsdp = 1 and put those devices on mesh.data or mesh.tensor"))
    if lo.enabled and lo.dtype != t.param_dtype:
        out.append(("[lora] dtype", f"lora.dtype = {lo.dtype!r} differs from train.param_dtype = {t.param_dtype!r}; "
                    "Keras LoRA kernels take the model's variable dtype",
                    f'set lora.dtype = "{t.param_dtype}", {alt}'))
    if cfg.model.quantize not in ("none", "int8"):
        out.append(("[model] quantize", f"model.quantize = {cfg.model.quantize!r}: the Keras route "
                    'holds its base in int8 only (Keras\' own quantize("int8"))',
                    f'set quantize = "int8" or "none", {alt} for int4/nf4/gguf'))
    if cfg.model.quantize_embedding != "auto":
        out.append(("[model] quantize_embedding", f"model.quantize_embedding = "
                    f"{cfg.model.quantize_embedding!r} is gemma-only (Keras quantizes as it does)",
                    f'set quantize_embedding = "auto", {alt}'))
    if cfg.model.quantize_method != "rtn":
        out.append(("[model] quantize_method", f"model.quantize_method = {cfg.model.quantize_method!r} "
                    "is gemma-only (Keras rounds its int8 base to nearest)",
                    f'set quantize_method = "rtn", {alt}'))
    if (t.param_dtype, t.compute_dtype) == ("bfloat16", "float32"):
        out.append(("[train] compute_dtype", "bfloat16 params with float32 compute has no Keras dtype policy",
                    'use compute_dtype = "bfloat16", or param_dtype = "float32" (mixed precision)'))
    return out


def check_backend_options(cfg: Any) -> None:
    """Raise a one-line ``WorkbenchError`` if ``cfg`` mixes the backends' options."""
    if cfg.model.backend == "keras":
        problems = gemma_only_problems(cfg)
        if problems:
            where, cause, hint = problems[0]
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise WorkbenchError(f'{cause} with backend = "keras"{more}', where=where, hint=hint)
