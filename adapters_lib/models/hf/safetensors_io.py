"""The safetensors format, read and written with numpy alone (no torch, no ``safetensors``).

``read_header`` checks a file's JSON header against its size (a truncated file is named);
``read_tensor`` memory-maps one tensor read-only; ``write_safetensors`` writes a file the
``safetensors`` library reads; ``SafetensorsDir`` is one HF model folder's files (a single
file, or shards with ``model.safetensors.index.json``). bf16 goes through ``ml_dtypes``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
           "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
           "BOOL": "bool"}
_CODES = {v: k for k, v in _DTYPES.items()}


class SafetensorsError(Exception):
    """A safetensors file that cannot be read (truncated, bad header)."""


def _np_dtype(code: str) -> np.dtype:
    name = _DTYPES.get(code)
    if name is None:
        raise SafetensorsError(f"unsupported safetensors dtype {code}")
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file, checked against the file's size."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise SafetensorsError(f"{path.name}: shorter than a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8 or n > 100_000_000:
            raise SafetensorsError(f"{path.name}: header length {n} exceeds the file")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise SafetensorsError(f"{path.name}: header is not valid JSON") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path.name}: header is not a JSON object")
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end > size:
        raise SafetensorsError(
            f"{path.name}: truncated ({size} bytes, the header needs {8 + n + end})")
    header["__data_start__"] = 8 + n
    return header


def read_tensor(path: Path, header: Mapping[str, Any], name: str) -> np.ndarray:
    """One tensor, memory-mapped (read-only) from the file."""
    info = header[name]
    start, end = info["data_offsets"]
    dtype = _np_dtype(info["dtype"])
    shape = tuple(info["shape"])
    count = (end - start) // dtype.itemsize
    arr = np.memmap(path, dtype=dtype, mode="r", offset=header["__data_start__"] + start,
                    shape=(count,))
    return arr.reshape(shape)


def write_safetensors(path: Path, tensors: Mapping[str, np.ndarray],
                      metadata: Mapping[str, str] | None = None) -> None:
    """Write ``tensors`` in the safetensors format (readable by the ``safetensors`` library)."""
    header: dict[str, Any] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    names = sorted(tensors)
    for name in names:
        arr = np.asarray(tensors[name])
        code = _CODES.get(arr.dtype.name)
        if code is None:
            raise SafetensorsError(f"cannot write dtype {arr.dtype} ({name})")
        header[name] = {"dtype": code, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name in names:
            f.write(np.ascontiguousarray(tensors[name]).tobytes())


class SafetensorsDir:
    """The safetensors files of one HF model folder: single file or sharded with an index."""

    def __init__(self, folder: Path):
        self.folder = folder
        index = folder / "model.safetensors.index.json"
        self.where: dict[str, Path] = {}
        self.headers: dict[Path, dict[str, Any]] = {}
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (OSError, ValueError, KeyError, TypeError):
                raise SafetensorsError("model.safetensors.index.json is not a valid index") from None
            for name, file in weight_map.items():
                self.where[name] = folder / file
            missing = sorted({p.name for p in self.where.values() if not p.is_file()})
            if missing:
                raise SafetensorsError(
                    f"shard{'s' if len(missing) > 1 else ''} missing: {', '.join(missing[:3])}")
        files = sorted(folder.glob("*.safetensors"))
        if not files and not self.where:
            raise SafetensorsError("no *.safetensors file")
        for file in sorted(set(self.where.values()) | set(files)):
            header = read_header(file)
            self.headers[file] = header
            for name in header:
                if not name.startswith("__"):
                    self.where.setdefault(name, file)
        for name, file in self.where.items():
            if name not in self.headers[file]:
                raise SafetensorsError(f"{file.name}: index lists {name} but the file lacks it")

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {n: tuple(self.headers[f][n]["shape"]) for n, f in self.where.items()}

    def dtypes(self) -> set[str]:
        return {self.headers[f][n]["dtype"] for n, f in self.where.items()}

    def get(self, name: str) -> np.ndarray:
        file = self.where[name]
        return read_tensor(file, self.headers[file], name)

    def nbytes(self) -> int:
        return sum(p.stat().st_size for p in self.headers)
