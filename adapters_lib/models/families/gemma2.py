"""Gemma 2: sizes (mirroring ``gm.nn.Gemma2_*``), transformers' defaults, the family record.

The module layout, name maps, LoRA targets, chat template and sharding are Gemma 3's
(``classic``); Gemma 2 differs in its 1:1 local/global pattern, soft-caps and no qk-norm.
"""

from __future__ import annotations

from adapters_lib.models.families import classic
from adapters_lib.models.families.arch import Arch, Family, layer_pattern


def _g2(layers, d, f, n, h, k, *, scalar=None, transpose=True) -> Arch:
    return Arch("gemma2", layers, d, f, n, h, k, 256_128, layer_pattern("gemma2", layers), 4096,
                use_qk_norm=False, transpose_gating=transpose,
                query_pre_attn_scalar=scalar or h, final_logit_softcap=30.0,
                attn_logit_softcap=50.0)


KNOWN: dict[str, tuple[str, Arch]] = {
    "2b": ("Gemma2_2B", _g2(26, 2304, 9216, 8, 256, 4, transpose=False)),
    "9b": ("Gemma2_9B", _g2(42, 3584, 14336, 16, 256, 8)),
    "27b": ("Gemma2_27B", _g2(46, 4608, 36864, 32, 128, 16, scalar=144)),
}

HF_DEFAULTS = {"vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
               "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
               "head_dim": 256, "rope_theta": 10000.0, "query_pre_attn_scalar": 256,
               "sliding_window": 4096, "final_logit_softcapping": 30.0,
               "attn_logit_softcapping": 50.0}

FAMILY = Family(
    name="gemma2", label="Gemma 2", hf_model_types=("gemma2",), gguf_arches=("gemma2",),
    loads=True, known=KNOWN, hf_defaults=HF_DEFAULTS, tokenizer_class="Gemma2Tokenizer",
    **classic.shared_fields(),
)
