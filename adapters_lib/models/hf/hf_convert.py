"""Hugging Face safetensors ↔ gemma param trees (Gemma 2 and Gemma 3 text), exactly.

Name map (HF ``model.`` prefix; Gemma 3 multimodal files use ``model.language_model.`` or
``language_model.model.``) and layouts (HF ``nn.Linear`` weights are ``[out, in]``):

=================================================  ===========================================
HF                                                  gemma (nested tree)
=================================================  ===========================================
embed_tokens.weight            (V, D)               embedder/input_embedding (V, D)
norm.weight                    (D,)                 final_norm/scale
layers.i.input_layernorm                            layer_i/pre_attention_norm/scale
layers.i.post_attention_layernorm                   layer_i/post_attention_norm/scale
layers.i.pre_feedforward_layernorm                  layer_i/pre_ffw_norm/scale
layers.i.post_feedforward_layernorm                 layer_i/post_ffw_norm/scale
layers.i.self_attn.q_norm / k_norm  (H,)            layer_i/attn/_query_norm, _key_norm (Gemma 3)
layers.i.self_attn.q_proj      (N·H, D)             attn/q_einsum/w (N, D, H)
layers.i.self_attn.{k,v}_proj  (K·H, D)             attn/kv_einsum/w (2, K, D, H) [k, v]
                                                    (attn/qkv_einsum/w (3, N, D, H) when K == N)
layers.i.self_attn.o_proj      (D, N·H)             attn/attn_vec_einsum/w (N, H, D)
layers.i.mlp.{gate,up}_proj    (F, D)               mlp/gating_einsum (2, F, D) [gate, up]
                                                    ((2, D, F) when not transposed: Gemma 2 2B)
layers.i.mlp.down_proj         (D, F)               mlp/linear (F, D)
=================================================  ===========================================

Norm weights copy as they are: HF's Gemma RMSNorm multiplies by ``1 + weight`` like gemma's.
Only reshapes and transposes: the round trip is bit-exact. The safetensors reader/writer
(``safetensors_io``) is a few lines over ``numpy.memmap``, with no torch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from adapters_lib.models import families
from adapters_lib.models.families import Arch, hf_config_for
from adapters_lib.models.hf.hf_layout import _NORMS, hf_prefix
from adapters_lib.models.hf.safetensors_io import (
    _CODES,
    SafetensorsError,
    _np_dtype,
    write_safetensors,
)

__all__ = ["gemma_to_hf", "hf_to_gemma", "export_hf", "save_hf", "leaf_plan", "gemma_shapes", "omitted"]

# --------------------------------------------------------------------------- the name map

Fetch = Callable[[str], np.ndarray]


def leaf_plan(arch: Arch) -> list[tuple[tuple[str, ...], list[str], Callable[..., np.ndarray]]]:
    """For each gemma leaf: its path, the HF names it is made of, and how (exact ops only)."""
    own = families.hf_map(arch)  # Gemma 4, 3n: the family's own map
    if own is not None:
        return own.leaf_plan(arch)
    n, k, h, d, _f = arch.num_heads, arch.num_kv_heads, arch.head_dim, arch.embed_dim, arch.hidden_dim

    def q(w):  # (N·H, D) → (N, D, H)
        return w.reshape(n, h, d).transpose(0, 2, 1)

    def kv(wk, wv):  # → (2, K, D, H)
        return np.stack([wk.reshape(k, h, d).transpose(0, 2, 1),
                         wv.reshape(k, h, d).transpose(0, 2, 1)])

    def qkv(wq, wk, wv):  # → (3, N, D, H)
        return np.stack([q(wq), q(wk), q(wv)])

    def o(w):  # (D, N·H) → (N, H, D)
        return w.T.reshape(n, h, d)

    def gating(wg, wu):
        return np.stack([wg, wu]) if arch.transpose_gating else np.stack([wg.T, wu.T])

    def same(w):
        return np.asarray(w)

    plan = [(("embedder", "input_embedding"), ["embed_tokens.weight"], same),
            (("final_norm", "scale"), ["norm.weight"], same)]
    for i in range(arch.num_layers):
        hf = f"layers.{i}."
        lay = f"layer_{i}"
        for ours, theirs in _NORMS.items():
            plan.append(((lay, ours, "scale"), [f"{hf}{theirs}.weight"], same))
        a = f"{hf}self_attn."
        if k == n:
            plan.append(((lay, "attn", "qkv_einsum", "w"),
                         [f"{a}q_proj.weight", f"{a}k_proj.weight", f"{a}v_proj.weight"], qkv))
        else:
            plan.append(((lay, "attn", "q_einsum", "w"), [f"{a}q_proj.weight"], q))
            plan.append(((lay, "attn", "kv_einsum", "w"),
                         [f"{a}k_proj.weight", f"{a}v_proj.weight"], kv))
        plan.append(((lay, "attn", "attn_vec_einsum", "w"), [f"{a}o_proj.weight"], o))
        if arch.use_qk_norm:
            plan.append(((lay, "attn", "_query_norm", "scale"), [f"{a}q_norm.weight"], same))
            plan.append(((lay, "attn", "_key_norm", "scale"), [f"{a}k_norm.weight"], same))
        m = f"{hf}mlp."
        plan.append(((lay, "mlp", "gating_einsum"), [f"{m}gate_proj.weight", f"{m}up_proj.weight"],
                     gating))
        plan.append(((lay, "mlp", "linear"), [f"{m}down_proj.weight"], lambda w: w.T))
    return plan


def gemma_shapes(arch: Arch) -> dict[tuple[str, ...], tuple[int, ...]]:
    """The gemma param shapes of ``arch`` (without building the model)."""
    fam = families.family(arch.family)
    if fam.hf_map and fam.param_shapes is not None:
        return dict(fam.param_shapes(arch.transformer_config_fields()))  # type: ignore[attr-defined]
    n, k, h, d, f = arch.num_heads, arch.num_kv_heads, arch.head_dim, arch.embed_dim, arch.hidden_dim
    out: dict[tuple[str, ...], tuple[int, ...]] = {
        ("embedder", "input_embedding"): (arch.vocab_size, d), ("final_norm", "scale"): (d,)}
    for i in range(arch.num_layers):
        lay = f"layer_{i}"
        for ours in _NORMS:
            out[(lay, ours, "scale")] = (d,)
        if k == n:
            out[(lay, "attn", "qkv_einsum", "w")] = (3, n, d, h)
        else:
            out[(lay, "attn", "q_einsum", "w")] = (n, d, h)
            out[(lay, "attn", "kv_einsum", "w")] = (2, k, d, h)
        out[(lay, "attn", "attn_vec_einsum", "w")] = (n, h, d)
        if arch.use_qk_norm:
            out[(lay, "attn", "_query_norm", "scale")] = (h,)
            out[(lay, "attn", "_key_norm", "scale")] = (h,)
        out[(lay, "mlp", "gating_einsum")] = (2, f, d) if arch.transpose_gating else (2, d, f)
        out[(lay, "mlp", "linear")] = (f, d)
    return out


def hf_to_gemma(tensors: Mapping[str, np.ndarray], arch: Arch) -> dict[str, Any]:
    """A nested gemma params tree (numpy) from HF tensors."""
    prefix = hf_prefix(tensors)
    tree: dict[str, Any] = {}
    for path, names, fn in leaf_plan(arch):
        value = fn(*(np.asarray(tensors[prefix + x]) if prefix + x in tensors else omitted(x, arch)
                     for x in names))
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return tree


def gemma_to_hf(params: Mapping[str, Any], transformer_config: Any = None, family: str = "",
                *, arch: Arch | None = None) -> dict[str, np.ndarray]:
    """HF tensors (``model.`` prefix) from a gemma params tree: the inverse of ``hf_to_gemma``.

    Pass the model's ``TransformerConfig`` and family, or an ``Arch``.
    LoRA adapters must be fused first (``adapters_lib.lora.fuse.fuse_lora``).
    """
    if arch is None:
        arch = arch_from_config(transformer_config, family)
    own = families.hf_map(arch)
    if own is not None:
        return own.gemma_to_hf(params, arch)
    n, k, h, d = arch.num_heads, arch.num_kv_heads, arch.head_dim, arch.embed_dim

    def get(*path: str) -> np.ndarray:
        node: Any = params
        for part in path:
            node = node[part]
        return np.asarray(node)

    out = {"model.embed_tokens.weight": get("embedder", "input_embedding"),
           "model.norm.weight": get("final_norm", "scale")}
    for i in range(arch.num_layers):
        lay, p = f"layer_{i}", f"model.layers.{i}."
        for ours, theirs in _NORMS.items():
            out[f"{p}{theirs}.weight"] = get(lay, ours, "scale")
        a = f"{p}self_attn."
        if k == n:
            w = get(lay, "attn", "qkv_einsum", "w")
            for j, name in enumerate("qkv"):
                out[f"{a}{name}_proj.weight"] = w[j].transpose(0, 2, 1).reshape(n * h, d)
        else:
            out[f"{a}q_proj.weight"] = get(lay, "attn", "q_einsum", "w").transpose(0, 2, 1).reshape(n * h, d)
            kv = get(lay, "attn", "kv_einsum", "w")
            out[f"{a}k_proj.weight"] = kv[0].transpose(0, 2, 1).reshape(k * h, d)
            out[f"{a}v_proj.weight"] = kv[1].transpose(0, 2, 1).reshape(k * h, d)
        out[f"{a}o_proj.weight"] = get(lay, "attn", "attn_vec_einsum", "w").reshape(n * h, d).T
        if arch.use_qk_norm:
            out[f"{a}q_norm.weight"] = get(lay, "attn", "_query_norm", "scale")
            out[f"{a}k_norm.weight"] = get(lay, "attn", "_key_norm", "scale")
        g = get(lay, "mlp", "gating_einsum")
        gate, up = (g[0], g[1]) if arch.transpose_gating else (g[0].T, g[1].T)
        out[f"{p}mlp.gate_proj.weight"] = gate
        out[f"{p}mlp.up_proj.weight"] = up
        out[f"{p}mlp.down_proj.weight"] = get(lay, "mlp", "linear").T
    return {name: np.ascontiguousarray(v) for name, v in out.items()}


def omitted(hf_name: str, arch: Arch) -> np.ndarray:
    """A tensor the checkpoint may leave out, as the library expects it (else KeyError)."""
    own = families.hf_map(arch)
    fill = own.omitted_fill(hf_name, arch) if own is not None else None
    if fill is None:
        raise KeyError(hf_name)
    return fill


def arch_from_config(config: Any, family: str) -> Arch:
    """An ``Arch`` from a gemma model config of any family that exports."""
    return families.arch_of_config(config, family)


def save_hf(folder: Path, tensors: Mapping[str, np.ndarray], config: Mapping[str, Any], *,
            max_shard_bytes: int = 0) -> list[Path]:
    """Write ``config.json`` and the tensors (one file, or shards + index over ``max_shard_bytes``).

    The weights of an earlier HF export in ``folder`` (``model*.safetensors``, the index) are
    removed first: a loader reading a stale index would load the old shards."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in [*folder.glob("model*.safetensors"), folder / "model.safetensors.index.json"]:
        old.unlink(missing_ok=True)
    (folder / "config.json").write_text(json.dumps(dict(config), indent=2) + "\n")
    names = sorted(tensors)
    total = sum(np.asarray(tensors[x]).nbytes for x in names)
    if not max_shard_bytes or total <= max_shard_bytes:
        write_safetensors(folder / "model.safetensors", tensors)
        return [folder / "model.safetensors"]
    groups: list[list[str]] = [[]]
    size = 0
    for name in names:
        nbytes = np.asarray(tensors[name]).nbytes
        if groups[-1] and size + nbytes > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    files, weight_map = [], {}
    for i, group in enumerate(groups, 1):
        file = folder / f"model-{i:05d}-of-{len(groups):05d}.safetensors"
        write_safetensors(file, {x: tensors[x] for x in group})
        weight_map.update({x: file.name for x in group})
        files.append(file)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return files



def export_hf(folder: Path, params: Mapping[str, Any], transformer_config: Any, family: str, *,
              dtype: str | None = None, tokenizer: str | Path | None = None,
              max_shard_bytes: int = 5 << 30) -> list[Path]:
    """Write a Hugging Face model folder (config.json, safetensors, tokenizer.model).

    ``params``: a fused gemma tree (no LoRA branches). ``dtype``: cast the tensors
    ("bfloat16", "float32"); default keeps the params' dtype.
    """
    import shutil

    arch = arch_from_config(transformer_config, family)
    tensors = gemma_to_hf(params, arch=arch)
    if dtype:
        if dtype not in _CODES:
            raise SafetensorsError(f"cannot export as {dtype}: use one of {', '.join(_CODES)}")
        target = _np_dtype(_CODES[dtype])
        tensors = {k: v.astype(target) for k, v in tensors.items()}
    first = next(iter(tensors.values()))
    config = hf_config_for(arch, dtype=first.dtype.name)
    files = save_hf(Path(folder), tensors, config, max_shard_bytes=max_shard_bytes)
    if tokenizer:
        shutil.copy(tokenizer, Path(folder) / "tokenizer.model")
    return files
