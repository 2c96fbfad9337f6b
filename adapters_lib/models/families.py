"""Gemma families and sizes: infer the architecture from shapes or an HF ``config.json``.

``Arch`` is the workbench's plain description of a Gemma text model (no jax import): the
catalog builds one from a checkpoint's array shapes or its ``config.json`` without loading
weights; the loaders turn it into a ``gm.nn.config.TransformerConfig`` (``transformer_config``)
and a ``gm.nn.Transformer`` subclass (``model_class``).

The ``KNOWN`` table mirrors gemma's own configs (``gm.nn.Gemma2_2B``, ``Gemma3_1B``, …;
tests/test_catalog.py checks it against them) and names the size. Shapes that match no
known size still load when a ``config.json`` gives the hyper-parameters shapes cannot
(attention pattern, window, RoPE, soft-caps).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FAMILIES = ("gemma2", "gemma3", "gemma4", "other")


class ArchError(Exception):
    """The checkpoint is not a Gemma text model this build can load: ``status`` + ``reason``."""

    def __init__(self, reason: str, status: str = "unsupported", family: str = "other"):
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.family = family


@dataclass(frozen=True)
class Arch:
    """The shape and hyper-parameters of a Gemma 2/3 text transformer."""

    family: str
    num_layers: int
    embed_dim: int
    hidden_dim: int
    num_heads: int
    head_dim: int
    num_kv_heads: int
    vocab_size: int
    attention: tuple[str, ...]
    """Per layer: "local" (sliding window) or "global"."""
    sliding_window: int | None
    use_qk_norm: bool
    transpose_gating: bool
    query_pre_attn_scalar: float
    """HF convention: queries are scaled by ``query_pre_attn_scalar ** -0.5``."""
    final_logit_softcap: float | None = None
    attn_logit_softcap: float | None = None
    local_rope: int = 10_000
    global_rope: int = 10_000
    local_rope_scale: float = 1.0
    global_rope_scale: float = 1.0

    @property
    def tokenizer_version(self) -> int:
        return 2 if self.family == "gemma2" else 3

    def param_count(self) -> int:
        d, f, n, h, k = self.embed_dim, self.hidden_dim, self.num_heads, self.head_dim, self.num_kv_heads
        attn = n * d * h * 2 + 2 * k * d * h if k != n else 4 * n * d * h
        per_layer = attn + 3 * f * d + 4 * d + (2 * h if self.use_qk_norm else 0)
        return self.vocab_size * d + d + self.num_layers * per_layer

    def dims(self) -> tuple[int, int, int, int, int, int]:
        """What identifies a size (vocab aside: HF pads it differently)."""
        return (self.num_layers, self.embed_dim, self.hidden_dim, self.num_heads,
                self.head_dim, self.num_kv_heads)

    def describe(self) -> str:
        return (f"{self.num_layers} layers, embed {self.embed_dim}, mlp {self.hidden_dim}, "
                f"{self.num_heads} heads × {self.head_dim} ({self.num_kv_heads} kv), "
                f"vocab {self.vocab_size}")

    def transformer_config(self) -> Any:
        """The ``gm.nn.config.TransformerConfig`` (imports gemma)."""
        from gemma import gm

        cfg = gm.nn.config
        q_norm = cfg.QueryPreAttentionNormalisation
        if self.query_pre_attn_scalar == self.head_dim:
            qpa = q_norm.BY_ONE_OVER_SQRT_HEAD_DIM
        elif self.query_pre_attn_scalar == self.embed_dim // self.num_heads:
            qpa = q_norm.BY_ONE_OVER_SQRT_EMBED_DIM_DIV_NUM_HEADS
        else:
            raise ArchError(
                f"query_pre_attn_scalar {self.query_pre_attn_scalar} is neither head_dim "
                f"({self.head_dim}) nor hidden_size/heads: gemma cannot express it")
        kinds = {"local": cfg.AttentionType.LOCAL_SLIDING, "global": cfg.AttentionType.GLOBAL}
        return cfg.TransformerConfig(
            num_embed=self.vocab_size,
            embed_dim=self.embed_dim,
            hidden_dim=self.hidden_dim,
            num_heads=self.num_heads,
            head_dim=self.head_dim,
            num_kv_heads=self.num_kv_heads,
            final_logit_softcap=self.final_logit_softcap,
            use_post_attn_norm=True,
            use_post_ffw_norm=True,
            attention_types=tuple(kinds[a] for a in self.attention),
            query_pre_attn_norm=qpa,
            attn_logits_soft_cap=self.attn_logit_softcap,
            sliding_window_size=self.sliding_window,
            transpose_gating_einsum=self.transpose_gating,
            use_qk_norm=self.use_qk_norm,
            local_base_frequency=int(self.local_rope),
            global_base_frequency=int(self.global_rope),
            local_scale_factor=self.local_rope_scale,
            global_scale_factor=self.global_rope_scale,
            vision_encoder=None,
        )


def _pattern(kind: str, num_layers: int) -> tuple[str, ...]:
    if kind == "gemma2":
        return tuple("local" if i % 2 == 0 else "global" for i in range(num_layers))
    return tuple("global" if (i + 1) % 6 == 0 else "local" for i in range(num_layers))


def _g2(layers, d, f, n, h, k, *, scalar=None, transpose=True) -> Arch:
    return Arch("gemma2", layers, d, f, n, h, k, 256_128, _pattern("gemma2", layers), 4096,
                use_qk_norm=False, transpose_gating=transpose,
                query_pre_attn_scalar=scalar or h, final_logit_softcap=30.0,
                attn_logit_softcap=50.0)


def _g3(layers, d, f, n, h, k, *, window, scalar=None, scale=1.0, vocab=262_144) -> Arch:
    return Arch("gemma3", layers, d, f, n, h, k, vocab, _pattern("gemma3", layers), window,
                use_qk_norm=True, transpose_gating=True, query_pre_attn_scalar=scalar or h,
                local_rope=10_000, global_rope=1_000_000, global_rope_scale=scale)


def _demo() -> Arch:
    return Arch("gemma3", 4, 256, 1024, 4, 64, 1, 1024, ("local", "global") * 2, 32,
                use_qk_norm=True, transpose_gating=True, query_pre_attn_scalar=64,
                local_rope=10_000, global_rope=1_000_000)


# (family, size) → (gemma class name, Arch). Sizes follow the release names.
KNOWN: dict[tuple[str, str], tuple[str, Arch]] = {
    ("gemma2", "2b"): ("Gemma2_2B", _g2(26, 2304, 9216, 8, 256, 4, transpose=False)),
    ("gemma2", "9b"): ("Gemma2_9B", _g2(42, 3584, 14336, 16, 256, 8)),
    ("gemma2", "27b"): ("Gemma2_27B", _g2(46, 4608, 36864, 32, 128, 16, scalar=144)),
    ("gemma3", "270m"): ("Gemma3_270M", _g3(18, 640, 2048, 4, 256, 1, window=512)),
    ("gemma3", "1b"): ("Gemma3_1B", _g3(26, 1152, 6912, 4, 256, 1, window=512)),
    ("gemma3", "4b"): ("Gemma3_4B", _g3(34, 2560, 10240, 8, 256, 4, window=1024, scale=8.0)),
    ("gemma3", "12b"): ("Gemma3_12B", _g3(48, 3840, 15360, 16, 256, 8, window=1024, scale=8.0)),
    ("gemma3", "27b"): ("Gemma3_27B",
                        _g3(62, 5376, 21504, 32, 128, 16, window=1024, scale=8.0, scalar=168)),
    ("gemma3", "custom"): ("demo", _demo()),
}


def match_known(arch: Arch) -> tuple[str, str] | None:
    """(size, gemma class name) of a known config with the same dimensions, else None."""
    for (family, size), (name, known) in KNOWN.items():
        if family == arch.family and known.dims() == arch.dims():
            return size, name
    return None


def size_of(arch: Arch) -> str:
    known = match_known(arch)
    return known[0] if known else "custom"


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
    family = "gemma3" if has_qk_norm else "gemma2"
    for (fam, _size), (_, known) in KNOWN.items():
        if fam == family and known.dims() == (layers, d, f, n, h, k):
            return dataclasses.replace(known, vocab_size=vocab, transpose_gating=transpose)
    raise ArchError(
        f"shapes match no known {family} config ({layers} layers, embed {d}, mlp {f}, "
        f"{n} heads × {h}, {k} kv); put a config.json beside the checkpoint", "unsupported", family)


def shape_param_count(shapes: Mapping[str, tuple[int, ...]]) -> int:
    total = 0
    for shape in shapes.values():
        n = 1
        for s in shape:
            n *= int(s)
        total += n
    return total


# --------------------------------------------------------------------------- gemma model


@functools.cache
def model_class(arch: Arch) -> type:
    """A ``gm.nn.Transformer`` subclass carrying ``arch`` (one class per arch, reused)."""
    from gemma import gm

    known = match_known(arch)
    name = known[1] if known and known[1] != "demo" else f"{arch.family.capitalize()}Custom"

    class Model(gm.nn.Transformer):  # type: ignore[misc, valid-type]
        config: gm.nn.config.TransformerConfig = arch.transformer_config()
        INFO = gm.nn.config.ModelInfo(tokenizer_version=arch.tokenizer_version)

    Model.__name__ = Model.__qualname__ = name
    return Model


def tokenizer_for(arch_family: str, path: str) -> Any:
    """gemma's tokenizer for the family, over a local ``tokenizer.model``."""
    from gemma import gm

    cls = gm.text.Gemma2Tokenizer if arch_family == "gemma2" else gm.text.Gemma3Tokenizer
    return cls(path=path)


# the HF config.json side lives in hf_config.py; these names stay importable from here
from adapters_lib.models.hf_config import (  # noqa: E402, F401
    _HF_DEFAULTS,
    _HF_FAMILY,
    from_hf_config,
    hf_config_for,
    hf_family,
)

