"""One catalog entry (``ModelEntry``, contract: the ``to_dict`` keys) and its vocabularies."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from adapters_lib.models import families
from adapters_lib.models.families import Arch

FORMATS = ("flax-orbax", "hf-safetensors", "keras-preset", "gguf", "demo")
STATUSES = ("ok", "incomplete", "unreadable", "unsupported")
SOURCES = ("builtin", "starter", "kaggle", "huggingface", "ollama", "lmstudio", "folder")


@dataclass
class ModelEntry:
    """One model found on disk (contract: the ``to_dict`` keys; later keys are additions)."""

    id: str
    family: str = "other"
    size: str = "custom"
    variant: str = "pt"
    format: str = "flax-orbax"
    path: str = ""
    tokenizer: str | None = None
    bytes: int = 0
    params: int | None = None
    status: str = "ok"
    reason: str = ""
    source: str = "folder"
    """Where it was found: one of ``SOURCES``."""
    arch: Arch | None = field(default=None, repr=False)
    checkpoint: str = ""
    """The orbax checkpoint directory (may be a child of ``path``)."""
    quant: str | None = None
    """GGUF: the file type as llama.cpp names it (Q4_K_M, Q8_0, F16, …); else None."""
    vocab_rows: int | None = None
    """Rows of the embedding table."""
    tokenizer_pieces: int | None = None
    """Pieces of the tokenizer (None when unknown without reading it)."""
    tokenizer_mismatch: str = ""
    """Words when tokenizer and model disagree by more than padding rows; else empty."""
    note: str = ""
    """Something to know about an ``ok`` entry (``reason`` stays empty when ok)."""
    params_effective: int | None = None
    """E-models: params that compute per token (the per-layer embedding table aside)."""
    params_active: int | None = None
    """MoE: params used per token (top-k of the experts)."""
    towers: tuple[str, ...] = ()
    """Media towers the checkpoint holds (``vision``, ``audio``): present, never trained."""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "family": self.family, "size": self.size, "variant": self.variant,
                "format": self.format, "path": self.path, "tokenizer": self.tokenizer,
                "bytes": self.bytes, "params": self.params, "status": self.status,
                "reason": self.reason, "source": self.source, "quant": self.quant,
                "vocab_rows": self.vocab_rows, "tokenizer_pieces": self.tokenizer_pieces,
                "tokenizer_mismatch": self.tokenizer_mismatch, "note": self.note,
                "params_effective": self.params_effective, "params_active": self.params_active,
                "towers": list(self.towers)}

    def fail(self, status: str, reason: str) -> ModelEntry:
        """Record the first problem found (later ones do not overwrite it)."""
        if self.status == "ok":
            self.status, self.reason = status, reason
        return self


PADDING_ROWS = 128
"""Embedding rows beyond the tokenizer that are padding, not a mismatch (Gemma 3's
multimodal checkpoints: 262,208 rows for 262,144 pieces)."""


def vocab_mismatch(rows: int | None, pieces: int | None) -> str:
    """Words when ``pieces`` tokenizer pieces and ``rows`` embedding rows do not fit together.

    More pieces than rows is a real problem (the tokenizer emits ids the model lacks); a few
    rows more than pieces is padding (generation masks them out); many more is a mismatch.
    """
    if rows is None or pieces is None or rows == pieces:
        return ""
    if pieces > rows:
        return (f"the tokenizer has {pieces:,} pieces but the model only {rows:,} embedding "
                f"rows: ids from {rows:,} on would fail")
    if rows - pieces > PADDING_ROWS:
        return (f"the model has {rows:,} embedding rows but the tokenizer only {pieces:,} "
                f"pieces ({rows - pieces:,} more than padding): is it the model's tokenizer?")
    return ""


def name_guess(entry: ModelEntry, name: str) -> None:
    """Family/size/variant from a release name like ``gemma-3-1b-it``, ``gemma2-2b``."""
    low = name.lower()
    entry.variant = "it" if re.search(r"(^|[-_/ .])(it|instruct)([-_/ .]|$)", low) else "pt"
    fam = re.search(r"gemma[-_ ]?(\d)(n)?", low)
    if fam and entry.family == "other":
        entry.family = "gemma3n" if fam.group(2) and fam.group(1) == "3" else \
            {"2": "gemma2", "3": "gemma3", "4": "gemma4"}.get(fam.group(1), "other")
    size = re.search(r"(?<![\w.])(e\d+b|\d+(?:\.\d+)?[mb])(?![\w])", low.replace("_", "-"))
    if size and entry.size == "custom":
        entry.size = size.group(1)


def set_arch(entry: ModelEntry, arch: Arch) -> None:
    entry.arch = arch
    entry.family = arch.family
    entry.size = families.size_of(arch)
    if arch.family in ("gemma4", "gemma3n"):  # effective (E-models) and active per token (MoE)
        entry.params_effective = arch.effective_params()  # type: ignore[attr-defined]
        entry.params_active = arch.active_params()  # type: ignore[attr-defined]
        entry.towers = tuple(arch.towers)  # type: ignore[attr-defined]
        if entry.towers:
            entry.note = entry.note or f"{' and '.join(entry.towers)} tower present, not trained"
    entry.vocab_rows = arch.vocab_size
