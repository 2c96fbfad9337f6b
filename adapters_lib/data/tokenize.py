"""Tokenization: examples → token ids with a per-token "trained" flag, truncated or chunked.

- Chat examples: ``BOS`` + the Gemma template (``chat_template.segments``). Each piece is
  encoded on its own (template markers, then content), so a model answer is tokenized the
  same way as when the model generates it after ``format_prompt``. Long examples follow
  ``truncation``: "right" keeps the first ``max_length`` tokens (dropped if no trained
  token is left), "drop" drops them.
- Text examples: ``BOS + text + EOS``, loss on every token. A text longer than
  ``max_length`` is cut into windows of ``max_length`` tokens, each starting with BOS
  (chunked, never truncated).

Encoding goes through the SentencePiece processor in batches (C++, threaded), numpy only:
no JAX here.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from adapters_lib.data import chat_template
from adapters_lib.data.formats import Example
from adapters_lib.data.readers import DataIssue


class TokenCodec:
    """A SentencePiece processor and the Gemma special ids: what the data pipeline needs."""

    def __init__(self, sp: Any, *, bos: int, eos: int, pad: int = 0, name: str = ""):
        self.sp = sp
        self.bos, self.eos, self.pad = int(bos), int(eos), int(pad)
        self.name = name
        self._cache: dict[str, list[int]] = {}
        self.markers = chat_template.GEMMA3_MARKERS
        unk = sp.unk_id()
        if sp.piece_to_id(chat_template.START) == unk and sp.piece_to_id(chat_template.GEMMA4_MARKERS[0]) != unk:
            self.markers = chat_template.GEMMA4_MARKERS

    @classmethod
    def from_any(cls, tokenizer: Any = None) -> TokenCodec:
        """From a ``gm.text.Tokenizer``, a SentencePiece processor, a .model path, or None (demo)."""
        if isinstance(tokenizer, TokenCodec):
            return tokenizer
        if tokenizer is None:
            from adapters_lib.models import demo

            tokenizer = str(demo.ensure_demo_tokenizer())
            name = "demo tokenizer"
        else:
            name = ""
        if isinstance(tokenizer, (str, os.PathLike)):
            import sentencepiece as spm

            sp = spm.SentencePieceProcessor(model_file=str(tokenizer))
            return cls(sp, bos=sp.bos_id(), eos=sp.eos_id(), pad=max(sp.pad_id(), 0),
                       name=name or os.path.basename(str(tokenizer)))
        if hasattr(tokenizer, "special_tokens") and hasattr(tokenizer, "_sp"):  # gm.text.Tokenizer
            st = tokenizer.special_tokens
            return cls(tokenizer._sp, bos=st.BOS, eos=st.EOS, pad=st.PAD,
                       name=f"{type(tokenizer).__name__}({os.path.basename(str(tokenizer.path))})")
        if hasattr(tokenizer, "encode") and hasattr(tokenizer, "bos_id"):  # SentencePieceProcessor
            return cls(tokenizer, bos=tokenizer.bos_id(), eos=tokenizer.eos_id(),
                       pad=max(tokenizer.pad_id(), 0), name="sentencepiece")
        raise TypeError(f"unsupported tokenizer {type(tokenizer).__name__}")

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        return self.sp.encode(texts, out_type=int, num_threads=min(os.cpu_count() or 1, 8))

    def encode_fixed(self, text: str) -> list[int]:
        """Encode a template piece (cached)."""
        ids = self._cache.get(text)
        if ids is None:
            ids = self._cache[text] = list(self.sp.encode(text, out_type=int))
        return ids

    def decode(self, ids: list[int]) -> str:
        return self.sp.decode([int(i) for i in ids])


@dataclass
class TokenizedSet:
    """Token sequences stored flat: sequence ``i`` is ``tokens[offsets[i]:offsets[i+1]]``.

    ``trained[t]`` is 1 when token ``t`` is a target that counts in the loss (predicting it
    from the tokens before it). ``example[i]`` is the index of the Example it came from.
    """

    tokens: np.ndarray
    trained: np.ndarray
    offsets: np.ndarray
    example: np.ndarray
    raw_lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Per kept example: its token count before truncation or chunking."""
    truncated: int = 0
    chunked: int = 0
    dropped: list[DataIssue] = field(default_factory=list)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def sequence(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.offsets[i], self.offsets[i + 1]
        return self.tokens[a:b], self.trained[a:b]


def example_pieces(ex: Example, loss_on: str, markers: tuple[str, str] = chat_template.GEMMA3_MARKERS,
                   ) -> list[tuple[str, bool]]:
    if ex.kind == "text":
        return [(ex.text, True)]
    return chat_template.segments(ex.messages, loss_on, markers=markers)


def tokenize_examples(
    examples: list[Example], codec: TokenCodec, *, max_length: int,
    loss_on: str = "model", truncation: str = "right",
) -> TokenizedSet:
    """Tokenize, then truncate (chat) or chunk (text) to ``max_length``."""
    pieces = [example_pieces(ex, loss_on, codec.markers) for ex in examples]
    fixed_markers = chat_template.marker_pieces(codec.markers)
    free_texts = [t for ps, ex in zip(pieces, examples, strict=True) for t, _ in ps
                  if ex.kind == "text" or t not in fixed_markers]
    encoded = iter(codec.encode_batch(free_texts))

    tokens = array("i")
    trained = array("B")
    offsets = [0]
    owner: list[int] = []
    raw_lengths: list[int] = []
    dropped: list[DataIssue] = []
    truncated = chunked = 0
    for i, (ex, ps) in enumerate(zip(examples, pieces, strict=True)):
        ids, flags = [codec.bos], [0]
        for text, is_trained in ps:
            piece = next(encoded) if ex.kind == "text" or text not in fixed_markers else codec.encode_fixed(text)
            ids.extend(piece)
            flags.extend([int(is_trained)] * len(piece))
        if ex.kind == "text":
            ids.append(codec.eos)
            flags.append(1)
        n = len(ids)
        if ex.kind == "text":
            windows = _windows(n, max_length)
            if len(windows) > 1:
                chunked += 1
            raw_lengths.append(n)
            for a, b in windows:
                w_ids = ids[a:b] if a == 0 else [codec.bos] + ids[a:b]
                w_flags = flags[a:b] if a == 0 else [0] + flags[a:b]
                tokens.extend(w_ids)
                trained.extend(w_flags)
                offsets.append(len(tokens))
                owner.append(i)
            continue
        if n > max_length:
            if truncation == "drop":
                dropped.append(DataIssue(ex.where, f"example is {n} tokens, longer than max_length "
                                         f"{max_length}; dropped (truncation = \"drop\"; \"right\" would cut it)"))
                continue
            if not any(flags[:max_length]):
                dropped.append(DataIssue(ex.where, f"the prompt fills max_length {max_length} (example is "
                                         f"{n} tokens): no model tokens left after truncation; dropped; raise "
                                         "[data] max_length or shorten the prompt",
                                         field="messages"))
                continue
            ids, flags = ids[:max_length], flags[:max_length]
            truncated += 1
        if not any(flags):
            dropped.append(DataIssue(ex.where, "no tokens to train on", field="messages"))
            continue
        raw_lengths.append(n)
        tokens.extend(ids)
        trained.extend(flags)
        offsets.append(len(tokens))
        owner.append(i)
    return TokenizedSet(
        tokens=np.frombuffer(tokens, np.int32).copy(), trained=np.frombuffer(trained, np.uint8).copy(),
        offsets=np.asarray(offsets, np.int64), example=np.asarray(owner, np.int64),
        raw_lengths=np.asarray(raw_lengths, np.int64), truncated=truncated, chunked=chunked,
        dropped=dropped,
    )


def _windows(n: int, max_length: int) -> list[tuple[int, int]]:
    """Spans of a text of ``n`` tokens: the first holds ``max_length`` tokens, later ones
    ``max_length - 1`` (a BOS is put in front of each, so every window has a target)."""
    if n <= max_length:
        return [(0, n)]
    spans = [(0, max_length)]
    a = max_length
    while a < n:
        b = min(n, a + max_length - 1)
        spans.append((a, b))
        a = b
    return spans


def subset(tset: TokenizedSet, keep_examples: np.ndarray) -> TokenizedSet:
    """The sequences whose example index is in ``keep_examples`` (order kept)."""
    idx = np.flatnonzero(np.isin(tset.example, keep_examples))
    lengths = tset.lengths[idx]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    # token positions of the kept sequences, vectorised: start of each + a running index
    spans = np.repeat(tset.offsets[idx] - offsets[:-1], lengths) + np.arange(offsets[-1])
    return TokenizedSet(tokens=tset.tokens[spans], trained=tset.trained[spans], offsets=offsets,
                        example=tset.example[idx])
