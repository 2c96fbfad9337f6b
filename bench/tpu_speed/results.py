"""A check's rows: one JSON line a row on stdout, one JSON file a check in ``--out``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def _row(name: str, **fields: Any) -> dict[str, Any]:
    row = {"measure": name, **fields}
    print(json.dumps(row, default=str), flush=True)
    return row


def _dump(out: Path, name: str, rows: list[dict]) -> None:
    import jax

    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "jax": jax.__version__,
            "device": str(jax.devices()[0].device_kind), "devices": jax.device_count()}
    try:
        import importlib.metadata as md

        meta |= {p: md.version(p) for p in ("jaxlib", "libtpu", "gemma", "flax", "optax")
                 if _has_dist(md, p)}
    except Exception:  # noqa: BLE001
        pass
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))


def _has_dist(md: Any, name: str) -> bool:
    try:
        md.version(name)
        return True
    except md.PackageNotFoundError:
        return False
