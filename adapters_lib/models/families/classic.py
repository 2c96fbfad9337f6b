"""The module layout Gemma 2 and Gemma 3 share (``gemma.gm.nn.Transformer``): their name maps,
LoRA targets, chat template, sharding rules and weight shapes. ``gemma2.py`` and ``gemma3.py``
build their records from these tables plus their own sizes and defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters_lib.models.families.arch import Axis, ChatTemplate, LoraSlot

HF_NORMS = {
    "pre_attention_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "pre_ffw_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}

GGUF_TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
GGUF_BLOCK = {
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}

# target → the einsums (and slices along their leading axis) it adapts; K == N models use
# one qkv_einsum, the others q_einsum + kv_einsum.
LORA_TARGETS: dict[str, tuple[LoraSlot, ...]] = {
    "q": (LoraSlot("q_einsum"), LoraSlot("qkv_einsum", 0)),
    "k": (LoraSlot("kv_einsum", 0), LoraSlot("qkv_einsum", 1)),
    "v": (LoraSlot("kv_einsum", 1), LoraSlot("qkv_einsum", 2)),
    "o": (LoraSlot("attn_vec_einsum"),),
    "gate": (LoraSlot("gating_einsum", 0),),
    "up": (LoraSlot("gating_einsum", 1),),
    "down": (LoraSlot("linear"),),
}

LAYER_CLASSES = {"einsum": ("gemma.gm.nn._layers:Einsum",),
                 "attention": ("gemma.gm.nn._modules:Attention",)}

CHAT = ChatTemplate(("<start_of_turn>", "<end_of_turn>"), system_role=False,
                    stop_pieces=("<end_of_turn>", "<eos>"))

# (kind, rank) → axes. The gating einsum is (2, F, D) when transposed (all but Gemma 2 2B);
# the (2, D, F) layout swaps its last two axes (``mesh`` does it).
SHARDING: dict[tuple[str, int], tuple[Axis, ...]] = {
    ("input_embedding", 2): ("tensor", "fsdp"),  # (vocab, embed)
    ("q_einsum", 3): ("tensor", "fsdp", None),  # (N, D, H)
    ("kv_einsum", 4): (None, "tensor", "fsdp", None),  # (2, K, D, H)
    ("qkv_einsum", 4): (None, "tensor", "fsdp", None),  # (3, N, D, H)
    ("attn_vec_einsum", 3): ("tensor", None, "fsdp"),  # (N, H, D)
    ("gating_einsum", 3): (None, "tensor", "fsdp"),  # (2, F, D)
    ("linear", 2): ("tensor", "fsdp"),  # (F, D)
}
SHARDING_WORDS = (
    "vocab, heads, KV heads and the MLP hidden dim on tensor",
    "the embedding dim on fsdp",
    "norms replicated",
)

# LoRA matrix → (axis of its "in" dim for *_a, axis of its "out" dim for *_b). Flattened
# (N·H) / (K·H) dims keep heads major, so ``tensor`` puts whole heads on a device.
LORA_AXES: dict[str, tuple[Axis, Axis]] = {
    "q_einsum": ("fsdp", "tensor"),  # D → N·H
    "kv_einsum": ("fsdp", "tensor"),  # D → K·H
    "qkv_einsum": ("fsdp", "tensor"),
    "attn_vec_einsum": ("tensor", "fsdp"),  # N·H → D
    "gating_einsum": ("fsdp", "tensor"),  # D → F
    "linear": ("tensor", "fsdp"),  # F → D
}


def _cfg(config: Any, name: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def _layers(config: Any) -> int:
    types = _cfg(config, "attention_types")
    return len(types) if types is not None else int(_cfg(config, "num_layers", 0))


def param_shapes(config: Any) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    """(path, shape) of every text-model param of a gemma config (vision tower excluded)."""
    v, d, f = int(_cfg(config, "num_embed")), int(_cfg(config, "embed_dim")), int(_cfg(config, "hidden_dim"))
    n, h, k = int(_cfg(config, "num_heads")), int(_cfg(config, "head_dim")), int(_cfg(config, "num_kv_heads"))
    transpose = bool(_cfg(config, "transpose_gating_einsum", True))
    qk_norm = bool(_cfg(config, "use_qk_norm", False))
    out: list[tuple[tuple[str, ...], tuple[int, ...]]] = [
        (("embedder", "input_embedding"), (v, d)), (("final_norm", "scale"), (d,))]
    for i in range(_layers(config)):
        p = f"layer_{i}"
        if n == k:
            out.append(((p, "attn", "qkv_einsum", "w"), (3, n, d, h)))
        else:
            out.append(((p, "attn", "q_einsum", "w"), (n, d, h)))
            out.append(((p, "attn", "kv_einsum", "w"), (2, k, d, h)))
        out.append(((p, "attn", "attn_vec_einsum", "w"), (n, h, d)))
        out.append(((p, "mlp", "gating_einsum"), (2, f, d) if transpose else (2, d, f)))
        out.append(((p, "mlp", "linear"), (f, d)))
        norms = ["pre_attention_norm", "pre_ffw_norm"]
        norms += ["post_attention_norm"] if _cfg(config, "use_post_attn_norm", False) else []
        norms += ["post_ffw_norm"] if _cfg(config, "use_post_ffw_norm", False) else []
        out += [((p, nm, "scale"), (d,)) for nm in norms]
        if qk_norm:
            out += [((p, "attn", "_query_norm", "scale"), (h,)), ((p, "attn", "_key_norm", "scale"), (h,))]
    return out


def shared_fields() -> dict[str, Any]:
    """The ``Family`` fields Gemma 2 and 3 share."""
    return dict(norm_plus_one=True, gguf_norm_offset=1.0, hf_norms=HF_NORMS, gguf_top=GGUF_TOP,
                gguf_block=GGUF_BLOCK, lora_targets=LORA_TARGETS, layer_classes=LAYER_CLASSES,
                chat=CHAT, sharding=SHARDING, sharding_words=SHARDING_WORDS, lora_axes=LORA_AXES,
                param_shapes=param_shapes)
