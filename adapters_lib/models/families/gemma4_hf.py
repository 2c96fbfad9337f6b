"""Gemma 4 ↔ Hugging Face tensors (transformers' ``Gemma4ForCausalLM`` / the text tower of
``Gemma4ForConditionalGeneration``, weights under ``model.language_model.``), exact (reshapes
and transposes only); ``config.json`` both ways is in ``gemma4``.

======================================================  =======================================
HF (``layers.i.``)                                      gemma (``layer_i/``)
======================================================  =======================================
self_attn.q_proj (N·H, D)                               attn/q_einsum/w (N, D, H)
self_attn.{k,v}_proj (K·H, D)                           attn/kv_einsum/w (2, K, D, H)
self_attn.k_proj, no v_proj (k=v global layers)         attn/k_einsum/w (K, D, H)
self_attn.o_proj (D, N·H)                               attn/attn_vec_einsum/w (N, H, D)
self_attn.{q,k}_norm                                    attn/{query,key}_norm/scale
mlp.{gate,up}_proj, mlp.down_proj                       mlp/ (dense) or mlp2/ (MoE's shared MLP)
experts.gate_up_proj (E, 2·X, D)                        mlp/gating_einsum/w (E, 2, X, D)
experts.down_proj (E, D, X)                             mlp/linear/w (E, X, D)
router.proj (E, D), router.scale, router.per_expert_scale  mlp/router_logits/w (D, E), router_scale, per_expert_scale
per_layer_input_gate (P, D), per_layer_projection (D, P)   per_layer_input_gate/w (D, P), per_layer_projection/w (P, D)
layer_scalar (1,)                                       skip_scale
embed_tokens_per_layer (V, L·P)                         embedder/per_layer_embeddings (V, L, P)
per_layer_model_projection (L·P, D)                     embedder/per_layer_model_projection/w (D, L, P)
======================================================  =======================================

Norm weights copy as they are (both multiply by ``scale``). The MoE block's norms: HF
``pre_feedforward_layernorm``/``post_feedforward_layernorm_1`` wrap the shared MLP (gemma
``pre_ffw2_norm``/``post_ffw2_norm``), ``pre_feedforward_layernorm_2``/``post_feedforward_layernorm_2``
the experts (gemma ``pre_ffw_norm``/``post_ffw1_norm``). KV-shared layers whose k/v (and k-norm)
transformers' save dropped get zeros (and ones): the library computes and discards them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from adapters_lib.models.families.gemma4 import Gemma4Arch

_NORMS = {"pre_attention_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
          "post_ffw_norm": "post_feedforward_layernorm"}
_DENSE_NORMS = {"pre_ffw_norm": "pre_feedforward_layernorm"}
_MOE_NORMS = {"pre_ffw2_norm": "pre_feedforward_layernorm", "post_ffw2_norm": "post_feedforward_layernorm_1",
              "pre_ffw_norm": "pre_feedforward_layernorm_2", "post_ffw1_norm": "post_feedforward_layernorm_2"}

Plan = list[tuple[tuple[str, ...], list[str], Callable[..., np.ndarray]]]


def _same(w):
    return np.asarray(w)


def leaf_plan(arch: Gemma4Arch) -> Plan:
    """For each gemma leaf: its path, the HF names (no prefix) it is made of, and how."""
    n, d, L, p = arch.num_heads, arch.embed_dim, arch.num_layers, arch.per_layer_input_dim
    plan: Plan = [(("embedder", "input_embedding"), ["embed_tokens.weight"], _same),
                  (("final_norm", "scale"), ["norm.weight"], _same)]
    if p:
        plan += [(("embedder", "per_layer_embeddings"), ["embed_tokens_per_layer.weight"],
                  lambda w: np.asarray(w).reshape(-1, L, p)),
                 (("embedder", "per_layer_model_projection", "w"), ["per_layer_model_projection.weight"],
                  lambda w: np.asarray(w).T.reshape(d, L, p)),
                 (("embedder", "per_layer_projection_norm", "scale"), ["per_layer_projection_norm.weight"], _same)]
    for i, kind in enumerate(arch.attention):
        lay, hf = f"layer_{i}", f"layers.{i}."
        glob = kind == "global"
        h = (arch.global_head_dim or arch.head_dim) if glob else arch.head_dim
        k = (arch.num_global_kv_heads or arch.num_kv_heads) if glob else arch.num_kv_heads
        a = f"{hf}self_attn."

        def heads(w, c, h=h):  # (c·H, D) → (c, D, H)
            return np.asarray(w).reshape(c, h, d).transpose(0, 2, 1)

        plan.append(((lay, "attn", "q_einsum", "w"), [f"{a}q_proj.weight"], lambda w, h=h: heads(w, n, h)))
        if glob and arch.k_eq_v_global:
            plan.append(((lay, "attn", "k_einsum", "w"), [f"{a}k_proj.weight"], lambda w, k=k, h=h: heads(w, k, h)))
        else:
            plan.append(((lay, "attn", "kv_einsum", "w"), [f"{a}k_proj.weight", f"{a}v_proj.weight"],
                         lambda wk, wv, k=k, h=h: np.stack([heads(wk, k, h), heads(wv, k, h)])))
        plan.append(((lay, "attn", "attn_vec_einsum", "w"), [f"{a}o_proj.weight"],
                     lambda w, h=h: np.asarray(w).T.reshape(n, h, d)))
        plan.append(((lay, "attn", "query_norm", "scale"), [f"{a}q_norm.weight"], _same))
        plan.append(((lay, "attn", "key_norm", "scale"), [f"{a}k_norm.weight"], _same))
        norms = dict(_NORMS, **(_MOE_NORMS if arch.moe else _DENSE_NORMS))
        for ours, theirs in norms.items():
            plan.append(((lay, ours, "scale"), [f"{hf}{theirs}.weight"], _same))
        dense = "mlp2" if arch.moe else "mlp"
        m = f"{hf}mlp."
        plan.append(((lay, dense, "gating_einsum"), [f"{m}gate_proj.weight", f"{m}up_proj.weight"],
                     lambda g, u: np.stack([np.asarray(g), np.asarray(u)])))
        plan.append(((lay, dense, "linear"), [f"{m}down_proj.weight"], lambda w: np.asarray(w).T))
        if arch.moe:
            e, x = arch.num_experts, arch.expert_dim
            plan += [((lay, "mlp", "gating_einsum", "w"), [f"{hf}experts.gate_up_proj"],
                      lambda w, e=e, x=x: np.asarray(w).reshape(e, 2, x, d)),
                     ((lay, "mlp", "linear", "w"), [f"{hf}experts.down_proj"],
                      lambda w: np.asarray(w).transpose(0, 2, 1)),
                     ((lay, "mlp", "router_logits", "w"), [f"{hf}router.proj.weight"], lambda w: np.asarray(w).T),
                     ((lay, "mlp", "router_scale"), [f"{hf}router.scale"], _same),
                     ((lay, "mlp", "per_expert_scale"), [f"{hf}router.per_expert_scale"], _same)]
        if p:
            plan += [((lay, "per_layer_input_gate", "w"), [f"{hf}per_layer_input_gate.weight"], lambda w: np.asarray(w).T),
                     ((lay, "per_layer_projection", "w"), [f"{hf}per_layer_projection.weight"], lambda w: np.asarray(w).T),
                     ((lay, "post_per_layer_input_norm", "scale"), [f"{hf}post_per_layer_input_norm.weight"], _same)]
        plan.append(((lay, "skip_scale"), [f"{hf}layer_scalar"], lambda w: np.asarray(w).reshape(1)))
    return plan


def omitted_fill(name: str, arch: Gemma4Arch) -> np.ndarray | None:
    """What a KV-shared layer's missing k/v projection or k-norm is filled with (else None)."""
    parts = name.split(".")
    if len(parts) < 4 or parts[0] != "layers" or int(parts[1]) not in arch.shared_kv():
        return None
    i = int(parts[1])
    glob = arch.attention[i] == "global"
    h = (arch.global_head_dim or arch.head_dim) if glob else arch.head_dim
    k = (arch.num_global_kv_heads or arch.num_kv_heads) if glob else arch.num_kv_heads
    if name.endswith(("k_proj.weight", "v_proj.weight")):
        return np.zeros((k * h, arch.embed_dim), np.float32)
    if name.endswith("k_norm.weight"):
        return np.ones((h,), np.float32)
    return None


def hf_shapes(arch: Gemma4Arch) -> dict[str, tuple[int, ...]]:
    """HF tensor shapes (no prefix) of ``arch``, from the gemma shapes through the plan."""
    from adapters_lib.models.families.gemma4 import param_shapes

    ours = dict(param_shapes(arch.transformer_config_fields()))
    out: dict[str, tuple[int, ...]] = {}
    for path, names, _ in leaf_plan(arch):
        for nm in names:
            out[nm] = _hf_shape(nm, ours[path])
    return out


def _hf_shape(name: str, gemma: tuple[int, ...]) -> tuple[int, ...]:
    if name.endswith(("q_proj.weight", "k_proj.weight")) and len(gemma) == 3:  # (c, D, H)
        return (gemma[0] * gemma[2], gemma[1])
    if name.endswith(("k_proj.weight", "v_proj.weight")):  # from (2, K, D, H)
        return (gemma[1] * gemma[3], gemma[2])
    if name.endswith("o_proj.weight"):
        return (gemma[2], gemma[0] * gemma[1])
    if name.endswith(("gate_proj.weight", "up_proj.weight")):
        return (gemma[1], gemma[2])
    if name.endswith("down_proj.weight") or name.endswith(("router.proj.weight", "per_layer_input_gate.weight",
                                                           "per_layer_projection.weight")):
        return (gemma[1], gemma[0])
    if name.endswith("gate_up_proj"):
        return (gemma[0], 2 * gemma[2], gemma[3])
    if name.endswith("experts.down_proj"):
        return (gemma[0], gemma[2], gemma[1])
    if name == "embed_tokens_per_layer.weight":
        return (gemma[0], gemma[1] * gemma[2])
    if name == "per_layer_model_projection.weight":
        return (gemma[1] * gemma[2], gemma[0])
    return gemma


def gemma_to_hf(params: Mapping[str, Any], arch: Gemma4Arch) -> dict[str, np.ndarray]:
    """HF tensors (``model.`` prefix) from a gemma params tree: the inverse of ``leaf_plan``."""
    n, d, L, p = arch.num_heads, arch.embed_dim, arch.num_layers, arch.per_layer_input_dim

    def get(path):
        node: Any = params
        for part in path:
            node = node[part]
        return np.asarray(node)

    out: dict[str, np.ndarray] = {}
    for path, names, _ in leaf_plan(arch):
        w = get(path)
        leaf = "/".join(path)
        if leaf.endswith("q_einsum/w") or leaf.endswith("k_einsum/w"):
            out[names[0]] = w.transpose(0, 2, 1).reshape(-1, d)
        elif leaf.endswith("kv_einsum/w"):
            out[names[0]] = w[0].transpose(0, 2, 1).reshape(-1, d)
            out[names[1]] = w[1].transpose(0, 2, 1).reshape(-1, d)
        elif leaf.endswith("attn_vec_einsum/w"):
            out[names[0]] = w.reshape(n * w.shape[1], d).T
        elif len(names) == 2:  # gate, up
            out[names[0]], out[names[1]] = w[0], w[1]
        elif names[0].endswith(("mlp.down_proj.weight", "router.proj.weight", "per_layer_input_gate.weight",
                                "per_layer_projection.weight")):
            out[names[0]] = w.T
        elif names[0].endswith("gate_up_proj"):
            out[names[0]] = w.reshape(w.shape[0], -1, d)
        elif names[0].endswith("experts.down_proj"):
            out[names[0]] = w.transpose(0, 2, 1)
        elif names[0] == "embed_tokens_per_layer.weight":
            out[names[0]] = w.reshape(w.shape[0], L * p)
        elif names[0] == "per_layer_model_projection.weight":
            out[names[0]] = w.reshape(d, L * p).T
        else:
            out[names[0]] = w
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
    "pre_feedforward_layernorm_2.weight": "pre_ffw_norm_2.weight",
    "post_feedforward_layernorm_1.weight": "post_ffw_norm_1.weight",
    "post_feedforward_layernorm_2.weight": "post_ffw_norm_2.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "router.proj.weight": "ffn_gate_inp.weight", "router.scale": "ffn_gate_inp.scale",
    "router.per_expert_scale": "ffn_down_exps.scale", "experts.gate_up_proj": "ffn_gate_up_exps.weight",
    "experts.down_proj": "ffn_down_exps.weight", "layer_scalar": "layer_output_scale.weight",
    "per_layer_input_gate.weight": "inp_gate.weight", "per_layer_projection.weight": "proj.weight",
    "post_per_layer_input_norm.weight": "post_norm.weight",
}
"""The same inside the blocks (``layers.N.`` ↔ ``blk.N.``). Norms are stored as they are."""
GGUF_SPLIT = {"ffn_gate_up_exps.weight": ("ffn_gate_exps.weight", "ffn_up_exps.weight")}
"""A fused expert tensor an older converter wrote as two (concatenated on the hidden axis)."""
