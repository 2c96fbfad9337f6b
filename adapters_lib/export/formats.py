"""The one export vocabulary, shared by the CLI, the engine API and the TUI (pure data).

``--format adapter|gemma|hf|gguf|gguf-lora`` (CLI contract) names what an export writes:

- ``adapter`` — the LoRA weights only (HF PEFT layout; a Keras run: keras-hub's ``.lora.h5``);
- ``gemma`` — base + adapters fused, an orbax checkpoint for ``gm.ckpts.load_params``;
- ``hf`` — the same merged weights as HF safetensors + ``config.json``;
- ``gguf`` — the merged weights as one GGUF file for llama.cpp / Ollama / LM Studio, with
  a ``Modelfile`` beside it (``--quant``: ``GGUF_QUANTS``);
- ``gguf-lora`` — the adapter as llama.cpp's LoRA-adapter GGUF, with a ``Modelfile``
  (``FROM`` the base, ``ADAPTER`` the file; ``--quant``: ``LORA_QUANTS``).

``estimate_bytes`` gives the size of an export before it is written (the TUI's export
dialog shows it per quant type).

The API's older pair ``kind = adapter|merged`` + ``format`` still works: ``resolve`` maps it
to one of these (``merged`` alone is ``gemma``; ``merged`` + ``format = "hf"`` is ``hf``).
"""

from __future__ import annotations

from adapters_lib.errors import WorkbenchError

FORMATS = ("adapter", "gemma", "hf", "gguf", "gguf-lora")
KINDS = {"adapter": "adapter", "gemma": "merged", "hf": "merged", "gguf": "merged",
         "gguf-lora": "adapter"}
"""The API's older ``kind`` of each format."""
DESCRIPTIONS = {
    "adapter": "the LoRA adapter (HF PEFT safetensors)",
    "gemma": "merged weights, gemma orbax checkpoint",
    "hf": "merged weights, HF safetensors",
    "gguf": "merged weights, one GGUF file + Ollama Modelfile (llama.cpp, Ollama, LM Studio)",
    "gguf-lora": "the LoRA adapter as llama.cpp's adapter GGUF + Ollama Modelfile",
}
DEFAULT_FOLDERS = {"adapter": "adapter", "gemma": "merged", "hf": "merged-hf", "gguf": "gguf",
                   "gguf-lora": "gguf-lora"}
"""Where an export goes without ``--out``: ``<run dir>/<folder>``."""

GGUF_FORMATS = ("gguf", "gguf-lora")
GGUF_QUANTS = ("f32", "bf16", "f16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "base")
"""``--quant`` of ``gguf``: the matrices' type (vectors and norms are F32, as llama.cpp's
converter writes them); ``base``: untouched tensors copied from a GGUF base as they are."""
LORA_QUANTS = ("f32", "bf16", "f16", "q8_0")
DEFAULT_QUANT = {"gguf": "q8_0", "gguf-lora": "f32"}
BITS = {"f32": 32.0, "bf16": 16.0, "f16": 16.0, "q8_0": 8.5, "q5_1": 6.0, "q5_0": 5.5,
        "q4_1": 5.0, "q4_0": 4.5}
"""Bits per weight of each type (GGML block sizes: Q8_0 34 bytes per 32 weights, …)."""
K_QUANTS_NOTE = ("K-quants (q4_k_m, q5_k_m, q6_k, …) are not written: the gguf package's "
                 "Python quantizer reads them only; run llama.cpp's llama-quantize on an "
                 "f16 or bf16 export")


def check_quant(fmt: str, quant: str = "", *, where: str = "--quant") -> str:
    """The ``--quant`` of a GGUF format (its default when empty); "" for the other formats."""
    if fmt not in GGUF_FORMATS:
        if quant:
            raise WorkbenchError(f"--quant {quant} applies to the GGUF formats only", where=where,
                                 hint="add --format gguf or gguf-lora, or drop --quant")
        return ""
    quant = (quant or DEFAULT_QUANT[fmt]).lower()
    allowed = GGUF_QUANTS if fmt == "gguf" else LORA_QUANTS
    if quant not in allowed:
        note = f"; {K_QUANTS_NOTE}" if "_k" in quant else ""
        raise WorkbenchError(f"quant {quant!r} for --format {fmt}", where=where,
                             hint=f"use one of {', '.join(allowed)}{note}")
    return quant


def estimate_bytes(fmt: str, quant: str, *, matrix_params: int, vector_params: int = 0,
                   lora_params: int = 0) -> int:
    """About how many bytes an export writes (``base``: as q8_0, its upper bound here).

    ``matrix_params``: weights in matrices (embedding, projections); ``vector_params``:
    norms (F32 in every GGUF); ``lora_params``: the adapter's weights.
    """
    bits = BITS.get(quant, BITS["q8_0"])
    if fmt == "gguf":
        return int(matrix_params * bits / 8 + vector_params * 4)
    if fmt == "gguf-lora":
        return int(lora_params * bits / 8)
    if fmt == "adapter":
        return int(lora_params * 4)
    return int((matrix_params + vector_params) * 4)


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
