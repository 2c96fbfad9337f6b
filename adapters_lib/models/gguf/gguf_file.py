"""Read a GGUF file's metadata and tensors with llama.cpp's own reader (the ``gguf`` package).

``read_info(path) -> GGUFInfo``: the metadata (architecture, hyper-parameters, tokenizer
fields), the tensor table (names, GGML types, shapes, offsets) and the file's own checks
(truncated, damaged, split into shards), without reading any tensor data. ``open_file(path)``
gives the reader itself for the weights loader and the tokenizer builder.

``gguf.GGUFReader`` turns every element of a metadata array into its own numpy view: on
a Gemma file (262,144 tokens, scores and types) that is ~800 k views and 10-25 s on two
cores. ``_Reader`` keeps the reader and its field layout and only changes how arrays are
held — a fixed-size array is one view, a string is one ``memoryview`` slice — which brings
the read to under a second. It also checks every read against the end of the file, so a
truncated file fails with the offset it needed instead of an ``IndexError`` deep inside.
``read_info`` goes further: it walks past the vocabulary's strings without keeping them (the
catalog needs their count only), so listing the 270M starter takes ~0.1 s instead of 2-6 s.

Split files (``model-00001-of-00003.gguf``, llama.cpp's ``split.*`` keys) are read as one:
the first shard's metadata and every shard's tensors.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np

from adapters_lib.models.gguf.gguf_info import GGUFError, GGUFInfo, TensorInfo

MAGIC = b"GGUF"
_BIG_ARRAY = 64  # metadata arrays longer than this are kept as counts in GGUFInfo.metadata
_U64 = struct.Struct("<Q")
_SPLIT_NAME = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def is_gguf(path: str | os.PathLike[str]) -> bool:
    """True when the file starts with the GGUF magic (names do not matter: Ollama's blobs)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def _reader_class() -> type:
    import gguf
    from gguf.constants import GGUFValueType

    class _Reader(gguf.GGUFReader):
        """``gguf.GGUFReader`` with arrays held whole and reads bounded by the file's end."""

        def _get(self, offset, dtype, count=1, override_order=None):
            end = int(offset) + int(np.dtype(dtype).itemsize) * int(count)
            if end > len(self.data):
                raise GGUFError(f"truncated: the metadata needs byte {end:,} but the file has "
                                f"{len(self.data):,}", "incomplete")
            return super()._get(offset, dtype, count, override_order)

        def _get_field_parts(self, orig_offs, raw_type):
            if GGUFValueType(raw_type) != GGUFValueType.ARRAY or self.byte_order != "I":
                return super()._get_field_parts(orig_offs, raw_type)
            offs = orig_offs
            raw_itype = self._get(offs, np.uint32)
            alen = self._get(offs + 4, np.uint64)
            offs += 12
            itype, count = GGUFValueType(int(raw_itype[0])), int(alen[0])
            types = [GGUFValueType.ARRAY, itype]
            nptype = self.gguf_scalar_to_np.get(itype)
            if nptype is not None:  # one view for the whole array; contents() flattens it
                values = self._get(offs, nptype, count)
                return offs + values.nbytes - orig_offs, [raw_itype, alen, values], [2], types
            if itype != GGUFValueType.STRING:
                return super()._get_field_parts(orig_offs, raw_type)
            view = memoryview(self.data)  # .tobytes() is all that contents() asks of a part
            size = len(view)
            if self.skip_long_strings and count > _BIG_ARRAY:
                return self._skip_strings(view, orig_offs, offs, count, [raw_itype, alen], types)
            parts: list[Any] = [raw_itype, alen]
            for _ in range(count):
                if offs + 8 > size:
                    raise GGUFError(f"truncated: a metadata string at byte {offs:,} runs past the "
                                    f"end of the file ({size:,} bytes)", "incomplete")
                n = int.from_bytes(view[offs:offs + 8], "little")
                if offs + 8 + n > size:
                    raise GGUFError(f"truncated: a metadata string at byte {offs:,} runs past the "
                                    f"end of the file ({size:,} bytes)", "incomplete")
                parts.append(view[offs + 8:offs + 8 + n])
                offs += 8 + n
            return offs - orig_offs, parts, list(range(2, 2 + count)), types

        header_only = False
        logical_size: int | None = None
        skip_long_strings = False
        """``read_info``: walk past a long string array (the vocabulary) without a part per
        string; the field keeps its length (``len(field.data)``), not its strings."""

        def _skip_strings(self, view, orig_offs, offs, count, parts, types):
            size, unpack = len(view), _U64.unpack_from
            for _ in range(count):
                if offs + 8 > size:
                    offs = size + 1
                    break
                offs += 8 + unpack(view, offs)[0]
            if offs > size:
                raise GGUFError(f"truncated: a metadata string array at byte {orig_offs:,} "
                                f"runs past the end of the file ({size:,} bytes)", "incomplete")
            return offs - orig_offs, parts, range(2, 2 + count), types

        def _build_tensors(self, start_offs, fields):
            size = self.logical_size or len(self.data)
            for f in fields:
                _, name, _, dims, raw_dtype, offset = f.parts
                try:
                    qtype = gguf.GGMLQuantizationType(int(raw_dtype[0]))
                except ValueError:
                    raise GGUFError(f"tensor {bytes(name).decode(errors='replace')} has GGML type "
                                    f"{int(raw_dtype[0])}, unknown to gguf "
                                    f"{_gguf_version()}", "unsupported") from None
                block, type_size = gguf.GGML_QUANT_SIZES[qtype]
                end = int(start_offs) + int(offset[0]) + int(np.prod(dims)) * type_size // block
                if end > size:
                    raise GGUFError(f"truncated: {size:,} bytes, the tensors need {end:,} "
                                    f"({bytes(name).decode(errors='replace')} is cut)",
                                    "incomplete")
            if self.header_only:  # the tensor table without views of the data
                self.tensors = [_header_tensor(f, int(start_offs)) for f in fields]
                return None
            return super()._build_tensors(start_offs, fields)

    def _header_tensor(f: Any, start: int) -> Any:
        _, name, _, dims, raw_dtype, offset = f.parts
        qtype = gguf.GGMLQuantizationType(int(raw_dtype[0]))
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        n = int(np.prod(dims))
        return gguf.ReaderTensor(name=bytes(name).decode(), tensor_type=qtype, shape=dims,
                                 n_elements=n, n_bytes=n * type_size // block,
                                 data_offset=start + int(offset[0]), data=np.zeros(0, np.uint8),
                                 field=f)

    return _Reader


_READER: type | None = None


def _gguf_version() -> str:
    from importlib.metadata import version

    try:
        return version("gguf")
    except Exception:  # noqa: BLE001 - only for a message
        return "(unknown version)"


def open_reader(path: str | os.PathLike[str], *, header_only: bool = False,
                logical_size: int | None = None, skip_long_strings: bool = False) -> Any:
    """A ``gguf.GGUFReader`` over ``path`` (see the module doc); raises ``GGUFError``.

    ``header_only``: the tensor table without data views (``tensor.data`` is empty);
    ``logical_size``: the size the whole file has (``path`` being its first bytes only).
    """
    global _READER
    if _READER is None:
        _READER = _reader_class()
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError as e:
        raise GGUFError(f"cannot read {p}: {e.strerror}") from None
    if size < 24:
        raise GGUFError(f"truncated: {size} bytes, shorter than a GGUF header", "incomplete")
    if not is_gguf(p):
        raise GGUFError("not a GGUF file (no GGUF magic at the start)")
    try:
        if header_only or logical_size or skip_long_strings:
            cls = type("_HeaderReader", (_READER,), {"header_only": header_only,
                                                     "logical_size": logical_size,
                                                     "skip_long_strings": skip_long_strings})
            return cls(p)
        return _READER(p)
    except GGUFError:
        raise
    except (ValueError, KeyError, IndexError, UnicodeDecodeError, OverflowError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:160]
        raise GGUFError(f"damaged GGUF metadata: {first}") from None
    except OSError as e:
        raise GGUFError(f"cannot read {p}: {e.strerror}") from None


def _field_value(f: Any) -> Any:
    from gguf.constants import GGUFValueType

    if not f.types:
        return None
    if f.types[0] == GGUFValueType.ARRAY:
        whole = f.types[-1] != GGUFValueType.STRING and len(f.data) == 1
        count = int(np.asarray(f.parts[f.data[0]]).size) if whole else len(f.data)
        if count > _BIG_ARRAY:
            return {"count": count}
        return f.contents()
    value = f.contents()
    return value.item() if hasattr(value, "item") else value


def split_shards(path: Path, count: int) -> tuple[Path, ...]:
    """The shard paths of a split GGUF whose first shard is ``path``."""
    m = _SPLIT_NAME.match(path.name)
    if not m:
        raise GGUFError(f"split.count is {count} but {path.name} is not named "
                        "<name>-00001-of-000NN.gguf, so its other shards cannot be found")
    stem = m.group("stem")
    return tuple(path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1))


def read_info(path: str | os.PathLike[str], *, logical_size: int | None = None) -> GGUFInfo:
    """The header of a GGUF file (and of its other shards); raises ``GGUFError``.

    ``logical_size``: ``path`` holds only the first bytes of a file of that size (the
    starter model's first chunk).
    """
    p = Path(path)
    reader = open_reader(p, header_only=True, logical_size=logical_size, skip_long_strings=True)
    meta = {name: _field_value(f) for name, f in reader.fields.items()
            if not name.startswith("GGUF.")}
    arch = str(meta.get("general.architecture") or "")
    if not arch:
        raise GGUFError("no general.architecture in the GGUF metadata")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    info = GGUFInfo(path=p, bytes=logical_size or p.stat().st_size, architecture=arch, metadata=meta,
                    vocab_size=len(tokens.data) if tokens is not None else None, shards=(p,))
    _add_tensors(info, reader, 0)
    count = int(meta.get("split.count") or 1)
    if count > 1:
        if int(meta.get("split.no") or 0) != 0:
            raise GGUFError(f"shard {int(meta['split.no']) + 1} of {count} of a split GGUF: "
                            "open the first shard", "unsupported")
        info.shards = split_shards(p, count)
        missing = [s.name for s in info.shards if not s.is_file()]
        if missing:
            raise GGUFError(f"split GGUF: shard{'s' if len(missing) > 1 else ''} missing: "
                            f"{', '.join(missing[:3])}", "incomplete")
        for i, shard in enumerate(info.shards[1:], 1):
            _add_tensors(info, open_reader(shard, header_only=True, skip_long_strings=True), i)
            info.bytes += shard.stat().st_size
        expected = meta.get("split.tensors.count")
        if expected is not None and int(expected) != len(info.tensors):
            raise GGUFError(f"split GGUF lists {expected} tensors, its shards hold "
                            f"{len(info.tensors)}", "incomplete")
    return info


def _add_tensors(info: GGUFInfo, reader: Any, shard: int) -> None:
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        info.tensors[t.name] = TensorInfo(t.name, t.tensor_type.name, shape, int(t.n_elements),
                                          int(t.n_bytes), shard)
