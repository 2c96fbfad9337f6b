"""A SentencePiece ``tokenizer.model`` rebuilt from a GGUF's vocabulary.

llama.cpp stores a Gemma tokenizer as metadata (``tokenizer.ggml.tokens`` / ``scores`` /
``token_type`` and the special ids), not as the SentencePiece file gemma's tokenizers load.
``build_model_proto`` writes that file back (a BPE ``ModelProto``: byte fallback, split
digits, identity normalizer, no dummy prefix, escaped whitespace) with the four fixes a
naive rebuild misses, the way transformers' GGUF converter does them
(``transformers/integrations/gguf/gguf_tokenizer_mapping.py``, ``gemma_tokenizer``; it is
the test oracle):

1. the unknown id is typed CONTROL in the file: it becomes UNKNOWN (SentencePiece refuses a
   model without one);
2. tokens made only of spaces are stored as real spaces: they are respelled as U+2581 runs;
3. the scores do not follow the merge order, the file order does: score = -index;
4. CONTROL tokens other than pad/eos/bos are matched whole in text (user-defined), like the
   oracle's special tokens: ``<start_of_turn>``/``<end_of_turn>`` encode to 105/106, so the
   chat template puts the real turn markers in place.

Gemma 4's GGUF vocabulary (``tokenizer.ggml.model = gemma4``) is transformers' BPE
``tokenizer.json`` (pieces, merges): the scores come from the merge ranks instead (``_scores``).

``tokenizer_for_gguf(path)`` returns the path of the rebuilt file, cached by the GGUF's
hash under ``<data dir>/gguf-tokenizers/`` (the hash comes free from Ollama's and the HF
cache's blob names and the starter package; otherwise it is computed once and remembered
by path, size and mtime).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from adapters_lib import paths
from adapters_lib.models.gguf.gguf_info import GGUFError

log = logging.getLogger(__name__)

BUILD_VERSION = 1
"""Bump when the rebuilt file changes: old cache entries are then ignored."""
_SHA_NAME = re.compile(r"(?:^|sha256[-:])([0-9a-f]{64})$")
# GGUF token types (llama.cpp's LLAMA_TOKEN_TYPE_*)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


class TokenizerError(GGUFError):
    """The GGUF has no vocabulary this build can turn into a SentencePiece model."""


def _vocab(reader: Any, where: str) -> dict[str, Any]:
    fields = reader.fields
    kind = fields.get("tokenizer.ggml.model")
    if kind is None or fields.get("tokenizer.ggml.tokens") is None:
        raise TokenizerError(f"{where} has no tokenizer vocabulary (tokenizer.ggml.tokens); "
                             "set [model] tokenizer to a tokenizer.model", "incomplete")
    model = str(kind.contents())
    if model not in ("llama", "gemma4"):
        raise TokenizerError(f"{where} has a {model!r} tokenizer; Gemma's is SentencePiece "
                             "('llama' in GGUF terms, 'gemma4' for Gemma 4)", "unsupported")
    merges_field = fields.get("tokenizer.ggml.merges") if model == "gemma4" else None
    if model == "gemma4" and merges_field is None:
        raise TokenizerError(f"{where}: a 'gemma4' vocabulary without tokenizer.ggml.merges",
                             "unreadable")
    tokens = fields["tokenizer.ggml.tokens"].contents()
    types_field = fields.get("tokenizer.ggml.token_type")
    types = list(types_field.contents()) if types_field is not None else [NORMAL] * len(tokens)
    if not tokens or len(types) != len(tokens):
        raise TokenizerError(f"{where}: the vocabulary has {len(tokens)} tokens and "
                             f"{len(types)} token types", "unreadable")

    def special(key: str, default: int) -> int:
        f = fields.get(f"tokenizer.ggml.{key}")
        return int(f.contents()) if f is not None else default

    ids = {"bos": special("bos_token_id", 2), "eos": special("eos_token_id", 1),
           "unk": special("unknown_token_id", 3), "pad": special("padding_token_id", 0)}
    for name, i in ids.items():
        if not 0 <= i < len(tokens):
            raise TokenizerError(f"{where}: {name} id {i} is outside the vocabulary "
                                 f"({len(tokens)} tokens)", "unreadable")
    if not any(t == BYTE for t in types):
        raise TokenizerError(f"{where}: the vocabulary has no byte pieces (<0x00>…), so text "
                             "outside it could not be encoded", "unsupported")
    merges = [str(m) for m in merges_field.contents()] if merges_field is not None else None
    return {"tokens": tokens, "types": types, "merges": merges, **ids}


def _scores(v: dict[str, Any]) -> list[float]:
    """Piece scores: ``-index`` (a SentencePiece vocabulary: the file order is the merge order),
    or, for Gemma 4's BPE vocabulary, ``-rank`` of the first merge that makes the piece (pieces
    no merge makes below every merge), as keras-hub's ``convert_gemma4`` rebuilds it."""
    if v["merges"] is None:
        return [float(-i) for i in range(len(v["tokens"]))]
    rank: dict[str, int] = {}
    for i, rule in enumerate(v["merges"]):
        a, _, b = rule.partition(" ")
        rank.setdefault(a + b, i)
    floor = -float(len(v["merges"]) + 1)
    return [-float(rank[t]) if t in rank else floor for t in v["tokens"]]


def build_model_proto(reader: Any, where: str = "the GGUF") -> bytes:
    """The serialized SentencePiece ``ModelProto`` for the reader's vocabulary."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    v = _vocab(reader, where)
    scores = _scores(v)
    piece_type = pb.ModelProto.SentencePiece.Type
    proto = pb.ModelProto()
    seen: set[str] = set()
    keep_control = {v["bos"], v["eos"], v["pad"]}
    for i, (token, kind) in enumerate(zip(v["tokens"], v["types"], strict=True)):
        # as the oracle: a token of whitespace holding a space is a run of U+2581
        text = "\u2581" * len(token) if " " in token and not token.strip() else token
        if i == v["unk"]:
            t = piece_type.UNKNOWN
        elif kind == CONTROL:
            t = piece_type.CONTROL if i in keep_control else piece_type.USER_DEFINED
        elif kind == USER_DEFINED:
            t = piece_type.USER_DEFINED
        elif kind == BYTE:
            t = piece_type.BYTE
        elif kind == UNUSED:
            t = piece_type.UNUSED
        else:
            t = piece_type.NORMAL
        if text in seen or not text:
            # SentencePiece forbids duplicates and empty pieces: keep the id, never match it
            text, t = f"<gguf-duplicate-{i}>", piece_type.UNUSED
        seen.add(text)
        proto.pieces.add(piece=text, score=scores[i], type=t)
    ts = proto.trainer_spec
    ts.model_type = pb.TrainerSpec.BPE
    ts.vocab_size = len(v["tokens"])
    ts.byte_fallback = True
    ts.split_digits = True
    ts.allow_whitespace_only_pieces = True
    ts.split_by_whitespace = False
    ts.unk_id, ts.bos_id, ts.eos_id, ts.pad_id = v["unk"], v["bos"], v["eos"], v["pad"]
    ts.unk_piece = proto.pieces[v["unk"]].piece
    ts.bos_piece = proto.pieces[v["bos"]].piece
    ts.eos_piece = proto.pieces[v["eos"]].piece
    ts.pad_piece = proto.pieces[v["pad"]].piece
    ns = proto.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = False
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    return proto.SerializeToString()


# --------------------------------------------------------------------------- file hash


def known_sha256(path: Path) -> str | None:
    """The sha256 a store already names the file by (Ollama, HF cache blobs, the starter)."""
    try:
        real = Path(os.path.realpath(path))
    except OSError:
        return None
    m = _SHA_NAME.search(real.name)
    if m:
        return m.group(1)
    from adapters_lib.models import starter

    return starter.checked_sha256(real)


def _hash_index() -> Path:
    return paths.data_dir() / "gguf-tokenizers" / "hashes.json"


def file_sha256(path: Path) -> str:
    """sha256 of the file: named by its store, remembered by (path, size, mtime), or computed."""
    found = known_sha256(path)
    if found:
        return found
    st = path.stat()
    key = f"{os.path.realpath(path)}|{st.st_size}|{st.st_mtime_ns}"
    index_file = _hash_index()
    try:
        index = json.loads(index_file.read_text())
    except (OSError, ValueError):
        index = {}
    if isinstance(index, dict) and isinstance(index.get(key), str):
        return index[key]
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    value = digest.hexdigest()
    index = {k: v for k, v in (index if isinstance(index, dict) else {}).items()
             if Path(k.split("|")[0]).exists()}
    index[key] = value
    _atomic_write(index_file, json.dumps(index, indent=1).encode())
    return value


def _atomic_write(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cache_dir() -> Path:
    return paths.data_dir() / "gguf-tokenizers"


def tokenizer_path_for(sha256: str) -> Path:
    """Where the rebuilt tokenizer of the GGUF with this sha256 is cached."""
    return cache_dir() / f"{sha256[:32]}-v{BUILD_VERSION}.model"


def tokenizer_for_gguf(path: str | os.PathLike[str]) -> Path:
    """The rebuilt ``tokenizer.model`` of a GGUF (built once, cached by the file's hash)."""
    p = Path(path)
    target = tokenizer_path_for(file_sha256(p))
    if target.is_file() and target.stat().st_size > 0:
        return target
    from adapters_lib.models.gguf.gguf_file import open_reader

    blob = build_model_proto(open_reader(p), where=p.name)
    _atomic_write(target, blob)
    log.info("tokenizer rebuilt from %s → %s", p.name, target)
    return target
