"""Gemma 4 (text tower): the family record.

gemma's own modules (``gemma.gm.nn.gemma4``): RMSNorm multiplies by ``scale`` (not ``1 + scale``),
k=v global layers (one ``k_einsum``), partial rotary on global layers, MoE with an expert bank
behind ``jax.lax.ragged_dot``, E-models with per-layer inputs and KV sharing. Its own chat
format: ``<|turn>role … <turn|>`` with a real system role and a thinking channel.
"""

from __future__ import annotations

from adapters_lib.models.families.arch import ChatTemplate, Family

CHAT = ChatTemplate(("<|turn>", "<turn|>"), system_role=True,
                    stop_pieces=("<turn|>", "<eos>"), thinking_on="<|think|>",
                    thought_channel=("<|channel>", "<channel|>"))

FAMILY = Family(
    name="gemma4", label="Gemma 4", hf_model_types=("gemma4", "gemma4_text"),
    gguf_arches=("gemma4",), loads=False, norm_plus_one=False, gguf_norm_offset=0.0,
    chat=CHAT, tokenizer_class="Gemma4Tokenizer",
)
