"""Gemma families: one module per family (``gemma2``, ``gemma3``, ``gemma3n``, ``gemma4``), each
a ``Family`` record (``arch.Family``): its sizes, HF and GGUF name maps and norm convention,
LoRA target table, chat template, sharding rules and memory terms. This package keeps the
table (``FAMILY``, ``family(name)``) and what works across families: the architecture from a
checkpoint's shapes (``from_shapes``) or its ``config.json`` (``hf_config``), the gemma model
class (``model_class``) and tokenizer.

``Arch`` is the workbench's plain description of a Gemma text model (no jax import): the
catalog builds one from a checkpoint's array shapes or its ``config.json`` without loading
weights; the loaders turn it into a ``gm.nn.config.TransformerConfig`` (``transformer_config``)
and a ``gm.nn.Transformer`` subclass (``model_class``).

The ``KNOWN`` table mirrors gemma's own configs (``gm.nn.Gemma2_2B``, ``Gemma3_1B``, …;
tests/test_catalog.py checks it against them) and names the size. Shapes that match no
known size still load when a ``config.json`` gives the hyper-parameters shapes cannot
(attention pattern, window, RoPE, soft-caps).

A new family: see docs/architecture.md, "Where a new model family goes".
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import re
from collections.abc import Mapping
from typing import Any

from adapters_lib.models.families import gemma2, gemma3, gemma3n, gemma4
from adapters_lib.models.families.arch import (  # noqa: F401 - the package's public names
    FAMILIES,
    Arch,
    ArchError,
    ChatTemplate,
    Family,
    LoraSlot,
    arch_from_transformer_config,
    kv_sharing_patterns,
    layer_pattern,
)
from adapters_lib.models.families.hf_config import (  # noqa: F401 - importable from here
    _HF_DEFAULTS,
    _HF_FAMILY,
    from_hf_config,
    hf_config_for,
    hf_family,
)

FAMILY: dict[str, Family] = {m.FAMILY.name: m.FAMILY for m in (gemma2, gemma3, gemma3n, gemma4)}
"""name → record, for every family the workbench knows (loaded or only listed)."""


def family(name: str) -> Family:
    """The record of ``name`` (an unknown name gets Gemma 3's: the demo's family)."""
    return FAMILY.get(name, gemma3.FAMILY)


_pattern = layer_pattern

# (family, size) → (gemma class name, Arch). Sizes follow the release names.
KNOWN: dict[tuple[str, str], tuple[str, Arch]] = {
    (f.name, size): known for f in FAMILY.values() for size, known in f.known.items()}


def match_known(arch: Arch) -> tuple[str, str] | None:
    """(size, gemma class name) of a known config with the same dimensions, else None."""
    for (fam, size), (name, known) in KNOWN.items():
        if fam == arch.family and known.dims() == arch.dims():
            return size, name
    return None


def size_of(arch: Arch) -> str:
    known = match_known(arch)
    return known[0] if known else "custom"


# --------------------------------------------------------------------------- tables across families


@functools.cache
def layer_types(role: str) -> tuple[type, ...]:
    """The library's classes that play ``role`` (``einsum``, ``attention``) in any family that
    loads: what LoRA and the training attention look for (imports gemma)."""
    out: list[type] = []
    for fam in FAMILY.values():
        if not fam.loads:
            continue
        for dotted in fam.layer_classes.get(role, ()):
            module, _, name = dotted.partition(":")
            cls = getattr(importlib.import_module(module), name)
            if cls not in out:
                out.append(cls)
    return tuple(out)


def einsum_targets() -> dict[str, dict[str, int | None]]:
    """Weight kind → {LoRA target: slot}, over every family (the kinds share their meaning)."""
    out: dict[str, dict[str, int | None]] = {}
    for fam in FAMILY.values():
        for kind, targets in fam.einsum_targets().items():
            out.setdefault(kind, {}).update(targets)
    return out


def sharding_rules() -> dict[tuple[str, int], tuple[Any, ...]]:
    """(weight kind, rank) → mesh axes per dim, over every family."""
    out: dict[tuple[str, int], tuple[Any, ...]] = {}
    for fam in FAMILY.values():
        out.update(fam.sharding)
    return out


def lora_axes() -> dict[str, tuple[Any, Any]]:
    """Weight kind → (A's in-dim axis, B's out-dim axis), over every family."""
    out: dict[str, tuple[Any, Any]] = {}
    for fam in FAMILY.values():
        out.update(fam.lora_axes)
    return out


# --------------------------------------------------------------------------- from shapes


def normalise_key(key: str) -> str:
    """A param path in gemma's nested form: ``layer_0/attn/q_einsum/w``.

    Accepts the nested layout and the flat release layout (``transformer/layer_0/attn/q_einsum``
    + ``w``; the MLP weights carry a ``w`` there and none in the nested tree).
    """
    key = key.replace(".", "/")
    if key.startswith("transformer/"):
        key = key[len("transformer/"):]
    if re.search(r"/mlp/(gating_einsum|linear)/w$", key):
        key = key[:-2]
    return key


def from_shapes(shapes: Mapping[str, tuple[int, ...]], family_hint: str = "") -> Arch:
    """Infer the architecture from param shapes (keys as ``normalise_key`` gives).

    Shape-only inference knows the dimensions but not the attention pattern, window or
    RoPE: it returns the known config with those dimensions, or raises ``ArchError``.
    """
    shapes = {normalise_key(k): tuple(v) for k, v in shapes.items()}
    embed = shapes.get("embedder/input_embedding")
    if embed is None or len(embed) != 2:
        raise ArchError("no embedder/input_embedding array: not a Gemma checkpoint", "unsupported")
    vocab, d = embed
    layers = sum(1 for k in shapes if re.fullmatch(r"layer_\d+/pre_attention_norm/scale", k))
    if layers == 0:
        raise ArchError("no transformer layers found in the checkpoint", "unsupported")
    q = shapes.get("layer_0/attn/q_einsum/w")
    kv = shapes.get("layer_0/attn/kv_einsum/w")
    qkv = shapes.get("layer_0/attn/qkv_einsum/w")
    gating = shapes.get("layer_0/mlp/gating_einsum")
    try:
        if qkv is not None:
            _, n, _, h = qkv
            k = n
        else:
            n, _, h = q
            _, k, _, _ = kv
        _, a, b = gating
    except (TypeError, ValueError):
        raise ArchError("attention/MLP arrays missing or of unexpected rank", "unsupported") from None
    transpose = b == d
    f = a if transpose else b
    has_qk_norm = "layer_0/attn/_query_norm/scale" in shapes
    has_post = "layer_0/post_ffw_norm/scale" in shapes
    if not has_post:
        raise ArchError("a Gemma 1 layout (no post-norms): only Gemma 2 and 3 load here",
                        "unsupported", "other")
    name = "gemma3" if has_qk_norm else "gemma2"
    for (fam, _size), (_, known) in KNOWN.items():
        if fam == name and known.dims() == (layers, d, f, n, h, k):
            return dataclasses.replace(known, vocab_size=vocab, transpose_gating=transpose)
    raise ArchError(
        f"shapes match no known {name} config ({layers} layers, embed {d}, mlp {f}, "
        f"{n} heads × {h}, {k} kv); put a config.json beside the checkpoint", "unsupported", name)


def shape_param_count(shapes: Mapping[str, tuple[int, ...]]) -> int:
    total = 0
    for shape in shapes.values():
        n = 1
        for s in shape:
            n *= int(s)
        total += n
    return total


# --------------------------------------------------------------------------- gemma model


def family_of_config(config: Any) -> Family:
    """The family a gemma config (or a mapping of its fields with ``family``) belongs to."""
    if isinstance(config, Mapping):
        return family(str(config.get("family") or "gemma3"))
    for fam in (gemma4, gemma3n):
        if type(config).__module__.startswith(f"gemma.gm.nn.{fam.FAMILY.name}"):
            return fam.FAMILY
    return family(str(getattr(config, "family", "") or "gemma3"))


def lora_per_rank(arch: Arch) -> dict[str, int]:
    """Target → adapter parameters per unit of rank, for every target the family offers (the
    count is linear in the rank): ``rank · Σ`` over the chosen targets is the run's trainable
    count, what Configure shows before an estimate comes (``Family.lora_shapes``: Gemma 4's
    global layers and expert bank, no adapters on KV-shared k/v; else Gemma 2/3's closed form)."""
    from adapters_lib.lora.shapes import lora_param_count

    fam = family(arch.family)
    fields = getattr(arch, "transformer_config_fields", None)
    out: dict[str, int] = {}
    for target in fam.lora_targets:
        if fam.lora_shapes is not None and fields is not None:
            n = sum(_numel(shape) for _, shape in fam.lora_shapes(fields(), 1, (target,)))
        elif target == "experts":
            n = 0
        else:
            n = lora_param_count({"embed_dim": arch.embed_dim, "hidden_dim": arch.hidden_dim,
                                  "num_heads": arch.num_heads, "head_dim": arch.head_dim,
                                  "num_kv_heads": arch.num_kv_heads, "num_layers": arch.num_layers}, 1, (target,))
        if n:
            out[target] = int(n)
    return out


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def hf_map(arch: Arch) -> Any:
    """The family's own HF tensor map module (``Family.hf_map``), or None for Gemma 2/3's."""
    name = family(arch.family).hf_map
    return importlib.import_module(name) if name else None


def arch_of_config(config: Any, fam: str) -> Arch:
    """An ``Arch`` from a gemma model config of any family (the inverse of ``transformer_config``)."""
    if fam == "gemma4":
        return gemma4.arch_from_config(config)
    if fam == "gemma3n":
        return gemma3n.arch_from_config(config)
    return arch_from_transformer_config(config, fam)


@functools.cache
def model_class(arch: Arch) -> type:
    """A gemma model class carrying ``arch`` (one class per arch, reused): a
    ``gm.nn.Transformer`` subclass, ``gm.nn.gemma4``'s ``Transformer`` for Gemma 4, its
    ``Gemma3nTransformer`` for Gemma 3n."""
    from gemma import gm

    known = match_known(arch)
    name = known[1] if known and known[1] != "demo" else f"{arch.family.capitalize()}Custom"
    if arch.family == "gemma3n":
        return gemma3n.model_class(arch, name)  # type: ignore[arg-type]
    if arch.family == "gemma4":
        from gemma.gm.nn.gemma4 import _transformer

        class Model4(_transformer.Transformer):  # type: ignore[misc, valid-type]
            config: Any = arch.transformer_config()
            INFO = _transformer.ModelInfo(tokenizer_version=4)
            # which layer's k/v each KV-shared layer reads: keras-hub's rule, not gemma's
            kv_cache_sharing_patterns = kv_sharing_patterns(arch.kv_reads())  # type: ignore[attr-defined]

            if getattr(arch, "moe", False):
                def __call__(self, *args, **kwargs):
                    # route on the raw residual, as HF, keras-hub and llama.cpp do (moe_routing)
                    from flax import linen as nn

                    from adapters_lib.models import moe_routing

                    with nn.intercept_methods(moe_routing.interceptor):
                        return super().__call__(*args, **kwargs)

        Model4.__name__ = Model4.__qualname__ = name
        return Model4

    class Model(gm.nn.Transformer):  # type: ignore[misc, valid-type]
        config: gm.nn.config.TransformerConfig = arch.transformer_config()
        INFO = gm.nn.config.ModelInfo(tokenizer_version=arch.tokenizer_version)

    Model.__name__ = Model.__qualname__ = name
    return Model


def tokenizer_for(arch_family: str, path: str) -> Any:
    """gemma's tokenizer for the family, over a local ``tokenizer.model``. gemma's classes fix
    BOS/EOS/PAD at 2/1/0; a vocabulary that holds ``<bos>``/``<eos>``/``<pad>`` elsewhere (one
    trained for a keras-hub preset) gets a subclass with its own ids (``tokenize.special_ids``,
    keras-hub's rule), so every user of ``special_tokens`` reads the ids keras-hub uses."""
    from gemma import gm

    from adapters_lib.data.tokenize import load_sentencepiece, special_ids

    cls = getattr(gm.text, family(arch_family).tokenizer_class)
    if not path or "://" in str(path):
        return cls(path=path)
    st = cls.special_tokens
    bos, eos, pad = special_ids(load_sentencepiece(path))
    if (bos, eos, pad) == (st.BOS, st.EOS, st.PAD):
        return cls(path=path)
    ids = {**{m.name: int(m.value) for m in st}, "BOS": bos, "EOS": eos, "PAD": pad}
    own = gm.text.SpecialTokens(f"{st.__name__}Own", ids)
    return type(cls.__name__, (cls,), {"special_tokens": own})(path=path)
