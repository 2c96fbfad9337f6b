"""Gemma 4 and Gemma 3n GGUFs as llama.cpp's converter writes them (``conversion/gemma.py``):
their architecture from the metadata and tensor table, and which tensor holds each HF weight.

Gemma 4 (``general.architecture = gemma4``): norms stored as they are (no ``1 + w``); per-layer
arrays for the KV heads (``head_count_kv``: local, global) and the MLP width (double-wide
KV-shared layers); ``key_length`` is the global layers' head size, ``key_length_swa`` the local
ones'; ``sliding_window_pattern`` a bool per layer; a global layer without ``attn_v`` shares k
and v; the router's scale and the per-expert scale are ``ffn_gate_inp.scale`` and
``ffn_down_exps.scale``; the global layers' partial rotary is a ``rope_freqs`` tensor (1.0 for
the rotated pairs, 1e30 for the others), read when the weights are.

Both: ``attention.shared_kv_layers`` counts the KV-shared layers; each reads the last unshared
layer of its kind (``arch.kv_sources``: transformers' and keras-hub's rule, the one the weights
were trained under). llama.cpp's runtime takes the last unshared layer for a global one and the
one before for a local one: the same layers whenever the unshared layers end local, global.

Gemma 3n (``gemma3n``): ``token_embd`` keeps HF's 256 multimodal rows and
``per_layer_token_embd`` is padded with zeros to the same count (both trimmed on load); the
three AltUp projections are stacked in ``altup_proj``/``altup_unembd_proj``; the activation
sparsity is stored as Gaussian quantiles (``activation_sparsity_scale``, Φ⁻¹ of the target).
"""

from __future__ import annotations

import math
from typing import Any

from adapters_lib.models import families
from adapters_lib.models.families import Arch, ArchError
from adapters_lib.models.gguf.gguf_info import GGUFInfo


def _get(info: GGUFInfo, key: str, fam: str, default: Any = None) -> Any:
    value = info.get(f"{{arch}}.{key}", default)
    if value is None:
        raise ArchError(f"GGUF metadata lacks {info.architecture}.{key}", "unreadable", fam)
    return value


def _per_layer(value: Any, layers: int, key: str, fam: str) -> list[int]:
    values = [int(v) for v in value] if isinstance(value, list) else [int(value)] * layers
    if len(values) != layers:
        raise ArchError(f"{key} has {len(values)} entries for {layers} layers", "unreadable", fam)
    return values


def _pattern(info: GGUFInfo, layers: int, fam: str) -> tuple[str, ...]:
    raw = _get(info, "attention.sliding_window_pattern", fam)
    if not isinstance(raw, list) or len(raw) != layers:
        raise ArchError("attention.sliding_window_pattern is not one flag per layer", "unreadable", fam)
    return tuple("local" if bool(x) else "global" for x in raw)


def _embedding(info: GGUFInfo, fam: str) -> tuple[int, int]:
    embed = info.tensors.get("token_embd.weight")
    if embed is None or len(embed.shape) != 2:
        raise ArchError("no token_embd.weight tensor in the GGUF", "unreadable", fam)
    return int(embed.shape[0]), int(embed.shape[1])


def gemma4_from_gguf(info: GGUFInfo) -> Arch:
    from adapters_lib.models.families.gemma4 import Gemma4Arch

    fam = "gemma4"
    rows, d = _embedding(info, fam)
    layers = int(_get(info, "block_count", fam))
    attention = _pattern(info, layers, fam)
    kv = _per_layer(_get(info, "attention.head_count_kv", fam), layers, "head_count_kv", fam)
    ffw = _per_layer(_get(info, "feed_forward_length", fam), layers, "feed_forward_length", fam)
    shared = int(info.get("{arch}.attention.shared_kv_layers") or 0)
    local = [i for i, a in enumerate(attention) if a == "local"]
    glob = [i for i, a in enumerate(attention) if a == "global"]
    if not local or not glob:
        raise ArchError("Gemma 4 without both local and global layers", "unsupported", fam)
    h, gh = int(_get(info, "attention.key_length_swa", fam)), int(_get(info, "attention.key_length", fam))
    k_eq_v = f"blk.{glob[0]}.attn_v.weight" not in info.tensors
    wide = {ffw[i] for i in range(layers - shared, layers)} - {ffw[0]}
    if len(set(ffw[: layers - shared])) != 1 or len(wide) > 1:
        raise ArchError(f"feed_forward_length differs per layer otherwise than gemma's double-wide "
                        f"KV-shared layers ({sorted(set(ffw))})", "unsupported", fam)
    experts = int(info.get("{arch}.expert_count") or 0)
    rope_swa = int(info.get("{arch}.rope.dimension_count_swa") or h)
    soft = info.get("{arch}.final_logit_softcapping")
    return Gemma4Arch(
        "gemma4", layers, d, ffw[0], int(_get(info, "attention.head_count", fam)), h, kv[local[0]], rows,
        attention, int(_get(info, "attention.sliding_window", fam)), use_qk_norm=True, transpose_gating=True,
        query_pre_attn_scalar=1.0, final_logit_softcap=None if soft is None else float(soft),
        local_rope=int(info.get("{arch}.rope.freq_base_swa") or 10_000),
        global_rope=int(info.get("{arch}.rope.freq_base") or 1_000_000), global_head_dim=gh,
        num_global_kv_heads=kv[glob[0]] if kv[glob[0]] != kv[local[0]] else 0, k_eq_v_global=k_eq_v, local_rope_proportion=rope_swa / h,
        per_layer_input_dim=int(info.get("{arch}.embedding_length_per_layer_input") or 0),
        kv_shared_layers=shared, kv_shared_ffw_hidden=wide.pop() if wide else 0,
        num_experts=experts, expert_dim=int(info.get("{arch}.expert_feed_forward_length") or 0) if experts else 0,
        top_k_experts=int(info.get("{arch}.expert_used_count") or 0) if experts else 0)


def gemma3n_from_gguf(info: GGUFInfo) -> Arch:
    from adapters_lib.models.families.gemma3n import MULTIMODAL_ROWS, Gemma3nArch

    fam = "gemma3n"
    rows, d = _embedding(info, fam)
    layers = int(_get(info, "block_count", fam))
    attention = _pattern(info, layers, fam)
    ffw = _per_layer(_get(info, "feed_forward_length", fam), layers, "feed_forward_length", fam)
    if len(set(ffw)) != 1:
        raise ArchError(f"feed_forward_length differs per layer ({sorted(set(ffw))}): gemma's Gemma 3n "
                        "has one MLP width", "unsupported", fam)
    if int(info.get("{arch}.altup.num_inputs") or 4) != 4 or int(info.get("{arch}.altup.active_idx") or 0):
        raise ArchError("AltUp other than 4 streams, active 0: gemma cannot express it", "unsupported", fam)
    laurel = info.tensors.get("blk.0.laurel_l.weight")
    scales = info.get("{arch}.activation_sparsity_scale") or [-math.inf] * layers
    sparsity = tuple(0.0 if not math.isfinite(float(s)) or float(s) == -math.inf
                     else round(0.5 * (1 + math.erf(float(s) / math.sqrt(2))), 6) for s in scales)
    n = int(_get(info, "attention.head_count", fam))
    soft = info.get("{arch}.final_logit_softcapping")
    return Gemma3nArch(
        "gemma3n", layers, d, ffw[0], n, int(_get(info, "attention.key_length", fam)),
        _per_layer(_get(info, "attention.head_count_kv", fam), layers, "head_count_kv", fam)[0],
        rows - MULTIMODAL_ROWS, attention, int(_get(info, "attention.sliding_window", fam)),
        use_qk_norm=True, transpose_gating=True, query_pre_attn_scalar=1.0,
        final_logit_softcap=None if soft is None else float(soft),
        local_rope=int(info.get("{arch}.rope.freq_base_swa") or 10_000),
        global_rope=int(info.get("{arch}.rope.freq_base") or 1_000_000),
        per_layer_input_dim=int(_get(info, "embedding_length_per_layer_input", fam)),
        kv_shared_layers=int(info.get("{arch}.attention.shared_kv_layers") or 0),
        laurel_rank=int(laurel.shape[0]) if laurel is not None else 64,
        activation_sparsity=tuple(x if x > 1e-6 else 0.0 for x in sparsity))


FROM_GGUF = {"gemma4": gemma4_from_gguf, "gemma3n": gemma3n_from_gguf}


def gguf_plan(arch: Arch) -> dict[str, tuple[str, int | None]]:
    """HF name (``model.`` prefix) → (the GGUF tensor holding it, its row in a stacked tensor)."""
    own = families.hf_map(arch)
    stacked = getattr(own, "GGUF_STACKED", {})
    out: dict[str, tuple[str, int | None]] = {}
    for hf in own.hf_shapes(arch):
        head, _, rest = hf.partition(".")
        if hf in own.GGUF_TOP:
            out[f"model.{hf}"] = (own.GGUF_TOP[hf], None)
        elif head in stacked:
            out[f"model.{hf}"] = (stacked[head], int(rest.split(".")[0]))
        else:
            layer, _, inner = rest.partition(".")
            out[f"model.{hf}"] = (f"blk.{layer}.{own.GGUF_BLOCK[inner]}", None)
    return out


def split_parts(own: Any, name: str) -> tuple[str, ...]:
    """The tensors an older converter wrote ``name`` as (``GGUF_SPLIT``; block prefix kept), or ()."""
    stem, inner = "", name
    if name.startswith("blk."):
        layer, _, inner = name[len("blk."):].partition(".")
        stem = f"blk.{layer}."
    return tuple(stem + part for part in getattr(own, "GGUF_SPLIT", {}).get(inner, ()))


def check_tensors(arch: Arch, info: GGUFInfo) -> str | None:
    """None when the file holds what ``arch`` needs (a tensor the family may omit aside); else one line."""
    from adapters_lib.models.hf import hf_shapes

    own = families.hf_map(arch)
    want = hf_shapes(arch)
    padded = getattr(own, "GGUF_PADDED", ())
    for hf, (name, row) in gguf_plan(arch).items():
        t = info.tensors.get(name)
        split = split_parts(own, name)
        if t is None and split and all(s in info.tensors for s in split):
            continue
        if t is None:
            if own.omitted_fill(hf[len("model."):], arch) is not None:
                continue
            return f"tensor {name} missing from the GGUF"
        shape, need = tuple(t.shape[1:] if row is not None else t.shape), tuple(want[hf])
        if name in padded and shape[1:] == need[1:] and shape[0] >= need[0]:
            continue
        if shape != need:
            return f"tensor {name} has shape {tuple(t.shape)}, the metadata implies {need}"
    return None


def rope_proportion(freqs: Any, head_dim: int) -> float:
    """The rotated fraction of a head that llama.cpp's ``rope_freqs`` (1.0 rotated, 1e30 not) encodes."""
    import numpy as np

    return float(2 * int(np.sum(np.asarray(freqs) < 1e10)) / head_dim)
