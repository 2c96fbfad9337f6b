"""Merged full weights: base + adapters fused, as a gemma orbax checkpoint or HF safetensors.

``gemma``: the fused tree (``lora.fuse.fuse_lora``) saved with ``gm.ckpts.save_params`` (loads with
``gm.ckpts.load_params``). ``hf``: the same tree through ``models.hf.hf_convert.gemma_to_hf`` as
``model.safetensors`` (sharded over ``HF_SHARD_BYTES``) + ``config.json``. The tokenizer is
copied beside the weights.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from adapters_lib.config import LoraSpec
from adapters_lib.errors import WorkbenchError

HF_SHARD_BYTES = 5 * 2**30
"""Largest safetensors file of an ``hf`` export; above it the weights are sharded + indexed."""


def merged_params(loaded: Any, trainable: Any, spec: LoraSpec) -> dict:
    """Base + adapters fused into plain gemma weights (numpy), or a full fine-tune's tree.

    Never into quantized weights: a base held quantized (``[model] quantize``) is loaded
    again as floats (the original file; a GGUF's blocks dequantized), the adapters are fused
    into it in f32 and the result is bfloat16 (``docs/quantization.md``)."""
    import jax

    from adapters_lib.lora import fuse as lora_fuse
    from adapters_lib.lora import targeted as lora

    if not spec.enabled:
        return jax.tree.map(np.asarray, trainable)
    quantized = getattr(loaded, "quantize", "none") != "none"
    base = float_base(loaded).params if quantized else loaded.params
    merged = lora.merge_lora(base, trainable)
    # Gemma 4's config has no such field: its gating einsum is always (2, F, D)
    fused = lora_fuse.fuse_lora(merged, spec, transpose_gating=getattr(loaded.config, "transpose_gating_einsum", True))
    return jax.tree.map(_to_bf16, fused) if quantized else fused


def float_base(loaded: Any) -> Any:
    """The float32 base of a ``LoadedModel`` held quantized: the same source, loaded again."""
    from adapters_lib.config import ModelSpec
    from adapters_lib.models.loader import load_model

    return load_model(ModelSpec(source=loaded.source, tokenizer=loaded.tokenizer_path),
                      param_dtype="float32")


def _to_bf16(x: Any) -> Any:
    import ml_dtypes

    x = np.asarray(x)
    return x.astype(ml_dtypes.bfloat16) if np.issubdtype(x.dtype, np.floating) else x


def save_gemma(out: str | Path, params: Mapping[str, Any]) -> Path:
    """An orbax checkpoint that ``gm.ckpts.load_params(out)`` loads (``out`` must not exist)."""
    from adapters_lib.models.weights import gemma_ckpts

    ckpts = gemma_ckpts(where="export --format gemma")
    out = Path(out).absolute()
    if out.exists():  # never delete a folder here: write_export stages into a fresh one
        raise WorkbenchError(f"{out} already exists", where="save_gemma",
                             hint="save into a new folder (export_run stages and swaps)")
    out.parent.mkdir(parents=True, exist_ok=True)
    ckpts.save_params(dict(params), out, wait_until_finished=True)
    return out


def save_hf(out: str | Path, params: Mapping[str, Any], loaded: Any) -> Path:
    """HF ``model.safetensors`` + ``config.json`` (``Gemma{2,3,3n,4}ForCausalLM``: the text model)."""
    from adapters_lib.models import families
    from adapters_lib.models.hf import hf_convert

    out = Path(out)
    try:
        arch = families.arch_of_config(loaded.config, loaded.family)
    except families.ArchError as e:
        raise WorkbenchError(str(e), where="--format hf", hint="export --format gemma instead") from None
    tensors = hf_convert.gemma_to_hf(params, arch=arch)
    dtype = str(next(iter(tensors.values())).dtype)
    hf_convert.save_hf(out, tensors, families.hf_config_for(arch, dtype=dtype),
                       max_shard_bytes=HF_SHARD_BYTES)
    return out


def copy_tokenizer(loaded: Any, out: Path) -> None:
    src = Path(loaded.tokenizer_path) if loaded.tokenizer_path else None
    if src and src.is_file():
        shutil.copyfile(src, out / "tokenizer.model")
