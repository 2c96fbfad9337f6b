"""Hugging Face ``config.json`` ↔ ``Arch``: Gemma 2 and Gemma 3 (text part) both ways; Gemma 4
and 3n by their family modules.

``from_hf_config`` reads a config (missing keys take transformers' class defaults, as
transformers does; old and new RoPE keys); ``hf_config_for`` writes one
(``Gemma2ForCausalLM`` / ``Gemma3ForCausalLM``). ``families`` re-exports both; the defaults
and model types are each family module's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters_lib.models.families import gemma2, gemma3, gemma3n, gemma4, gemma4_config
from adapters_lib.models.families.arch import Arch, ArchError, arch_from_transformer_config
from adapters_lib.models.families.arch import layer_pattern as _pattern

_HF_FAMILY = {kind: fam.name for fam in (gemma2.FAMILY, gemma3.FAMILY) for kind in fam.hf_model_types}


def hf_family(cfg: Mapping[str, Any]) -> str:
    """gemma2 / gemma3 / gemma4 / other, from ``model_type`` and ``architectures``."""
    kind = str(cfg.get("model_type", "")).lower()
    if kind in _HF_FAMILY:
        return _HF_FAMILY[kind]
    if kind.startswith("gemma4"):
        return "gemma4"
    if kind.startswith("gemma3n"):
        return "gemma3n"
    if kind.startswith("gemma3"):
        return "gemma3"
    return "other"


def from_hf_config(cfg: Mapping[str, Any]) -> Arch:
    """The architecture of a Hugging Face Gemma 2/3 ``config.json`` (text part)."""
    kind = str(cfg.get("model_type", "") or "?")
    archs = ",".join(cfg.get("architectures") or []) or "no architectures"
    family = hf_family(cfg)
    if family == "gemma4":
        return gemma4_config.from_hf_config(cfg)
    if family == "gemma3n":
        return gemma3n.from_hf_config(cfg)
    if kind == "gemma3" and isinstance(cfg.get("text_config"), Mapping):
        cfg = {"model_type": "gemma3_text", **cfg["text_config"]}
    # transformers omits keys equal to the config class defaults (Gemma2Config, Gemma3TextConfig)
    cfg = {**_HF_DEFAULTS.get(family, {}), **{k: v for k, v in cfg.items() if v is not None or
                                              k.endswith("softcapping") or k == "rope_scaling"}}
    if family == "other":
        what = "a Gemma 1" if kind == "gemma" else f"a {kind!r}"
        raise ArchError(f"config.json describes {what} model ({archs}), not Gemma 2/3/3n/4",
                        "unsupported", "other")
    if kind not in _HF_FAMILY and kind != "gemma3_text":
        raise ArchError(f"{kind} checkpoints are listed but this build loads only Gemma 2, 3, 3n and 4 "
                        "text models", "unsupported", family)
    try:
        layers = int(cfg["num_hidden_layers"])
        d = int(cfg["hidden_size"])
        f = int(cfg["intermediate_size"])
        n = int(cfg["num_attention_heads"])
        k = int(cfg.get("num_key_value_heads", n))
        h = int(cfg.get("head_dim") or d // n)
        vocab = int(cfg["vocab_size"])
    except (KeyError, TypeError, ValueError) as e:
        raise ArchError(f"config.json lacks or garbles {e}", "unreadable", family) from None
    types = cfg.get("layer_types")
    if types:
        attention = tuple("local" if t == "sliding_attention" else "global" for t in types)
    elif family == "gemma3" and cfg.get("sliding_window_pattern"):
        p = int(cfg["sliding_window_pattern"])
        attention = tuple("global" if (i + 1) % p == 0 else "local" for i in range(layers))
    else:
        attention = _pattern(family, layers)
    if len(attention) != layers:
        raise ArchError(f"layer_types has {len(attention)} entries for {layers} layers", "unreadable",
                        family)
    local_rope, global_rope, global_scale = _hf_rope(cfg, family)
    known = gemma2.KNOWN["2b"] if family == "gemma2" else None
    transpose = not (known and known[1].dims() == (layers, d, f, n, h, k))
    return Arch(
        family, layers, d, f, n, h, k, vocab, attention,
        sliding_window=int(cfg["sliding_window"]) if cfg.get("sliding_window") else None,
        use_qk_norm=family == "gemma3",
        transpose_gating=transpose,
        query_pre_attn_scalar=float(cfg.get("query_pre_attn_scalar") or h),
        final_logit_softcap=_opt_float(cfg.get("final_logit_softcapping")),
        attn_logit_softcap=_opt_float(cfg.get("attn_logit_softcapping")),
        local_rope=local_rope, global_rope=global_rope, global_rope_scale=global_scale,
    )


_HF_DEFAULTS: dict[str, dict[str, Any]] = {"gemma2": dict(gemma2.HF_DEFAULTS),
                                          "gemma3": dict(gemma3.HF_DEFAULTS)}


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _hf_rope(cfg: Mapping[str, Any], family: str) -> tuple[int, int, float]:
    """(local theta, global theta, global linear factor) from old or new HF config keys."""
    params = cfg.get("rope_parameters")
    if isinstance(params, Mapping) and "full_attention" in params:
        full, sliding = params.get("full_attention") or {}, params.get("sliding_attention") or {}
        global_theta = int(full.get("rope_theta", 10_000))
        local_theta = int(sliding.get("rope_theta", global_theta))
        factor = float(full.get("factor", 1.0)) if full.get("rope_type") == "linear" else 1.0
        return local_theta, global_theta, factor
    if isinstance(params, Mapping):  # one set for all layers
        theta = int(params.get("rope_theta", 10_000))
        factor = float(params.get("factor", 1.0)) if params.get("rope_type") == "linear" else 1.0
        return theta, theta, factor
    global_theta = int(cfg.get("rope_theta", 10_000))
    local_theta = int(cfg.get("rope_local_base_freq", global_theta if family == "gemma2" else 10_000))
    scaling = cfg.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    factor = float(scaling.get("factor", 1.0)) if kind == "linear" else 1.0
    return local_theta, global_theta, factor


def hf_config_for(arch: Any, family: str = "", *, dtype: str = "float32") -> dict[str, Any]:
    """A Hugging Face ``config.json`` (Gemma2ForCausalLM / Gemma3ForCausalLM).

    ``arch``: an ``Arch``, or a gemma ``TransformerConfig`` together with ``family``.
    """
    if isinstance(arch, gemma4.Gemma4Arch):
        return gemma4_config.hf_config_for(arch, dtype=dtype)
    if isinstance(arch, gemma3n.Gemma3nArch):
        return gemma3n.hf_config_for(arch, dtype=dtype)
    if not isinstance(arch, Arch):
        arch = arch_from_transformer_config(arch, family)
    common = {
        "vocab_size": arch.vocab_size,
        "hidden_size": arch.embed_dim,
        "intermediate_size": arch.hidden_dim,
        "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads,
        "num_key_value_heads": arch.num_kv_heads,
        "head_dim": arch.head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "attention_dropout": 0.0,
        # an int in transformers' Gemma2Config/Gemma3TextConfig, which refuse a float (5.24: 64.0 fails)
        "query_pre_attn_scalar": _int_if_whole(arch.query_pre_attn_scalar),
        "sliding_window": arch.sliding_window,
        "layer_types": ["sliding_attention" if a == "local" else "full_attention"
                        for a in arch.attention],
        "final_logit_softcapping": arch.final_logit_softcap,
        "attn_logit_softcapping": arch.attn_logit_softcap,
        "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,
        "tie_word_embeddings": True,
        "torch_dtype": dtype,
        "use_cache": True,
        "initializer_range": 0.02,
    }
    if arch.family == "gemma2":
        return {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", **common,
                "max_position_embeddings": 8192, "rope_theta": arch.global_rope,
                "cache_implementation": "hybrid"}
    scaling = ({"rope_type": "linear", "factor": arch.global_rope_scale}
               if arch.global_rope_scale != 1.0 else None)
    return {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", **common,
            "max_position_embeddings": 32768, "rope_theta": arch.global_rope,
            "rope_local_base_freq": arch.local_rope, "rope_scaling": scaling}


def _int_if_whole(x: float) -> float | int:
    """``x`` as an int when it is a whole number (the archs read from a GGUF, an HF config or a
    gemma ``TransformerConfig`` hold it as a float)."""
    return int(x) if float(x).is_integer() else x
