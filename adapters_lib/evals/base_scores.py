"""The base model's scores at step 0, kept on disk: a run whose model, data and eval settings
were scored before reuses them instead of computing them again.

A fresh run scores its base model before the first step (``EvalHook.on_start``: the eval
split's loss and perplexity, and the generated metrics such as exact match). The base is the
same whatever the LoRA rank, targets, learning rate, warm-up, steps or run name: at step 0
the adapters add exactly zero (B starts at zeros). So the score is kept under a key of what
it depends on, and the next such run reads it back:

- the route's part (``ModelProbe.base_fingerprint``; the gemma route's in ``train.loop``): the
  model spec and its files (name, size, mtime), the param and compute dtypes, the mesh, the
  objective and its settings, a digest of the eval batches;
- the hook's part: the eval plan (metrics, examples answered, token budget),
  ``data.max_length`` and a digest of the eval examples the generated metrics answer.

A route that gives no fingerprint (the Keras route; a multi-host run, where every process
must run the scoring's device code together; a DPO reference that is another run) always
scores. An entry is one JSON file ``<sha256 of the key>.json`` (the values, the exact-match
counts and samples); the newest ``KEEP`` are kept.

``GEMMA_WORKBENCH_BASE_SCORES``: the folder (default ``<state dir>/base-scores``); empty turns
the reuse off.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from adapters_lib import paths

log = logging.getLogger(__name__)

KEEP = 256
"""Entries kept (a few hundred bytes each); the oldest go first."""
stats = {"reused": 0, "scored": 0}
"""How often a base score was read back and how often one was computed and kept (tests, logs)."""


def folder() -> Path | None:
    chosen = os.environ.get("GEMMA_WORKBENCH_BASE_SCORES", str(paths.state_dir() / "base-scores"))
    return Path(chosen) if chosen else None


def digest(value: Any) -> str:
    """sha256 of a JSON-able value (examples, key parts), keys sorted."""
    text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def key_for(route_part: dict[str, Any] | None, hook_part: dict[str, Any]) -> str | None:
    """The entry's key, or None when the route cannot name what its score depends on."""
    if route_part is None or folder() is None:
        return None
    return digest({"route": route_part, "eval": hook_part})


def lookup(key: str | None) -> dict[str, Any] | None:
    """The kept ``{"values", "scored"}`` of ``key``, or None."""
    root = folder()
    if key is None or root is None:
        return None
    entry = root / f"{key}.json"
    try:
        data = json.loads(entry.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("values"), dict):
        return None
    try:
        os.utime(entry)  # recently used: kept longer
    except OSError:
        pass
    stats["reused"] += 1
    return data


def store(key: str | None, values: dict[str, float], scored: dict[str, Any] | None) -> None:
    """Keep a base score (``scored``: ``evals.task.Scored`` as a dict, or None)."""
    root = folder()
    if key is None or root is None:
        return
    stats["scored"] += 1
    try:
        paths.ensure_private_dir(root)
        tmp = root / f".{key}.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text(json.dumps({"values": values, "scored": scored}), encoding="utf-8")
        os.replace(tmp, root / f"{key}.json")
        _prune(root)
    except OSError as e:  # a read-only or full disk: the next run scores again
        log.warning("base scores: not kept in %s (%s)", root, e)


def _prune(root: Path) -> None:
    entries = sorted(root.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[KEEP:]:
        old.unlink(missing_ok=True)
