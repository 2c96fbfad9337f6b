"""GGUF tensors → gemma params on the mesh, one tensor at a time; and GGUF → HF safetensors.

``load_gguf_params(info, arch, param_dtype, sharding)``: every tensor is dequantized by the
``gguf`` package (``gguf.quants.dequantize``, every type it supports: F32/F16/BF16, Q4_0…Q8_0,
the K-quants, the IQ types, …) in row blocks of at most ``ROW_BLOCK_BYTES`` of f32, written
into an array of the param dtype, offset-corrected (llama.cpp's ``1 + w`` norms, see
``gguf_arch``), laid out by the project's HF → gemma map (``hf_convert.leaf_plan``) and
``device_put`` onto its sharding before the next tensor is read. The host therefore holds
one tensor in the param dtype plus one row block in f32: a 27B Q4 file never needs the
model in f32 on the host.

``export_hf_from_gguf(info, arch, out)``: the same dequantized tensors written as a Hugging
Face folder (config.json, safetensors, the rebuilt tokenizer.model), which keras-hub and
transformers convert — the Keras route's way to the GGUF weights.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from adapters_lib.models import families
from adapters_lib.models.families import Arch
from adapters_lib.models.gguf.gguf_arch import gguf_names, norm_offset
from adapters_lib.models.gguf.gguf_arch_e import gguf_plan, rope_proportion, split_parts
from adapters_lib.models.gguf.gguf_file import open_reader
from adapters_lib.models.gguf.gguf_info import GGUFError, GGUFInfo

log = logging.getLogger(__name__)

ROW_BLOCK_BYTES = 64 << 20
"""f32 bytes dequantized at once (rows of one tensor)."""
ALIGN = 64
"""Host arrays are 64-byte aligned: JAX's CPU client then adopts them without a copy, so
placing the 168 M-row embedding of the 270M does not hold it twice (measured: +0 MB
instead of +655 MB resident for a 262,144 × 640 f32 table)."""


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an ``ALIGN``-byte boundary."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(n + ALIGN, np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start:start + n].view(dtype).reshape(shape)


def aligned(value: np.ndarray) -> np.ndarray:
    """``value`` itself when a contiguous, aligned array of its own, else an aligned copy
    (a read-only view, e.g. memory-mapped from a file, is always copied)."""
    if value.flags.c_contiguous and value.flags.writeable and not isinstance(value, np.memmap) \
            and value.ctypes.data % ALIGN == 0:
        return value
    out = aligned_empty(value.shape, value.dtype)
    out[...] = value
    return out


class TensorSource:
    """The tensors of a (possibly split) GGUF, dequantized on request by HF name."""

    def __init__(self, info: GGUFInfo, arch: Arch):
        self.info = info
        self.arch = arch
        self.readers = [open_reader(p) for p in info.shards]
        self.tensors = {t.name: t for r in self.readers for t in r.tensors}
        self.own = families.hf_map(arch)  # Gemma 4/3n: stacked rows, split experts, omitted k/v
        self.plan = gguf_plan(arch) if self.own is not None else \
            {hf: (name, None) for hf, name in gguf_names(arch).items()}  # HF → (GGUF, row)
        self.family = arch.family

    def get(self, hf_name: str, dtype: Any) -> np.ndarray:
        """The tensor llama.cpp wrote for ``hf_name``, as HF holds it, in ``dtype``."""
        key = hf_name if hf_name.startswith("model.") else f"model.{hf_name}"
        name, row = self.plan.get(key, (None, None))
        t = self.tensors.get(name or "")
        split = split_parts(self.own, name or "") if self.own is not None else ()
        if t is None and split and all(p in self.tensors for p in split):
            return np.concatenate([dequantize(self.tensors[p], dtype) for p in split], axis=-2)
        if t is None:
            fill = self.own.omitted_fill(key[len("model."):], self.arch) if self.own is not None else None
            if fill is None:
                raise GGUFError(f"tensor {name or hf_name} missing from the GGUF")
            return fill.astype(dtype)
        value = dequantize(t, dtype, offset=norm_offset(t.name, self.family))
        return value[row] if row is not None else value

    def check_rope(self) -> None:
        """Gemma 4: the global layers' partial rotary that ``rope_freqs`` encodes is the arch's."""
        t = self.tensors.get("rope_freqs.weight")
        head = getattr(self.arch, "global_head_dim", 0)
        if t is None or not head:
            return
        got = rope_proportion(dequantize(t, np.float32), head)
        if abs(got - self.arch.global_rope_proportion) > 1e-6:  # type: ignore[attr-defined]
            raise GGUFError(f"rope_freqs rotates {got:g} of the global heads; this build reads "
                            f"{self.arch.global_rope_proportion:g} (gemma's Gemma 4)", "unsupported")  # type: ignore[attr-defined]


def dequantize(tensor: Any, dtype: Any, *, offset: float = 0.0,
               block_bytes: int = ROW_BLOCK_BYTES) -> np.ndarray:
    """One reader tensor as a float array of ``dtype`` (numpy order), ``- offset`` applied."""
    from gguf import quants

    shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))
    data = tensor.data
    out = aligned_empty(shape, dtype)
    if len(shape) == 0 or out.size == 0:
        return out
    flat_out = out.reshape(-1, shape[-1])
    rows = data.reshape(-1, data.shape[-1]) if data.ndim > 1 else data.reshape(1, -1)
    step = max(1, block_bytes // (4 * shape[-1]))
    for start in range(0, rows.shape[0], step):
        block = quants.dequantize(np.asarray(rows[start:start + step]), tensor.tensor_type)
        block = np.asarray(block, np.float32).reshape(-1, shape[-1])
        if offset:
            block = block - np.float32(offset)
        flat_out[start:start + block.shape[0]] = block.astype(dtype, copy=False)
    return out


def _dtype(param_dtype: str) -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16) if param_dtype == "bfloat16" else np.dtype(param_dtype)


def gemma_leaves(info: GGUFInfo, arch: Arch, param_dtype: str
                 ) -> Iterator[tuple[tuple[str, ...], np.ndarray]]:
    """(gemma path, numpy value) for each leaf, one at a time (see the module doc)."""
    from adapters_lib.models.hf import leaf_plan

    source = TensorSource(info, arch)
    source.check_rope()
    dtype = _dtype(param_dtype)
    for path, names, convert in leaf_plan(arch):
        value = aligned(np.asarray(convert(*(source.get(n, dtype) for n in names))))
        yield path, value
        del value  # before the next tensor is read: the host holds one at a time


def load_gguf_params(info: GGUFInfo, arch: Arch, param_dtype: str,
                     sharding: Callable[..., Any]) -> dict[str, Any]:
    """The nested gemma params tree, each leaf placed by ``sharding(key_path, sds)``; the
    converted leaves come from ``converted_cache`` when this file was converted before."""
    import jax

    from adapters_lib.models import converted_cache

    tree: dict[str, Any] = {}
    leaves = converted_cache.leaves(list(info.shards or (info.path,)), param_dtype,
                                    lambda: gemma_leaves(info, arch, param_dtype), label=info.path.name)
    for path, value in leaves:
        # a cached leaf is memory-mapped copy-on-write: the CPU device adopts its pages
        keys = tuple(jax.tree_util.DictKey(p) for p in path)
        placed = jax.device_put(value, sharding(keys, jax.ShapeDtypeStruct(value.shape,
                                                                            value.dtype)))
        del value
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = placed
    return tree


def export_hf_from_gguf(info: GGUFInfo, arch: Arch, out: Path, *, dtype: str = "float32",
                        tokenizer: str | Path | None = None,
                        max_shard_bytes: int = 5 << 30) -> Path:
    """Write the dequantized weights as an HF ``Gemma{2,3}ForCausalLM`` folder."""
    import shutil

    from adapters_lib.models.families import hf_config_for
    from adapters_lib.models.hf import hf_shapes, save_hf

    source = TensorSource(info, arch)
    np_dtype = _dtype(dtype)
    # a row-padded tensor (Gemma 3n's per-layer table) is cut back to HF's rows
    tensors = {name: source.get(name, np_dtype)[: shape[0]] for name, shape in hf_shapes(arch).items()}
    out = Path(out)
    save_hf(out, tensors, hf_config_for(arch, dtype=dtype), max_shard_bytes=max_shard_bytes)
    if tokenizer:
        shutil.copy(tokenizer, out / "tokenizer.model")
    return out
