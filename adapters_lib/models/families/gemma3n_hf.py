"""Gemma 3n ↔ Hugging Face tensors (transformers' ``Gemma3nForCausalLM`` / the text tower of
``Gemma3nForConditionalGeneration``, weights under ``model.language_model.``): reshapes and
transposes, the multimodal rows of ``embed_tokens`` trimmed (and padded back with zeros);
``config.json`` both ways is in ``gemma3n``.

============================================================  =================================
HF (``layers.i.``; ``nn.Linear`` weights are ``[out, in]``)     gemma (``layer_i/``)
============================================================  =================================
embed_tokens (V + 256, D)                                       embedder/input_embedding (V, D)
embed_tokens_per_layer (V, L·P)                                 embedder/per_layer_input_embedding (V, L, P)
per_layer_model_projection (L·P, D)                             embedder/per_layer_input_projection/w (D, L, P)
altup_projections.j / altup_unembed_projections.j (D, D)        altup_projection_j/altup_projection_j (D, D)ᵀ …
self_attn.{q,k,v,o}_proj, q_norm, k_norm                        attn/q_einsum, kv_einsum, attn_vec_einsum, query_norm, key_norm
mlp.{gate,up,down}_proj                                         mlp/gating_einsum (2, F, D), mlp/linear (F, D)
altup.correction_coefs (A, 4)                                   altup/correction_coefs (4, A)
altup.prediction_coefs (A·A, 4)                                 altup/prediction_coefs (4, A, A)
altup.modality_router (4, D), router_norm, correct_output_scale  altup/modality_router/w (D, 4), router_norm_layer, correct_output_scale
laurel.linear_left (R, D), linear_right (D, R), post_laurel_norm   laurel/linear_left/w (D, R), linear_right/w (R, D), post_laurel_norm
per_layer_input_gate (P, D), per_layer_projection (D, P),        per_layer_mapping/per_layer_input_gate/w (D, P), per_layer_projection/w (P, D),
post_per_layer_input_norm                                        per_layer_mapping/post_per_layer_input_norm
============================================================  =================================

Norm weights copy as they are (both multiply by ``scale``). The KV-shared layers have no k/v
(nor k-norm) in gemma's tree: a checkpoint's are not read; the export writes zeros (ones) for
them, as the release holds them and transformers ignores them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from adapters_lib.models.families.gemma3n import Gemma3nArch

Plan = list[tuple[tuple[str, ...], list[str], Callable[..., np.ndarray]]]

_NORMS = {"pre_attention_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
          "pre_ffw_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
          "post_laurel_norm": "laurel.post_laurel_norm"}


def _same(w):
    return np.asarray(w)


def _t(w):
    return np.asarray(w).T


def leaf_plan(arch: Gemma3nArch) -> Plan:
    """For each gemma leaf: its path, the HF names (no prefix) it is made of, and how."""
    v, n, k, h, d = arch.vocab_size, arch.num_heads, arch.num_kv_heads, arch.head_dim, arch.embed_dim
    L, p, a = arch.num_layers, arch.per_layer_input_dim, arch.altup_inputs
    shared = set(arch.shared_kv())

    def heads(w, c):  # (c·H, D) → (c, D, H)
        return np.asarray(w).reshape(c, h, d).transpose(0, 2, 1)

    plan: Plan = [
        (("embedder", "input_embedding"), ["embed_tokens.weight"], lambda w: np.asarray(w)[:v]),
        (("final_norm", "scale"), ["norm.weight"], _same),
        (("embedder", "per_layer_input_embedding"), ["embed_tokens_per_layer.weight"],
         lambda w: np.asarray(w)[:v].reshape(v, L, p)),
        (("embedder", "per_layer_input_projection", "w"), ["per_layer_model_projection.weight"],
         lambda w: np.asarray(w).T.reshape(d, L, p)),
        (("embedder", "per_layer_projection_norm", "scale"), ["per_layer_projection_norm.weight"], _same)]
    for j in range(a - 1):
        for ours, theirs in (("altup_projection", "altup_projections"),
                             ("altup_unembed_projection", "altup_unembed_projections")):
            plan.append(((f"{ours}_{j}", f"{ours}_{j}"), [f"{theirs}.{j}.weight"], _t))
    for i in range(L):
        lay, hf = f"layer_{i}", f"layers.{i}."
        s = f"{hf}self_attn."
        if n == k:
            plan.append(((lay, "attn", "qkv_einsum", "w"), [f"{s}q_proj.weight", f"{s}k_proj.weight",
                                                            f"{s}v_proj.weight"],
                         lambda q, kk, vv: np.stack([heads(q, n), heads(kk, n), heads(vv, n)])))
        else:
            plan.append(((lay, "attn", "q_einsum", "w"), [f"{s}q_proj.weight"], lambda w: heads(w, n)))
            if i not in shared:
                plan.append(((lay, "attn", "kv_einsum", "w"), [f"{s}k_proj.weight", f"{s}v_proj.weight"],
                             lambda wk, wv: np.stack([heads(wk, k), heads(wv, k)])))
        plan.append(((lay, "attn", "attn_vec_einsum", "w"), [f"{s}o_proj.weight"],
                     lambda w: np.asarray(w).T.reshape(n, h, d)))
        plan.append(((lay, "attn", "query_norm", "scale"), [f"{s}q_norm.weight"], _same))
        if i not in shared:
            plan.append(((lay, "attn", "key_norm", "scale"), [f"{s}k_norm.weight"], _same))
        plan.append(((lay, "mlp", "gating_einsum"), [f"{hf}mlp.gate_proj.weight", f"{hf}mlp.up_proj.weight"],
                     lambda g, u: np.stack([np.asarray(g), np.asarray(u)])))
        plan.append(((lay, "mlp", "linear"), [f"{hf}mlp.down_proj.weight"], _t))
        for ours, theirs in _NORMS.items():
            plan.append(((lay, ours, "scale"), [f"{hf}{theirs}.weight"], _same))
        al = f"{hf}altup."
        plan += [((lay, "altup", "correct_output_scale"), [f"{al}correct_output_scale"], _same),
                 ((lay, "altup", "correction_coefs"), [f"{al}correction_coefs.weight"], _t),
                 ((lay, "altup", "prediction_coefs"), [f"{al}prediction_coefs.weight"],
                  lambda w: np.asarray(w).T.reshape(-1, a, a)),
                 ((lay, "altup", "modality_router", "w"), [f"{al}modality_router.weight"], _t),
                 ((lay, "altup", "router_norm_layer", "scale"), [f"{al}router_norm.weight"], _same),
                 ((lay, "laurel", "linear_left", "w"), [f"{hf}laurel.linear_left.weight"], _t),
                 ((lay, "laurel", "linear_right", "w"), [f"{hf}laurel.linear_right.weight"], _t),
                 ((lay, "per_layer_mapping", "per_layer_input_gate", "w"), [f"{hf}per_layer_input_gate.weight"], _t),
                 ((lay, "per_layer_mapping", "per_layer_projection", "w"), [f"{hf}per_layer_projection.weight"], _t),
                 ((lay, "per_layer_mapping", "post_per_layer_input_norm", "scale"),
                  [f"{hf}post_per_layer_input_norm.weight"], _same)]
    return plan


def _shared_kv_names(arch: Gemma3nArch) -> dict[str, tuple[int, ...]]:
    """HF names of the KV-shared layers' own k/v and k-norm (not in gemma's tree) → shape."""
    out: dict[str, tuple[int, ...]] = {}
    if arch.num_heads == arch.num_kv_heads:
        return out
    for i in arch.shared_kv():
        s = f"layers.{i}.self_attn."
        kh = (arch.num_kv_heads * arch.head_dim, arch.embed_dim)
        out.update({f"{s}k_proj.weight": kh, f"{s}v_proj.weight": kh, f"{s}k_norm.weight": (arch.head_dim,)})
    return out


def omitted_fill(name: str, arch: Gemma3nArch) -> np.ndarray | None:
    """What a KV-shared layer's k/v (k-norm) is written as, when asked (else None)."""
    shape = _shared_kv_names(arch).get(name)
    if shape is None:
        return None
    return np.ones(shape, np.float32) if name.endswith("k_norm.weight") else np.zeros(shape, np.float32)


def hf_shapes(arch: Gemma3nArch) -> dict[str, tuple[int, ...]]:
    """HF tensor shapes (no prefix) of ``arch``: the export's, the KV-shared k/v included."""
    from adapters_lib.models.families.gemma3n import param_shapes

    ours = dict(param_shapes(arch.transformer_config_fields()))
    out: dict[str, tuple[int, ...]] = {}
    for path, names, _ in leaf_plan(arch):
        out.update({nm: _hf_shape(nm, ours[path], arch) for nm in names})
    out.update(_shared_kv_names(arch))
    return out


def _hf_shape(name: str, gemma: tuple[int, ...], arch: Gemma3nArch) -> tuple[int, ...]:
    d = arch.embed_dim
    if name == "embed_tokens.weight":
        return (arch.hf_rows, d)
    if name == "embed_tokens_per_layer.weight":
        return (gemma[0], gemma[1] * gemma[2])
    if name == "per_layer_model_projection.weight":
        return (gemma[1] * gemma[2], gemma[0])
    if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
        return ((arch.num_heads if "q_proj" in name or arch.num_heads == arch.num_kv_heads
                 else arch.num_kv_heads) * arch.head_dim, d)
    if name.endswith("o_proj.weight"):
        return (d, gemma[0] * gemma[1])
    if name.endswith(("gate_proj.weight", "up_proj.weight")):
        return (gemma[1], gemma[2])
    if name.endswith("prediction_coefs.weight"):
        return (gemma[1] * gemma[2], gemma[0])
    if len(gemma) == 2 and not name.endswith("correct_output_scale"):
        return (gemma[1], gemma[0])
    return gemma


def gemma_to_hf(params: Mapping[str, Any], arch: Gemma3nArch) -> dict[str, np.ndarray]:
    """HF tensors (``model.`` prefix) from a gemma params tree: the inverse of ``leaf_plan``."""
    n, h, d, L, p = arch.num_heads, arch.head_dim, arch.embed_dim, arch.num_layers, arch.per_layer_input_dim

    def get(path):
        node: Any = params
        for part in path:
            node = node[part]
        return np.asarray(node)

    out: dict[str, np.ndarray] = {}
    for path, names, _ in leaf_plan(arch):
        w, leaf, first = get(path), "/".join(path), names[0]
        if leaf == "embedder/input_embedding":
            out[first] = np.concatenate([w, np.zeros((arch.hf_rows - w.shape[0], d), w.dtype)])
        elif leaf == "embedder/per_layer_input_embedding":
            out[first] = w.reshape(w.shape[0], L * p)
        elif leaf == "embedder/per_layer_input_projection/w":
            out[first] = w.reshape(d, L * p).T
        elif leaf.endswith(("q_einsum/w", "kv_einsum/w", "qkv_einsum/w")):
            stack = w if leaf.endswith(("kv_einsum/w", "qkv_einsum/w")) else w[None]
            for name, part in zip(names, stack, strict=True):
                out[name] = part.transpose(0, 2, 1).reshape(-1, d)
        elif leaf.endswith("attn_vec_einsum/w"):
            out[first] = w.reshape(n * h, d).T
        elif len(names) == 2:  # gate, up
            out[names[0]], out[names[1]] = w[0], w[1]
        elif leaf.endswith("prediction_coefs"):
            out[first] = w.reshape(w.shape[0], -1).T
        elif w.ndim == 2:
            out[first] = w.T
        else:
            out[first] = w
    dtype = out["embed_tokens.weight"].dtype
    out.update({name: omitted_fill(name, arch).astype(dtype) for name in _shared_kv_names(arch)})  # type: ignore[union-attr]
    return {f"model.{k}": np.ascontiguousarray(v) for k, v in out.items()}


# --------------------------------------------------------------------------- llama.cpp's names

GGUF_TOP = {"embed_tokens.weight": "token_embd.weight", "norm.weight": "output_norm.weight",
            "embed_tokens_per_layer.weight": "per_layer_token_embd.weight",
            "per_layer_model_projection.weight": "per_layer_model_proj.weight",
            "per_layer_projection_norm.weight": "per_layer_proj_norm.weight"}
"""HF name (no prefix) → the GGUF tensor llama.cpp's converter writes it as (same layout)."""
GGUF_BLOCK = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight", "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "altup.correction_coefs.weight": "altup_correct_coef.weight",
    "altup.correct_output_scale": "altup_correct_scale.weight",
    "altup.prediction_coefs.weight": "altup_predict_coef.weight",
    "altup.modality_router.weight": "altup_router.weight", "altup.router_norm.weight": "altup_router_norm.weight",
    "laurel.linear_left.weight": "laurel_l.weight", "laurel.linear_right.weight": "laurel_r.weight",
    "laurel.post_laurel_norm.weight": "laurel_post_norm.weight",
    "per_layer_input_gate.weight": "inp_gate.weight", "per_layer_projection.weight": "proj.weight",
    "post_per_layer_input_norm.weight": "post_norm.weight",
}
"""The same inside the blocks (``layers.N.`` ↔ ``blk.N.``). Norms are stored as they are."""
GGUF_STACKED = {"altup_projections": "altup_proj.weight", "altup_unembed_projections": "altup_unembd_proj.weight"}
"""HF's ``<name>.j.weight`` are row ``j`` of one GGUF tensor (llama.cpp stacks the three)."""
GGUF_PADDED = ("per_layer_token_embd.weight",)
"""Tensors llama.cpp pads with zero rows up to ``vocab_size`` (the multimodal ids)."""
