"""The shared types of every family: ``Arch`` (a Gemma text model's shape and hyper-parameters),
``ArchError``, and the ``Family`` record each ``families/<name>.py`` module fills in.

Nothing here imports a sibling module, jax or gemma at import time: these types sit below
every module that uses them (the family modules, ``hf_config``, ``hf_layout``, ``gguf_arch``,
``hf_convert``, the catalog and the loaders).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

FAMILIES = ("gemma2", "gemma3", "gemma3n", "gemma4", "other")

Axis = str | None


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


def arch_from_transformer_config(config: Any, family: str, params: Any = None) -> Arch:
    """An ``Arch`` from a gemma ``TransformerConfig`` (the inverse of ``Arch.transformer_config``)."""
    del params
    if family not in ("gemma2", "gemma3"):
        raise ArchError(f"export to Hugging Face supports gemma2 and gemma3, not {family!r}")
    by_heads = "EMBED_DIM_DIV_NUM_HEADS" in config.query_pre_attn_norm.name
    qpa = config.embed_dim // config.num_heads if by_heads else config.head_dim
    kinds = tuple("global" if a.name == "GLOBAL" else "local" for a in config.attention_types)
    return Arch(
        family, len(kinds), config.embed_dim, config.hidden_dim, config.num_heads, config.head_dim,
        config.num_kv_heads, config.num_embed, kinds, config.sliding_window_size,
        use_qk_norm=config.use_qk_norm, transpose_gating=config.transpose_gating_einsum,
        query_pre_attn_scalar=float(qpa),
        final_logit_softcap=config.final_logit_softcap,
        attn_logit_softcap=config.attn_logits_soft_cap,
        local_rope=config.local_base_frequency, global_rope=config.global_base_frequency,
        local_rope_scale=config.local_scale_factor, global_rope_scale=config.global_scale_factor,
    )


def layer_pattern(kind: str, num_layers: int) -> tuple[str, ...]:
    """Gemma's local/global pattern: 1:1 for Gemma 2, 5:1 for Gemma 3."""
    if kind == "gemma2":
        return tuple("local" if i % 2 == 0 else "global" for i in range(num_layers))
    return tuple("global" if (i + 1) % 6 == 0 else "local" for i in range(num_layers))


def kv_sources(attention: tuple[str, ...], shared: int) -> dict[int, int]:
    """KV-shared layer → the layer whose k/v it reads (Gemma 3n and 4: among the last ``shared``
    layers, each reads the last unshared layer of its own kind). keras-hub's rule
    (``Gemma4Backbone``'s ``_kv_source``, ``Gemma3nTextModel``) and transformers'; a layer with
    no unshared layer of its kind keeps its own k/v (keras-hub). gemma's
    ``create_kv_cache_sharing_patterns`` and llama.cpp take "the last unshared layer if global,
    the one before if local" instead: the same layers when the unshared layers end local, global
    (every release); ``kv_sharing_patterns`` gives gemma's modules this rule."""
    first = len(attention) - shared
    return {i: max(j for j in range(first) if attention[j] == attention[i])
            for i in range(max(first, 0), len(attention)) if attention[i] in attention[:first]}


def kv_reads(attention: tuple[str, ...], shared: int) -> tuple[int, ...]:
    """Per layer, the layer whose k/v it reads (itself unless ``kv_sources`` names another):
    gemma's ``Transformer.kv_cache_sharing_patterns``, by ``kv_sources``' rule."""
    sources = kv_sources(attention, shared)
    return tuple(sources.get(i, i) for i in range(len(attention)))


def kv_sharing_patterns(reads: tuple[int, ...]) -> property:
    """A class attribute for a subclass of gemma's Gemma 4 / Gemma 3n ``Transformer``: its
    ``kv_cache_sharing_patterns`` (which layer's k/v each layer reads; the blocks' MLP widths
    follow it) is ``reads``; the value gemma's ``setup`` computes by its own rule is dropped."""
    def get(_self: Any) -> list[int]:
        return list(reads)

    def drop(_self: Any, _gemmas_rule: Any) -> None:
        pass

    return property(get, drop)


# --------------------------------------------------------------------------- the family record


@dataclass(frozen=True)
class ChatTemplate:
    """A family's chat format: turn markers, roles, stop pieces."""

    markers: tuple[str, str]
    """(turn start, turn end): ``<start_of_turn>``/``<end_of_turn>``, Gemma 4 ``<|turn>``/``<turn|>``."""
    system_role: bool = False
    """A real system turn (Gemma 4); else a system message is folded into the first user turn."""
    model_role: str = "model"
    stop_pieces: tuple[str, ...] = ("<end_of_turn>", "<eos>")
    """Pieces that end a generated turn."""
    thinking_on: str = ""
    """The system-turn piece that turns thinking on ("" = the family has no thinking channel)."""
    thought_channel: tuple[str, str] = ("", "")
    """(open, close) of the thinking channel in a model turn."""


@dataclass(frozen=True)
class LoraSlot:
    """Where one LoRA target sits in one weight: the weight's kind and the slice of it."""

    kind: str
    """The weight kind (``q_einsum``, ``kv_einsum``, ``gating_einsum``, ``linear``, …)."""
    slot: int | None = None
    """Index along the weight's leading axis (None = the whole weight)."""


@dataclass(frozen=True)
class Family:
    """Everything the workbench knows about one model family, in one record.

    One module per family (``families/gemma3.py`` …) builds it; ``families`` keeps the table.
    """

    name: str
    label: str
    """In words: "Gemma 3"."""
    hf_model_types: tuple[str, ...]
    gguf_arches: tuple[str, ...]
    loads: bool
    """This build loads it on the gemma route."""
    known: Mapping[str, tuple[str, Arch]] = field(default_factory=dict)
    """size → (gemma class name, Arch)."""
    hf_defaults: Mapping[str, Any] = field(default_factory=dict)
    """transformers' config class defaults (its config.json omits keys equal to them)."""
    norm_plus_one: bool = True
    """RMSNorm multiplies by ``1 + scale`` (Gemma 2/3; HF stores the same ``scale``); Gemma 4: ``scale``."""
    gguf_norm_offset: float = 1.0
    """What llama.cpp's converter added to every RMSNorm weight (Gemma 2/3: 1)."""
    hf_norms: Mapping[str, str] = field(default_factory=dict)
    """gemma norm name → HF norm name, per layer."""
    gguf_top: Mapping[str, str] = field(default_factory=dict)
    """GGUF tensor name → HF tensor name, outside the blocks."""
    gguf_block: Mapping[str, str] = field(default_factory=dict)
    """GGUF block tensor (``blk.N.<this>.weight``) → HF name inside ``model.layers.N.``."""
    lora_targets: Mapping[str, tuple[LoraSlot, ...]] = field(default_factory=dict)
    """LoRA target → the weights (and slices) it adapts."""
    layer_classes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Role (``einsum``, ``attention``) → the library's classes (``module:Class``) playing it."""
    chat: ChatTemplate = ChatTemplate(("<start_of_turn>", "<end_of_turn>"))
    sharding: Mapping[tuple[str, int], tuple[Axis, ...]] = field(default_factory=dict)
    """(weight kind, rank) → the mesh axis of each dim; what is not here is replicated."""
    sharding_words: tuple[str, ...] = ()
    """The rules in words, for the mesh page."""
    lora_axes: Mapping[str, tuple[Axis, Axis]] = field(default_factory=dict)
    """Weight kind → (axis of A's in dim, axis of B's out dim)."""
    param_shapes: Callable[[Any], list[tuple[tuple[str, ...], tuple[int, ...]]]] | None = None
    """config → (path, shape) of every resident text-model weight (the memory estimate's term)."""
    lora_shapes: Callable[[Any, int, tuple[str, ...]], list[tuple[tuple[str, ...], tuple[int, ...]]]] | None = None
    """(config, rank, targets) → (path, shape) of every adapter matrix (None: the Gemma 2/3
    closed form, ``lora.shapes.lora_param_shapes``)."""
    tokenizer_class: str = "Gemma3Tokenizer"
    """gemma's ``gm.text`` tokenizer class."""
    quantizes: bool = True
    """``[model] quantize`` reaches its layers (``models.quantize``); False: refused in one line."""
    hf_map: str = ""
    """The module holding this family's own HF tensor map (``families.gemma4_hf``: ``leaf_plan``,
    ``hf_shapes``, ``gemma_to_hf``, ``omitted_fill``, each of an arch); "" = Gemma 2/3's
    (``hf_convert``)."""

    def einsum_targets(self) -> dict[str, dict[str, int | None]]:
        """Weight kind → {target: slot}: the LoRA table seen from the weights."""
        out: dict[str, dict[str, int | None]] = {}
        for target, slots in self.lora_targets.items():
            for s in slots:
                out.setdefault(s.kind, {})[target] = s.slot
        return out
