"""The merged model as a GGUF file for llama.cpp, Ollama and LM Studio (``--format gguf``).

Written with the ``gguf`` package's ``GGUFWriter`` (llama.cpp's own writer) the way
``convert_hf_to_gguf.py`` writes a Gemma 2/3: the fused gemma tree goes through the project's
gemma → HF map (``hf_convert.gemma_to_hf``), HF names become llama.cpp's
(``models.gguf.gguf_arch.gguf_names``), every RMSNorm weight is stored as ``1 + w``
(``gguf_arch.norm_offset``; gemma and HF multiply by ``1 + w``, llama.cpp by the weight), and
the metadata is ``gguf_meta``'s. Tensor types follow the converter: vectors and norms F32,
matrices in the chosen type (``--quant``), F16 where a row does not fill the type's blocks.

``--quant base`` (a run whose base model is a GGUF): tensors the fine-tune left as they were
are copied from the base file byte for byte, in their own types (Q4_K, Q6_K…); the changed
ones are written in the base tensor's type when ``gguf`` can write it (F32/F16/BF16/Q8_0/
Q5_x/Q4_x), else Q8_0. gguf 0.19's Python quantizer cannot write the K-quants
(``formats.K_QUANTS_NOTE``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from adapters_lib.errors import WorkbenchError
from adapters_lib.export import gguf_meta
from adapters_lib.models.families import Arch

GGML_TYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0", "q5_1": "Q5_1",
              "q5_0": "Q5_0", "q4_1": "Q4_1", "q4_0": "Q4_0"}
"""``--quant`` → the GGML type of the matrices."""
FILE_TYPES = {"f32": "ALL_F32", "f16": "MOSTLY_F16", "bf16": "MOSTLY_BF16", "q8_0": "MOSTLY_Q8_0",
              "q5_1": "MOSTLY_Q5_1", "q5_0": "MOSTLY_Q5_0", "q4_1": "MOSTLY_Q4_1",
              "q4_0": "MOSTLY_Q4_0"}
WRITABLE = frozenset(GGML_TYPES.values())
"""GGML types the ``gguf`` package can write (the rest it only reads)."""


def ggml_type(name: str) -> Any:
    import gguf

    return gguf.GGMLQuantizationType[name]


def encode(value: np.ndarray, kind: str) -> tuple[np.ndarray, str]:
    """``value`` (f32) in GGML type ``kind``; F16 when its rows do not fill the type's blocks
    (as the converter falls back). Returns (data, type written)."""
    import gguf

    qtype = ggml_type(kind)
    if kind in ("F32", "F16"):
        return gguf.quants.quantize(value, qtype), kind
    block, _ = gguf.GGML_QUANT_SIZES[qtype]
    if value.shape[-1] % block:
        return value.astype(np.float16), "F16"
    try:
        return gguf.quants.quantize(value, qtype), kind
    except gguf.QuantError:
        return value.astype(np.float16), "F16"


def add_tensor(writer: Any, name: str, value: np.ndarray, kind: str) -> str:
    data, written = encode(np.ascontiguousarray(value, np.float32), kind)
    writer.add_tensor(name, data, raw_dtype=ggml_type(written))
    return written


def gguf_tensors(params: Mapping[str, Any], arch: Arch) -> dict[str, np.ndarray]:
    """GGUF name → f32 tensor (HF layout, llama.cpp's ``1 + w`` norms applied)."""
    from adapters_lib.models.gguf import gguf_names, norm_offset
    from adapters_lib.models.hf import hf_convert

    names = gguf_names(arch)
    out: dict[str, np.ndarray] = {}
    for hf_name, value in hf_convert.gemma_to_hf(params, arch=arch).items():
        name = names[hf_name]
        out[name] = np.asarray(value, np.float32) + np.float32(norm_offset(name))
    return out


def is_vector(name: str, value: np.ndarray) -> bool:
    return value.ndim <= 1 or name.endswith("_norm.weight")


def write_gguf(path: str | Path, params: Mapping[str, Any], arch: Arch, *, quant: str,
               tokenizer: str | Path | None = None, base_gguf: str | Path | None = None,
               base_params: Mapping[str, Any] | None = None, name: str = "",
               finetune: str = "") -> dict[str, Any]:
    """Write the fused ``params`` of ``arch`` as one GGUF file; returns what was written.

    ``tokenizer``: the SentencePiece model (used when there is no ``base_gguf``, whose
    tokenizer keys are copied instead). ``quant = "base"`` needs ``base_gguf`` and the
    ``base_params`` it was loaded as (to tell the changed tensors from the untouched ones).
    """
    import gguf

    gguf_meta.check_arch(arch)
    path = Path(path)
    tensors = gguf_tensors(params, arch)
    reader = _base_reader(base_gguf) if base_gguf else None
    if quant == "base":
        if reader is None or base_params is None:
            raise WorkbenchError("--quant base needs a run whose base model is a GGUF",
                                 where="--quant", hint="choose f32, bf16, f16 or q8_0")
        base = gguf_tensors(base_params, arch)
        ftype = reader.fields.get("general.file_type")
        file_type = int(ftype.contents()) if ftype is not None else None
    else:
        base = {}
        file_type = int(gguf.LlamaFileType[FILE_TYPES[quant]])
    writer = gguf.GGUFWriter(path, arch.family)
    total = sum(int(v.size) for v in tensors.values())
    gguf_meta.add_general(writer, name=name or f"{arch.family} fine-tune", finetune=finetune,
                          size_label=gguf.size_label(total, 0, 0, 0), file_type=file_type)
    context = gguf_meta.base_context_length(reader) if reader is not None else None
    gguf_meta.add_arch_keys(writer, arch, context=context)
    if reader is not None:
        gguf_meta.copy_tokenizer_keys(writer, reader, arch.vocab_size)
    elif tokenizer:
        gguf_meta.add_vocab(writer, gguf_meta.vocab_from_sentencepiece(tokenizer, arch.vocab_size))
    else:
        raise WorkbenchError("the model has no tokenizer.model to write into the GGUF",
                             where="--format gguf", hint="set [model] tokenizer in the run")
    types: dict[str, int] = {}
    copied = 0
    source = {t.name: t for t in reader.tensors} if reader is not None else {}
    for tname, value in tensors.items():
        if quant == "base" and np.array_equal(value, base[tname]) and tname in source:
            t = source[tname]
            writer.add_tensor(tname, t.data, raw_dtype=t.tensor_type)
            written, copied = t.tensor_type.name, copied + 1
        elif is_vector(tname, value):
            written = add_tensor(writer, tname, value, "F32")
        elif quant == "base":
            kind = source[tname].tensor_type.name if tname in source else "Q8_0"
            written = add_tensor(writer, tname, value, kind if kind in WRITABLE else "Q8_0")
        else:
            written = add_tensor(writer, tname, value, GGML_TYPES[quant])
        types[written] = types.get(written, 0) + 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {"file": str(path), "bytes": path.stat().st_size, "tensor_types": dict(sorted(types.items())),
            "copied_from_base": copied}


def _base_reader(path: str | Path) -> Any:
    from adapters_lib.models.gguf import GGUFError, open_reader

    try:
        return open_reader(path)
    except GGUFError as e:
        raise WorkbenchError(f"the base GGUF cannot be read: {e.reason}", where=str(path)) from None
