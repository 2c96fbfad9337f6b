"""Param shapes of an orbax checkpoint from its metadata (``_METADATA``, zarr headers), no jax."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from adapters_lib.models import families
from adapters_lib.models.families import ArchError


def read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArchError(f"{what} is not valid JSON ({e.__class__.__name__})", "unreadable") from None
    if not isinstance(data, dict):
        raise ArchError(f"{what} is not a JSON object", "unreadable")
    return data



def orbax_shapes(ckpt: Path) -> dict[str, tuple[int, ...]]:
    """Param shapes of an orbax checkpoint from its metadata (arrays are not read).

    Keys in gemma's nested form (``families.normalise_key``). Raises ``ArchError`` with
    status "unreadable" for a damaged checkpoint.
    """
    meta_file = ckpt / "_METADATA"
    shapes: dict[str, tuple[int, ...]] = {}
    ocdbt = (ckpt / "manifest.ocdbt").exists()
    if meta_file.is_file():
        meta = read_json(meta_file, "orbax _METADATA")
        tree = meta.get("tree_metadata")
        if not isinstance(tree, dict):
            raise ArchError("orbax _METADATA has no tree_metadata", "unreadable")
        ocdbt = ocdbt or bool(meta.get("use_ocdbt"))
        for value in tree.values():
            keys = [str(k.get("key")) for k in value.get("key_metadata", [])]
            shape = (value.get("value_metadata") or {}).get("write_shape")
            if shape is None:
                shapes = {}
                break
            shapes[families.normalise_key("/".join(keys))] = tuple(int(s) for s in shape)
    if ocdbt:
        if not (ckpt / "manifest.ocdbt").is_file() or (ckpt / "manifest.ocdbt").stat().st_size == 0:
            raise ArchError("orbax checkpoint data missing (manifest.ocdbt)", "unreadable")
        zarr = _ocdbt_zarr_shapes(ckpt)
        if not zarr:
            raise ArchError("orbax checkpoint holds no arrays", "unreadable")
        if not shapes:
            shapes = zarr
        elif set(zarr) != set(shapes):
            missing = sorted(set(shapes) - set(zarr))[:2]
            raise ArchError(f"orbax checkpoint lacks the data of {', '.join(missing)}", "unreadable")
    elif not shapes:
        for zarray in ckpt.glob("*/.zarray"):
            info = read_json(zarray, f"{zarray.parent.name}/.zarray")
            shapes[families.normalise_key(zarray.parent.name)] = tuple(info["shape"])
    if not shapes:
        raise ArchError("orbax checkpoint metadata lists no arrays", "unreadable")
    return shapes


def _ocdbt_zarr_shapes(ckpt: Path) -> dict[str, tuple[int, ...]]:
    """Shapes from the ``.zarray`` headers inside an OCDBT store (tensorstore, no jax)."""
    import tensorstore as ts

    try:
        kv = ts.KvStore.open({"driver": "ocdbt", "base": f"file://{ckpt.resolve()}/"}).result()
        keys = [k for k in kv.list().result() if k.endswith(b"/.zarray")]
        out = {}
        for key in keys:
            info = json.loads(kv.read(key).result().value)
            out[families.normalise_key(key.decode()[: -len("/.zarray")])] = tuple(info["shape"])
    except (ValueError, RuntimeError, KeyError, json.JSONDecodeError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        first = first.replace(f"{ckpt.resolve()}/", "").replace("Error decoding local file ", "")
        first = first[:100].rstrip(": ")
        raise ArchError(f"orbax checkpoint data is damaged: {first}", "unreadable") from None
    return out
