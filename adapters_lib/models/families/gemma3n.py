"""Gemma 3n (text tower): the family record.

gemma's ``gemma.gm.nn.gemma3n`` modules (AltUp, per-layer inputs, KV sharing); Gemma 3's
chat template; HF pads ``embed_tokens`` by 256 rows past the text vocabulary.
"""

from __future__ import annotations

from adapters_lib.models.families import classic
from adapters_lib.models.families.arch import Family

FAMILY = Family(
    name="gemma3n", label="Gemma 3n", hf_model_types=("gemma3n", "gemma3n_text"),
    gguf_arches=("gemma3n",), loads=False, chat=classic.CHAT, tokenizer_class="Gemma3nTokenizer",
)
