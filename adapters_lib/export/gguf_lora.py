"""The adapter alone as llama.cpp's LoRA-adapter GGUF (``--format gguf-lora``).

What ``convert_lora_to_gguf.py`` writes for a PEFT adapter of a Gemma model, applied at load
by ``llama-cli --lora``, LM Studio and Ollama's ``ADAPTER``:

- ``general.architecture`` = the family (llama.cpp refuses an adapter of another
  architecture), ``general.type = adapter``, ``adapter.type = lora``,
  ``adapter.lora.alpha`` (llama.cpp scales by ``alpha / rank``, the rank being ``lora_b``'s
  inner size: the workbench's ``alpha / rank`` exactly); no tokenizer, no hyper-parameters;
- per adapted weight ``blk.N.<tensor>.weight``: ``….weight.lora_a`` = PEFT's ``lora_A``
  (numpy ``(r, in)``, GGUF ``ne = [in, r]``) and ``….weight.lora_b`` = ``lora_B``
  (``(out, r)``, ``ne = [r, out]``). llama.cpp computes ``W·x + s · B·(A·x)`` and checks
  ``a.ne[0] == W.ne[0]``, ``b.ne[1] == W.ne[1]``, ``a.ne[1] == b.ne[0]``.

The PEFT tensors (``export.peft.adapter_tensors``) already carry HF's head order, which is
llama.cpp's for Gemma (no q/k permutation).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adapters_lib.config import LoraSpec
from adapters_lib.export import gguf_meta
from adapters_lib.export.gguf import GGML_TYPES, add_tensor
from adapters_lib.models.families import Arch

LORA_QUANTS = ("f32", "f16", "bf16", "q8_0")
_PEFT = re.compile(r"^base_model\.model\.model\.layers\.(\d+)\.(.+)\.lora_([AB])\.weight$")


def lora_name(peft_name: str) -> str:
    """``base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight`` →
    ``blk.3.attn_q.weight.lora_a``."""
    from adapters_lib.models.gguf import hf_name

    m = _PEFT.match(peft_name)
    if m is None:
        raise ValueError(f"not a PEFT LoRA tensor name: {peft_name}")
    layer, module, which = m.groups()
    hf = f"model.layers.{layer}.{module}.weight"
    for short in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
        if hf_name(f"blk.{layer}.{short}.weight") == hf:
            return f"blk.{layer}.{short}.weight.lora_{which.lower()}"
    raise ValueError(f"no llama.cpp tensor for {peft_name}")


def lora_tensors(lora_tree: Mapping[str, Any]) -> dict[str, Any]:
    """GGUF name → array for every adapter matrix of our LoRA tree."""
    from adapters_lib.export.peft import adapter_tensors

    return {lora_name(k): v for k, v in adapter_tensors(lora_tree).items()}


def write_gguf_lora(path: str | Path, lora_tree: Mapping[str, Any], spec: LoraSpec, arch: Arch,
                    *, quant: str = "f32", name: str = "") -> dict[str, Any]:
    """Write the adapter GGUF; returns what was written."""
    import gguf

    gguf_meta.check_arch(arch)
    path = Path(path)
    writer = gguf.GGUFWriter(path, arch.family)
    gguf_meta.add_general(writer, name=name or f"{arch.family} LoRA", kind="adapter")
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(spec.alpha))
    types: dict[str, int] = {}
    for tname, value in sorted(lora_tensors(lora_tree).items()):
        written = add_tensor(writer, tname, value, GGML_TYPES[quant])
        types[written] = types.get(written, 0) + 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {"file": str(path), "bytes": path.stat().st_size, "tensor_types": dict(sorted(types.items()))}
