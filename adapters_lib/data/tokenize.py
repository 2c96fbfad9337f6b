"""Tokenization: examples → token ids with a per-token "trained" flag, truncated or chunked.

- Chat examples: ``BOS`` + the Gemma template (``chat_template.segments``). Each piece is
  encoded on its own (template markers, then content), so a model answer is tokenized the
  same way as when the model generates it after ``format_prompt``. Long examples follow
  ``truncation``: "right" keeps the first ``max_length`` tokens (dropped if no trained
  token is left), "drop" drops them.
- Text examples: ``BOS + text + EOS``, loss on every token. A text longer than
  ``max_length`` is cut into windows of ``max_length`` tokens, each starting with BOS
  (chunked, never truncated).

Text in data is text: a marker string inside user content (``<start_of_turn>``,
``<end_of_turn>``, ``<start_of_image>``, ``[multimodal]``, ``<unused0>``, Gemma 4's ``<|turn>`` …)
is encoded as ordinary pieces (``<`` then the rest), never as the control token; only the
chat template inserts the real ids. A "marker" is a piece the tokenizer matches whole from
text (user-defined) that is not ordinary text: its name holds ``_`` or ``|``, it is in
``[…]``, or it is one of ``<mask> <pad> <bos> <eos> <unk> <unusedN>``. Gemma's HTML pieces
(``<table>``, ``<h1>`` …) and whitespace runs stay whole: they are text.

The special ids are keras-hub's: the ids of the pieces ``<bos>``, ``<eos>`` and ``<pad>`` where
the vocabulary has them (``special_ids``), else the SentencePiece model's own control ids (the
demo's ``<s>``/``</s>``). Gemma's releases put them at 2, 1, 0; a vocabulary trained elsewhere
(keras-hub's own test recipe: ``<bos>`` 1, ``<eos>`` 2) may not.

Encoding goes through the SentencePiece processor in batches (C++, threaded), numpy only:
no JAX here.
"""

from __future__ import annotations

import os
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from adapters_lib.data import chat_template
from adapters_lib.data.formats import Example
from adapters_lib.data.readers import DataIssue
from adapters_lib.errors import WorkbenchError

MARKER_CANDIDATE = re.compile(r"<[^<>\s]{1,64}>|\[[^\[\]\s]{1,64}\]")
_SPECIAL_NAMES = re.compile(r"<(?:mask|pad|bos|eos|unk|unused\d+)>")


def _is_marker_name(piece: str) -> bool:
    return ("_" in piece or "|" in piece or piece.startswith("[")
            or _SPECIAL_NAMES.fullmatch(piece) is not None)


def load_sentencepiece(path: str | os.PathLike, *, where: str | None = None) -> Any:
    """A SentencePiece processor from ``path``; a missing, wrong or unreadable file is one
    ``WorkbenchError`` (sentencepiece itself raises OSError/RuntimeError with C++ text)."""
    import sentencepiece as spm

    return _loaded(path, lambda p: spm.SentencePieceProcessor(model_file=str(p)), where)


_TOKENIZER_HINT = "point at a SentencePiece tokenizer.model (e.g. the one beside the weights)"


def _loaded(path: str | os.PathLike, load: Any, where: str | None) -> Any:
    p = Path(path).expanduser()
    where = where or str(p)
    if p.is_dir():
        found = sorted(p.glob("*.model")) + sorted(p.glob("*.spm"))
        raise WorkbenchError(f"tokenizer {str(p)!r} is a folder", where=where,
                             hint=f"did you mean {str(found[0])!r}?" if found else _TOKENIZER_HINT)
    if not p.is_file():
        raise WorkbenchError(f"tokenizer {str(p)!r} not found", where=where, hint=_TOKENIZER_HINT)
    try:
        return load(p)
    except (OSError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise WorkbenchError(f"{p.name} is not a SentencePiece model ({first[:120]})",
                             where=where, hint=_TOKENIZER_HINT) from None


def special_ids(sp: Any) -> tuple[int, int, int]:
    """(BOS, EOS, PAD) of a SentencePiece processor by keras-hub's rule (see the module doc)."""
    unk = sp.unk_id()

    def piece(name: str, fallback: int) -> int:
        i = sp.piece_to_id(name)
        return int(i) if i != unk and sp.id_to_piece(i) == name else int(fallback)

    return piece("<bos>", sp.bos_id()), piece("<eos>", sp.eos_id()), piece("<pad>", max(sp.pad_id(), 0))


class TokenCodec:
    """A SentencePiece processor and the Gemma special ids: what the data pipeline needs."""

    def __init__(self, sp: Any, *, bos: int, eos: int, pad: int = 0, name: str = ""):
        self.sp = sp
        self.bos, self.eos, self.pad = int(bos), int(eos), int(pad)
        self.name = name
        self._cache: dict[str, list[int]] = {}
        self._is_marker: dict[str, bool] = {}
        self.markers = chat_template.GEMMA3_MARKERS
        unk = sp.unk_id()
        if sp.piece_to_id(chat_template.START) == unk and sp.piece_to_id(chat_template.GEMMA4_MARKERS[0]) != unk:
            self.markers = chat_template.GEMMA4_MARKERS

    @classmethod
    def from_any(cls, tokenizer: Any = None, *, where: str | None = None) -> TokenCodec:
        """From a ``gm.text.Tokenizer``, a SentencePiece processor, a .model path, or None (demo).

        ``where``: how a bad path is cited (``--tokenizer``, ``[model] tokenizer``)."""
        if isinstance(tokenizer, TokenCodec):
            return tokenizer
        if tokenizer is None:
            from adapters_lib.models import demo

            tokenizer = str(demo.ensure_demo_tokenizer())
            name = "demo tokenizer"
        else:
            name = ""
        if isinstance(tokenizer, (str, os.PathLike)):
            sp = load_sentencepiece(tokenizer, where=where)
            bos, eos, pad = special_ids(sp)
            return cls(sp, bos=bos, eos=eos, pad=pad, name=name or os.path.basename(str(tokenizer)))
        if hasattr(tokenizer, "special_tokens") and hasattr(type(tokenizer), "_sp"):  # gm.text.Tokenizer
            st = tokenizer.special_tokens
            path = getattr(tokenizer, "path", None)
            if isinstance(path, (str, os.PathLike)) and "://" not in str(path):
                # gm reads the file at first use, and a bad one is a raw traceback there
                sp = _loaded(path, lambda _: tokenizer._sp, where or "[model] tokenizer")
            else:
                sp = tokenizer._sp
            return cls(sp, bos=st.BOS, eos=st.EOS, pad=st.PAD,
                       name=f"{type(tokenizer).__name__}({os.path.basename(str(tokenizer.path))})")
        if hasattr(tokenizer, "encode") and hasattr(tokenizer, "bos_id"):  # SentencePieceProcessor
            bos, eos, pad = special_ids(tokenizer)
            return cls(tokenizer, bos=bos, eos=eos, pad=pad, name="sentencepiece")
        raise TypeError(f"unsupported tokenizer {type(tokenizer).__name__}")

    def is_marker(self, piece: str) -> bool:
        """True when the tokenizer would turn ``piece`` (met in text) into a special token."""
        known = self._is_marker.get(piece)
        if known is None:
            # matched whole from text (user-defined pieces are; sentencepiece's Python API
            # does not say which pieces are user-defined, so ask the encoder itself)
            known = self._is_marker[piece] = bool(
                _is_marker_name(piece) and len(self.sp.encode(piece, out_type=int)) == 1)
        return known

    def _text_parts(self, text: str) -> list[str] | None:
        """``text`` cut so that no part holds a marker whole (None: nothing to cut)."""
        if "<" not in text and "[" not in text:
            return None
        parts: list[str] = []
        at = 0
        for m in MARKER_CANDIDATE.finditer(text):
            if self.is_marker(m.group()):
                parts += [text[at:m.start()], m.group()[:1], m.group()[1:]]
                at = m.end()
        if not parts:
            return None
        parts.append(text[at:])
        return [p for p in parts if p]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Encode user text (see the module doc: marker strings stay text)."""
        if not texts:
            return []
        threads = min(os.cpu_count() or 1, 8)
        out = self.sp.encode(texts, out_type=int, num_threads=threads)
        for i, text in enumerate(texts):
            parts = self._text_parts(text)
            if parts is not None:
                out[i] = [t for ids in self.sp.encode(parts, out_type=int) for t in ids]
        return out

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
                   ) -> list[tuple[str, bool, bool]]:
    """(text, trained, is_content) pieces: content is user text, the rest the template's."""
    if ex.kind == "text":
        return [(ex.text, True, True)]
    return chat_template.pieces(ex.messages, loss_on, markers=markers)


def tokenize_examples(
    examples: list[Example], codec: TokenCodec, *, max_length: int,
    loss_on: str = "model", truncation: str = "right",
) -> TokenizedSet:
    """Tokenize, then truncate (chat) or chunk (text) to ``max_length``."""
    pieces = [example_pieces(ex, loss_on, codec.markers) for ex in examples]
    free_texts = [t for ps in pieces for t, _, content in ps if content]
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
        for text, is_trained, content in ps:
            piece = next(encoded) if content else codec.encode_fixed(text)
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
