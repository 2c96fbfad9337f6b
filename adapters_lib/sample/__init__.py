"""Generation: the KV-cache sampler, streaming, A/B, multi-turn replay and compare sets.

- ``settings`` — ``SamplingSettings`` and the streamed ``Piece``;
- ``prompts`` — the one prompt tokenizer (``prompt_ids``), shared with evaluation;
- ``program`` / ``sampler`` — the compiled prefill + decode and the ``Sampler`` over it;
- ``text_stream`` — token ids → text pieces, never splitting a character;
- ``conversation`` — multi-turn A/B (each side keeps its own history), ``chat_session``;
- ``compare_sets`` — prompt files in, saved results out, the seam for scoring.

The tuned model that sample/compare/eval/export go through is ``adapters_lib.tuned``.
Importing this package is cheap: JAX is imported when a Sampler is made.
"""

from adapters_lib.sample.chat_session import ChatSession
from adapters_lib.sample.compare_sets import read_prompts, save_compare, score
from adapters_lib.sample.conversation import Conversation, Turn, replay
from adapters_lib.sample.prompts import (
    Prompt,
    as_messages,
    chat_ids,
    check_prompt,
    format_chat,
    prompt_ids,
    raw_ids,
)
from adapters_lib.sample.sampler import DECODE_CHUNK, PROMPT_BUCKETS, Sampler, bucket
from adapters_lib.sample.settings import STOP_REASONS, Piece, SamplingSettings
from adapters_lib.sample.text_stream import TextStream

__all__ = [
    "ChatSession", "Conversation", "DECODE_CHUNK", "PROMPT_BUCKETS", "Piece", "Prompt", "STOP_REASONS",
    "Sampler", "SamplingSettings", "TextStream", "Turn", "as_messages", "bucket", "chat_ids",
    "check_prompt", "format_chat", "prompt_ids", "raw_ids",
    "read_prompts", "replay", "save_compare", "score",
]
