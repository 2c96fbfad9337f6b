"""The Hugging Face tensor names and shapes of an ``Arch`` (no numpy: the catalog checks a
GGUF's tensor table against them without importing it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from adapters_lib.models.families import Arch, family, hf_map

_PREFIXES = ("model.language_model.", "language_model.model.", "model.")


def hf_prefix(names: Iterator[str] | list[str]) -> str:
    """The prefix before ``embed_tokens.weight`` (``model.`` for a CausalLM)."""
    names = list(names)
    for prefix in _PREFIXES:
        if f"{prefix}embed_tokens.weight" in names:
            return prefix
    raise KeyError("embed_tokens.weight")


_NORMS = family("gemma3").hf_norms
"""gemma norm → HF norm name (the Gemma 2/3 layout's; each family's record holds its own)."""


def hf_shapes(arch: Arch) -> dict[str, tuple[int, ...]]:
    """The HF tensor shapes (``model.`` prefix) of ``arch``."""
    own = hf_map(arch)  # Gemma 4, 3n: the family's own map
    if own is not None:
        return {f"model.{k}": v for k, v in own.hf_shapes(arch).items()}
    n, k, h, d, f = arch.num_heads, arch.num_kv_heads, arch.head_dim, arch.embed_dim, arch.hidden_dim
    out = {"model.embed_tokens.weight": (arch.vocab_size, d), "model.norm.weight": (d,)}
    norms = family(arch.family).hf_norms
    for i in range(arch.num_layers):
        p = f"model.layers.{i}."
        for theirs in norms.values():
            out[f"{p}{theirs}.weight"] = (d,)
        out[f"{p}self_attn.q_proj.weight"] = (n * h, d)
        out[f"{p}self_attn.k_proj.weight"] = (k * h, d)
        out[f"{p}self_attn.v_proj.weight"] = (k * h, d)
        out[f"{p}self_attn.o_proj.weight"] = (d, n * h)
        if arch.use_qk_norm:
            out[f"{p}self_attn.q_norm.weight"] = (h,)
            out[f"{p}self_attn.k_norm.weight"] = (h,)
        out[f"{p}mlp.gate_proj.weight"] = (f, d)
        out[f"{p}mlp.up_proj.weight"] = (f, d)
        out[f"{p}mlp.down_proj.weight"] = (d, f)
    return out


def check_hf_shapes(arch: Arch, shapes: Mapping[str, tuple[int, ...]]) -> str | None:
    """None when the HF tensors fit ``arch``; else a one-line reason."""
    try:
        prefix = hf_prefix(shapes)
    except KeyError:
        return "no embed_tokens.weight tensor: not a Gemma causal LM"
    omitted = _omitted(arch)
    for name, shape in hf_shapes(arch).items():
        theirs = shapes.get(prefix + name[len("model."):])
        if theirs is None and omitted(name[len("model."):]):
            continue  # a KV-shared layer's k/v that transformers' save drops
        if theirs is None:
            return f"tensor {prefix + name[len('model.'):]} missing"
        if tuple(theirs) != shape:
            return (f"tensor {prefix + name[len('model.'):]} has shape {tuple(theirs)}, "
                    f"config.json implies {shape}")
    return None


def _omitted(arch: Arch):
    """name → True when the checkpoint may omit that tensor (the KV-shared layers' k/v)."""
    own = hf_map(arch)
    if own is None:
        return lambda name: False
    return lambda name: own.omitted_fill(name, arch) is not None
