"""Gemma 4's Hugging Face ``config.json`` both ways (``Gemma4ForCausalLM``'s ``gemma4_text``, or
``Gemma4ForConditionalGeneration``'s ``gemma4`` with a ``text_config``): keys transformers omits
take its ``Gemma4TextConfig`` defaults (``gemma4.HF_DEFAULTS``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters_lib.models.families.arch import ArchError
from adapters_lib.models.families.gemma4 import HF_DEFAULTS, Gemma4Arch


def from_hf_config(cfg: Mapping[str, Any]) -> Gemma4Arch:
    """The text tower of a Gemma 4 ``config.json`` (``gemma4`` with ``text_config``, or ``gemma4_text``)."""
    towers = tuple(t for t in ("vision", "audio") if isinstance(cfg.get(f"{t}_config"), Mapping))
    if isinstance(cfg.get("text_config"), Mapping):
        cfg = cfg["text_config"]
    cfg = {**HF_DEFAULTS, **{k: v for k, v in cfg.items() if v is not None}}
    try:
        layers, d, f = int(cfg["num_hidden_layers"]), int(cfg["hidden_size"]), int(cfg["intermediate_size"])
        n, k, h = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"]), int(cfg["head_dim"])
        vocab = int(cfg["vocab_size"])
    except (KeyError, TypeError, ValueError) as e:
        raise ArchError(f"config.json lacks or garbles {e}", "unreadable", "gemma4") from None
    types = cfg.get("layer_types") or ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                                       for i in range(layers)]
    attention = tuple("local" if t == "sliding_attention" else "global" for t in types)
    if len(attention) != layers:
        raise ArchError(f"layer_types has {len(attention)} entries for {layers} layers", "unreadable", "gemma4")
    rope = cfg.get("rope_parameters") or {}
    full, sliding = rope.get("full_attention") or {}, rope.get("sliding_attention") or {}
    moe = bool(cfg.get("enable_moe_block"))
    ple = int(cfg.get("hidden_size_per_layer_input") or 0)
    return Gemma4Arch(
        "gemma4", layers, d, f, n, h, k, vocab, attention, int(cfg["sliding_window"]),
        use_qk_norm=True, transpose_gating=True, query_pre_attn_scalar=1.0,
        final_logit_softcap=None if cfg.get("final_logit_softcapping") is None
        else float(cfg["final_logit_softcapping"]),
        local_rope=int(sliding.get("rope_theta", 10_000)), global_rope=int(full.get("rope_theta", 1_000_000)),
        global_head_dim=int(cfg.get("global_head_dim") or h),
        # transformers reads the global KV heads on k=v layers only (keras-hub: k=v iff they are set)
        num_global_kv_heads=int(cfg.get("num_global_key_value_heads") or 0) if cfg.get("attention_k_eq_v") else 0,
        k_eq_v_global=bool(cfg.get("attention_k_eq_v")),
        global_rope_proportion=float(full.get("partial_rotary_factor", 0.25)),
        per_layer_input_dim=ple, kv_shared_layers=int(cfg.get("num_kv_shared_layers") or 0),
        kv_shared_ffw_hidden=2 * f if cfg.get("use_double_wide_mlp") else 0,
        num_experts=int(cfg.get("num_experts") or 0) if moe else 0,
        expert_dim=int(cfg.get("moe_intermediate_size") or 0) if moe else 0,
        top_k_experts=int(cfg.get("top_k_experts") or 0) if moe else 0, towers=towers)


def hf_config_for(arch: Gemma4Arch, *, dtype: str = "float32") -> dict[str, Any]:
    """A ``Gemma4ForCausalLM`` ``config.json`` (``gemma4_text``)."""
    if arch.num_global_kv_heads and not arch.k_eq_v_global:
        raise ArchError("global KV heads of their own without k=v global layers: transformers' "
                        "Gemma 4 config cannot say it", "unsupported", "gemma4")
    return {
        "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text",
        "vocab_size": arch.vocab_size, "hidden_size": arch.embed_dim,
        "intermediate_size": arch.hidden_dim, "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads, "num_key_value_heads": arch.num_kv_heads,
        "head_dim": arch.head_dim, "global_head_dim": arch.global_head_dim or arch.head_dim,
        "num_global_key_value_heads": (arch.num_global_kv_heads or arch.num_kv_heads) if arch.k_eq_v_global else None,
        "attention_k_eq_v": arch.k_eq_v_global, "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6, "sliding_window": arch.sliding_window,
        "layer_types": ["sliding_attention" if a == "local" else "full_attention" for a in arch.attention],
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": float(arch.local_rope)},
            "full_attention": {"rope_type": "proportional", "rope_theta": float(arch.global_rope),
                               "partial_rotary_factor": arch.global_rope_proportion}},
        "final_logit_softcapping": arch.final_logit_softcap,
        "hidden_size_per_layer_input": arch.per_layer_input_dim,
        "vocab_size_per_layer_input": arch.vocab_size,
        "num_kv_shared_layers": arch.kv_shared_layers,
        "use_double_wide_mlp": bool(arch.kv_shared_ffw_hidden),
        "enable_moe_block": arch.moe, "num_experts": arch.num_experts or None,
        "top_k_experts": arch.top_k_experts or None, "moe_intermediate_size": arch.expert_dim or None,
        "pad_token_id": 0, "eos_token_id": [1, 106], "bos_token_id": 2,
        "tie_word_embeddings": True, "torch_dtype": dtype, "use_cache": True,
        "attention_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02,
        "max_position_embeddings": 131_072,
    }
