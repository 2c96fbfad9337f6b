"""What a GGUF file says about itself (``GGUFInfo``, ``TensorInfo``) and why one is unusable
(``GGUFError``): plain data, without numpy or the ``gguf`` package, so that a header the
catalog cached (``catalog.header_cache``) comes back without importing either.
``models.gguf.gguf_file`` reads these from a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class GGUFError(Exception):
    """A GGUF file that cannot be used: ``status`` (catalog vocabulary) and a one-line reason."""

    def __init__(self, reason: str, status: str = "unreadable"):
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file (shape in numpy order: the GGUF lists dims innermost first)."""

    name: str
    type: str
    """GGML type name: F32, F16, BF16, Q8_0, Q4_K, …"""
    shape: tuple[int, ...]
    n_elements: int
    n_bytes: int
    shard: int = 0


@dataclass
class GGUFInfo:
    """What a GGUF file says about itself, read from its header alone."""

    path: Path
    bytes: int
    """On disk, every shard together."""
    architecture: str
    metadata: dict[str, Any]
    """Scalars and short arrays; long arrays (the vocabulary) appear as ``{"count": n}``."""
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    shards: tuple[Path, ...] = ()
    vocab_size: int | None = None
    """Pieces in the tokenizer vocabulary (``tokenizer.ggml.tokens``), None without one."""

    def get(self, key: str, default: Any = None) -> Any:
        """A metadata value; ``{arch}`` in ``key`` is the file's architecture."""
        return self.metadata.get(key.replace("{arch}", self.architecture), default)

    @property
    def name(self) -> str:
        return str(self.get("general.name") or self.path.name)

    quant_name: str | None = field(default=None, repr=False)
    """``quant`` once known (a cached header carries it: no ``gguf`` import to name it)."""

    @property
    def quant(self) -> str:
        """The file type as llama.cpp names it (Q4_K_M, Q8_0, F16, …), else the commonest type."""
        if self.quant_name is None:
            self.quant_name = self._quant()
        return self.quant_name

    def _quant(self) -> str:
        import gguf

        ftype = self.get("general.file_type")
        if isinstance(ftype, int):
            try:
                return gguf.LlamaFileType(ftype).name.removeprefix("MOSTLY_").removeprefix("ALL_")
            except ValueError:
                pass
        counts: dict[str, int] = {}
        for t in self.tensors.values():
            if len(t.shape) > 1:
                counts[t.type] = counts.get(t.type, 0) + t.n_elements
        return max(counts, key=counts.__getitem__) if counts else "?"

    def param_count(self) -> int:
        return sum(t.n_elements for t in self.tensors.values())

    def tensor_types(self) -> dict[str, int]:
        """GGML type → how many tensors use it."""
        out: dict[str, int] = {}
        for t in self.tensors.values():
            out[t.type] = out.get(t.type, 0) + 1
        return dict(sorted(out.items()))


def info_to_json(info: GGUFInfo) -> dict[str, Any]:
    """``info`` as JSON-able data (``info_from_json`` gives it back)."""
    return {"path": str(info.path), "bytes": info.bytes, "architecture": info.architecture,
            "metadata": info.metadata, "shards": [str(s) for s in info.shards],
            "vocab_size": info.vocab_size, "quant": info.quant,
            "tensors": [[t.name, t.type, list(t.shape), t.n_elements, t.n_bytes, t.shard]
                        for t in info.tensors.values()]}


def info_from_json(data: dict[str, Any]) -> GGUFInfo:
    tensors = {t[0]: TensorInfo(t[0], t[1], tuple(t[2]), t[3], t[4], t[5]) for t in data["tensors"]}
    return GGUFInfo(path=Path(data["path"]), bytes=data["bytes"], architecture=data["architecture"],
                    metadata=data["metadata"], tensors=tensors,
                    shards=tuple(Path(s) for s in data["shards"]), vocab_size=data["vocab_size"],
                    quant_name=data["quant"])
