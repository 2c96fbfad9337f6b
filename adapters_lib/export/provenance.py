"""What an export was trained on: the Hugging Face id a loader elsewhere can resolve, and the
exact base of this run (file, quantization, sha256).

``adapter_config.json`` carries ``base_model_name_or_path`` = the hub id where one is known
(the starter is ``google/gemma-3-270m``; ``hf:org/name`` is ``org/name``), so PEFT and vLLM
resolve it. ``gemma_workbench.json`` beside it records the workbench's own id of the base
(what ``sample --adapter`` loads) and the exact file: a starter adapter was trained on the
Q4_K_M GGUF dequantized, not on the original bf16 weights, and says so.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

PROVENANCE = "gemma_workbench.json"
HUB_IDS = {"starter:gemma-3-270m": "google/gemma-3-270m", "gemma-3-270m": "google/gemma-3-270m"}
HASH_LIMIT = 4 * 2**30
"""A base file up to this size is hashed at export (a few seconds); a larger one is not."""


def hub_id(source: str) -> str:
    """The Hugging Face id of a workbench model id, where one is known (else the id itself)."""
    if source in HUB_IDS:
        return HUB_IDS[source]
    m = re.fullmatch(r"hf:([\w.-]+/[\w.-]+)(@\w+)?", source)
    return m.group(1) if m else source


def base_record(source: str, quantize: str = "none") -> dict[str, Any]:
    """The exact base: the workbench id, the hub id, its file, format, quantization, sha256."""
    from adapters_lib.catalog import listing
    from adapters_lib.errors import WorkbenchError
    from adapters_lib.models import starter

    record: dict[str, Any] = {"source": source, "hub_id": hub_id(source), "quantize": quantize}
    try:
        entry = listing.find(source)
    except WorkbenchError:
        return record
    record.update(format=entry.format, file=entry.path, quantization=entry.quant or "none")
    if source in HUB_IDS:
        record.update(file=str(starter.target_path()), sha256=starter.EXPECTED_SHA256,
                      note="the Q4_K_M GGUF, dequantized to float at load: not the original "
                           "bf16 google/gemma-3-270m weights")
    elif entry.path and Path(entry.path).is_file() and Path(entry.path).stat().st_size <= HASH_LIMIT:
        record["sha256"] = _sha256(Path(entry.path))
    return record


def write_provenance(folder: Path, record: dict[str, Any]) -> None:
    (folder / PROVENANCE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def read_source(folder: Path) -> str:
    """The workbench id of the base an export was trained on ("" when it does not say)."""
    try:
        return str(json.loads((folder / PROVENANCE).read_text(encoding="utf-8")).get("source", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
