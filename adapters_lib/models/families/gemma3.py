"""Gemma 3 (text): sizes (mirroring ``gm.nn.Gemma3_*``), the demo shape, transformers'
defaults, the family record (layout tables in ``classic``)."""

from __future__ import annotations

from adapters_lib.models.families import classic
from adapters_lib.models.families.arch import Arch, Family, layer_pattern


def _g3(layers, d, f, n, h, k, *, window, scalar=None, scale=1.0, vocab=262_144) -> Arch:
    return Arch("gemma3", layers, d, f, n, h, k, vocab, layer_pattern("gemma3", layers), window,
                use_qk_norm=True, transpose_gating=True, query_pre_attn_scalar=scalar or h,
                local_rope=10_000, global_rope=1_000_000, global_rope_scale=scale)


def _demo() -> Arch:
    return Arch("gemma3", 4, 256, 1024, 4, 64, 1, 1024, ("local", "global") * 2, 32,
                use_qk_norm=True, transpose_gating=True, query_pre_attn_scalar=64,
                local_rope=10_000, global_rope=1_000_000)


KNOWN: dict[str, tuple[str, Arch]] = {
    "270m": ("Gemma3_270M", _g3(18, 640, 2048, 4, 256, 1, window=512)),
    "1b": ("Gemma3_1B", _g3(26, 1152, 6912, 4, 256, 1, window=512)),
    "4b": ("Gemma3_4B", _g3(34, 2560, 10240, 8, 256, 4, window=1024, scale=8.0)),
    "12b": ("Gemma3_12B", _g3(48, 3840, 15360, 16, 256, 8, window=1024, scale=8.0)),
    "27b": ("Gemma3_27B", _g3(62, 5376, 21504, 32, 128, 16, window=1024, scale=8.0, scalar=168)),
    "custom": ("demo", _demo()),
}

HF_DEFAULTS = {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
               "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
               "head_dim": 256, "rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0,
               "query_pre_attn_scalar": 256, "sliding_window": 4096,
               "final_logit_softcapping": None, "attn_logit_softcapping": None,
               "sliding_window_pattern": 6}

FAMILY = Family(
    name="gemma3", label="Gemma 3", hf_model_types=("gemma3", "gemma3_text"),
    gguf_arches=("gemma3",), loads=True, known=KNOWN, hf_defaults=HF_DEFAULTS,
    tokenizer_class="Gemma3Tokenizer", **classic.shared_fields(),
)
