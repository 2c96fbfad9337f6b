"""The one export vocabulary, shared by the CLI, the engine API and the TUI (pure data).

``--format adapter|gemma|hf`` (CLI contract) names what an export writes:

- ``adapter`` — the LoRA weights only (HF PEFT layout; a Keras run: keras-hub's ``.lora.h5``);
- ``gemma`` — base + adapters fused, an orbax checkpoint for ``gm.ckpts.load_params``;
- ``hf`` — the same merged weights as HF safetensors + ``config.json``.

The API's older pair ``kind = adapter|merged`` + ``format`` still works: ``resolve`` maps it
to one of these (``merged`` alone is ``gemma``; ``merged`` + ``format = "hf"`` is ``hf``).
"""

from __future__ import annotations

from adapters_lib.errors import WorkbenchError

FORMATS = ("adapter", "gemma", "hf")
KINDS = {"adapter": "adapter", "gemma": "merged", "hf": "merged"}
"""The API's older ``kind`` of each format."""
DESCRIPTIONS = {
    "adapter": "the LoRA adapter (HF PEFT safetensors)",
    "gemma": "merged weights, gemma orbax checkpoint",
    "hf": "merged weights, HF safetensors",
}
DEFAULT_FOLDERS = {"adapter": "adapter", "gemma": "merged", "hf": "merged-hf"}
"""Where an export goes without ``--out``: ``<run dir>/<folder>``."""


def resolve(format: str = "", kind: str = "", *, where: str = "--format") -> str:  # noqa: A002
    """The export format named by ``format`` and/or the older ``kind`` (they must agree)."""
    if kind and kind not in ("adapter", "merged"):
        raise WorkbenchError(f"export kind {kind!r}", where=where.replace("format", "kind"),
                             hint='use "adapter" or "merged" (or format: adapter, gemma, hf)')
    if format:
        if format not in FORMATS:
            raise WorkbenchError(f"export format {format!r}", where=where,
                                 hint=f"use one of {', '.join(FORMATS)}")
        if kind and KINDS[format] != kind:
            raise WorkbenchError(f"kind {kind!r} and format {format!r} disagree", where=where,
                                 hint=f"format {format!r} is kind {KINDS[format]!r}; send format alone")
        return format
    return "gemma" if kind == "merged" else "adapter"
