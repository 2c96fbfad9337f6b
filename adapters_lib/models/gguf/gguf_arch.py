"""A GGUF's architecture, from its metadata alone, and llama.cpp's Gemma conventions undone.

``arch_from_gguf(info) -> Arch`` reads ``general.architecture`` and the ``<arch>.*`` keys
(never the file name). Gemma 2, 3, 3n and 4 load (Gemma 4 and 3n: ``gguf_arch_e``); any other
architecture is refused with an ``ArchError`` that names what the file is
(``a GGUF of Llama 3.2 1B (llama)``).

llama.cpp's converter (``convert_hf_to_gguf.py``) writes Gemma with its own conventions,
undone here:
- every RMSNorm weight is stored as ``1 + w`` (gemma and HF multiply by ``1 + w``): subtract 1
  (``norm_offset``; q/k norms included);
- tensor names are llama.cpp's (``blk.N.attn_q``…): ``HF_NAMES`` maps them to HF names, which
  the project's HF → gemma map (``hf_convert.leaf_plan``) turns into the gemma tree; q/k
  are not permuted for Gemma, so no un-permutation;
- the Gemma 3 attention pattern (5 local : 1 global) and the local RoPE base (10 000) are
  not in the file (llama.cpp hard-codes them); ``query_pre_attn_scalar`` is the head dim
  except for the 27B sizes, where llama.cpp (like gemma) scales by ``embed_dim / heads``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from adapters_lib.models import families
from adapters_lib.models.families import Arch, ArchError
from adapters_lib.models.gguf.gguf_info import GGUFInfo

SUPPORTED = ("gemma2", "gemma3", "gemma3n", "gemma4")  # GGUF arches this build maps

# llama.cpp's names for architectures a user may hold, for the refusal line
_KNOWN_NAMES = {"gemma": "Gemma 1", "gemma3n": "Gemma 3n", "gemma4": "Gemma 4",
                "gemma-embedding": "EmbeddingGemma", "llama": "Llama", "qwen2": "Qwen 2",
                "qwen3": "Qwen 3", "phi3": "Phi-3", "mistral3": "Mistral", "t5": "T5"}

# llama.cpp's tensor names ↔ HF's, per family (``Family.gguf_top`` / ``gguf_block``)
_BLOCK = families.family("gemma3").gguf_block
_TOP = families.family("gemma3").gguf_top
_BLK = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.weight$")


def hf_name(gguf_name: str) -> str | None:
    """The HF tensor name of a llama.cpp Gemma tensor name (None: not a text-model tensor)."""
    if gguf_name in _TOP:
        return _TOP[gguf_name]
    m = _BLK.match(gguf_name)
    if m and m.group(2) in _BLOCK:
        return f"model.layers.{m.group(1)}.{_BLOCK[m.group(2)]}.weight"
    return None


def gguf_names(arch: Arch) -> dict[str, str]:
    """HF name → GGUF name for every tensor ``arch`` needs (Gemma 4/3n: ``gguf_arch_e.gguf_plan``,
    where a row of a stacked tensor names the whole tensor)."""
    if families.hf_map(arch) is not None:
        from adapters_lib.models.gguf.gguf_arch_e import gguf_plan

        return {hf: name for hf, (name, _) in gguf_plan(arch).items()}
    fam = families.family(arch.family)
    out = {v: k for k, v in fam.gguf_top.items()}
    for i in range(arch.num_layers):
        for ours, theirs in fam.gguf_block.items():
            if not arch.use_qk_norm and ours in ("attn_q_norm", "attn_k_norm"):
                continue
            out[f"model.layers.{i}.{theirs}.weight"] = f"blk.{i}.{ours}.weight"
    return out


def norm_offset(gguf_name: str, family: str = "gemma3") -> float:
    """What llama.cpp added to a Gemma tensor: the family's offset (Gemma 2/3: 1) for every
    RMSNorm weight, else 0."""
    return families.family(family).gguf_norm_offset if gguf_name.endswith("norm.weight") else 0.0


def describe(info: GGUFInfo) -> str:
    """What the file is, in words: ``a GGUF of Llama 3.2 1B Instruct (llama)``."""
    arch = info.architecture
    name = str(info.get("general.name") or "").strip()
    kind = _KNOWN_NAMES.get(arch, arch)
    what = name if name and kind.lower().split()[0] in name.lower() else \
        f"{kind} {name}".strip() if name else kind
    return f"a GGUF of {what} (general.architecture = {arch})"


def family_of(info: GGUFInfo) -> str:
    arch = info.architecture
    if arch in SUPPORTED:
        return arch
    if arch.startswith("gemma4"):
        return "gemma4"
    if arch.startswith("gemma3"):
        return "gemma3"
    return "other"


def _int(info: GGUFInfo, key: str, default: int | None = None) -> int:
    value = info.get(key)
    if value is None:
        if default is None:
            raise ArchError(f"GGUF metadata lacks {key.replace('{arch}', info.architecture)}",
                            "unreadable", family_of(info))
        return default
    if isinstance(value, list):  # per-layer arrays (newer llama.cpp): all alike for Gemma 2/3
        if len(set(value)) != 1:
            raise ArchError(f"{key.replace('{arch}', info.architecture)} differs per layer "
                            f"({sorted(set(value))[:4]}): gemma cannot express it",
                            "unsupported", family_of(info))
        value = value[0]
    return int(value)


def _float(info: GGUFInfo, key: str) -> float | None:
    value = info.get(key)
    return None if value is None else float(value)


def arch_from_gguf(info: GGUFInfo) -> Arch:
    """The gemma architecture of a Gemma 2/3/3n/4 GGUF (see the module doc; Gemma 4 and 3n:
    ``gguf_arch_e``); raises ``ArchError``."""
    fam = family_of(info)
    if info.architecture not in SUPPORTED:
        raise ArchError(f"{describe(info)}: this build loads Gemma 2, 3, 3n and 4 GGUFs only",
                        "unsupported", fam)
    if fam in ("gemma3n", "gemma4"):
        from adapters_lib.models.gguf import gguf_arch_e

        arch = gguf_arch_e.FROM_GGUF[fam](info)
        problem = gguf_arch_e.check_tensors(arch, info)
        if problem:
            raise ArchError(problem, "unsupported" if "shape" in problem else "unreadable", fam)
        return arch
    embed = info.tensors.get("token_embd.weight")
    if embed is None or len(embed.shape) != 2:
        raise ArchError("no token_embd.weight tensor in the GGUF", "unreadable", fam)
    vocab, d = embed.shape
    layers = _int(info, "{arch}.block_count")
    n = _int(info, "{arch}.attention.head_count")
    k = _int(info, "{arch}.attention.head_count_kv", n)
    h = _int(info, "{arch}.attention.key_length", d // n)
    f = _int(info, "{arch}.feed_forward_length")
    if _int(info, "{arch}.embedding_length") != d:
        raise ArchError(f"embedding_length {info.get('{arch}.embedding_length')} disagrees with "
                        f"token_embd ({d})", "unreadable", fam)
    window = info.get("{arch}.attention.sliding_window")
    global_rope = _float(info, "{arch}.rope.freq_base") or (1_000_000.0 if fam == "gemma3"
                                                           else 10_000.0)
    dims = (layers, d, f, n, h, k)
    known = next((a for (kf, size), (_, a) in families.KNOWN.items()
                  if kf == fam and size != "custom" and a.dims() == dims), None)
    scalar = known.query_pre_attn_scalar if known else float(h)
    transpose = known.transpose_gating if known else True
    if fam == "gemma2":
        arch = Arch("gemma2", layers, d, f, n, h, k, vocab, _pattern(info, layers, 2),
                    int(window) if window else 4096, use_qk_norm=False,
                    transpose_gating=transpose, query_pre_attn_scalar=scalar,
                    final_logit_softcap=_float(info, "{arch}.final_logit_softcapping"),
                    attn_logit_softcap=_float(info, "{arch}.attn_logit_softcapping"),
                    local_rope=int(global_rope), global_rope=int(global_rope))
    else:
        scale = 1.0
        if str(info.get("{arch}.rope.scaling.type") or "") == "linear":
            scale = float(info.get("{arch}.rope.scaling.factor") or 1.0)
        local = _float(info, "{arch}.rope.freq_base_swa") or 10_000.0
        arch = Arch("gemma3", layers, d, f, n, h, k, vocab, _pattern(info, layers, 6),
                    int(window) if window else None, use_qk_norm=True, transpose_gating=transpose,
                    query_pre_attn_scalar=scalar,
                    final_logit_softcap=_float(info, "{arch}.final_logit_softcapping"),
                    local_rope=int(local), global_rope=int(global_rope), global_rope_scale=scale)
    problem = check_tensors(arch, info)
    if problem:
        raise ArchError(problem, "unsupported" if "shape" in problem else "unreadable", fam)
    return arch


def _pattern(info: GGUFInfo, layers: int, every: int) -> tuple[str, ...]:
    """Local/global per layer: ``sliding_window_pattern`` when the file has it, else Gemma's."""
    raw = info.get("{arch}.attention.sliding_window_pattern")
    if isinstance(raw, list) and len(raw) == layers:  # per layer: true = sliding window
        return tuple("local" if bool(x) else "global" for x in raw)
    if isinstance(raw, int) and raw > 0:
        every = raw
    if every == 2:  # Gemma 2: local, global, local, …
        return tuple("local" if i % 2 == 0 else "global" for i in range(layers))
    return tuple("global" if (i + 1) % every == 0 else "local" for i in range(layers))


def check_tensors(arch: Arch, info: GGUFInfo) -> str | None:
    """None when the file's tensors are exactly what ``arch`` needs; else one line."""
    from adapters_lib.models.hf import hf_shapes

    want = hf_shapes(arch)
    for hf, name in gguf_names(arch).items():
        t = info.tensors.get(name)
        if t is None:
            return f"tensor {name} missing from the GGUF"
        if tuple(t.shape) != tuple(want[hf]):
            return f"tensor {name} has shape {t.shape}, the metadata implies {want[hf]}"
    return None


def with_vocab(arch: Arch, vocab: int) -> Arch:
    return dataclasses.replace(arch, vocab_size=vocab)


def summary(info: GGUFInfo) -> dict[str, Any]:
    """The GGUF facts the catalog shows beside the usual entry fields."""
    return {"quant": info.quant, "tensor_types": info.tensor_types(),
            "gguf_name": info.get("general.name"), "size_label": info.get("general.size_label"),
            "context_length": info.get("{arch}.context_length"),
            "tokenizer_pieces": info.vocab_size}
