"""Gemma 4 (text tower): its architecture record, sizes, LoRA targets, sharding, memory term.

gemma's own modules (``gemma.gm.nn.gemma4``): RMSNorm multiplies by ``scale`` (not ``1 + scale``),
k=v global layers (one ``k_einsum``), partial rotary on global layers, a MoE block (an expert
bank behind ``jax.lax.ragged_dot`` plus a shared dense ``mlp2``), E-models with per-layer inputs
(``per_layer_embeddings``) and KV sharing (the last layers reuse the k/v of the last unshared
layer of their kind, keras-hub's and transformers' rule: ``arch.kv_sources``). Its own
chat format: ``<|turn>role … <turn|>`` with a real system role and a thinking channel. The HF
name map is ``gemma4_hf``, ``config.json`` both ways ``gemma4_config``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from adapters_lib.models.families.arch import (
    Arch,
    ArchError,
    Axis,
    ChatTemplate,
    Family,
    LoraSlot,
    kv_reads,
    kv_sources,
)


@dataclasses.dataclass(frozen=True)
class Gemma4Arch(Arch):
    """An ``Arch`` with what Gemma 4 adds (defaults: a dense model without them)."""

    global_head_dim: int = 0
    """Key size of the global layers (gemma's ``global_key_size``; 0 = ``head_dim``)."""
    num_global_kv_heads: int = 0
    """KV heads of the global layers (0 = ``num_kv_heads``)."""
    k_eq_v_global: bool = False
    """Global layers use one projection for keys and values (``k_einsum``)."""
    global_rope_proportion: float = 0.25
    local_rope_proportion: float = 1.0
    per_layer_input_dim: int = 0
    """E-models: per-layer input width (0 = none)."""
    kv_shared_layers: int = 0
    """The last ``n`` layers reuse the keys and values of an earlier layer (``kv_sources``)."""
    kv_shared_ffw_hidden: int = 0
    """MLP width of the KV-shared layers (0 = ``hidden_dim``; E2B doubles it)."""
    num_experts: int = 0
    expert_dim: int = 0
    top_k_experts: int = 0
    towers: tuple[str, ...] = ()
    """Media towers the checkpoint holds (``vision``, ``audio``): listed, never trained."""

    def __post_init__(self):
        if self.num_global_kv_heads == self.num_kv_heads:  # one spelling of "as the local layers"
            object.__setattr__(self, "num_global_kv_heads", 0)

    @property
    def tokenizer_version(self) -> int:
        return 4

    @property
    def moe(self) -> bool:
        return self.num_experts > 0

    def shared_kv(self) -> tuple[int, ...]:
        """Layers whose k/v come from an earlier layer (they own no k/v; E2B: a double-wide MLP)."""
        return tuple(sorted(self.kv_sources()))

    def kv_sources(self) -> dict[int, int]:
        """KV-shared layer → the layer whose k/v it reads (``arch.kv_sources``)."""
        return kv_sources(self.attention, self.kv_shared_layers)

    def kv_reads(self) -> tuple[int, ...]:
        """Per layer, the layer whose k/v it reads: the model's ``kv_cache_sharing_patterns``."""
        return kv_reads(self.attention, self.kv_shared_layers)

    def dims(self) -> tuple[int, ...]:
        return (*super().dims(), self.global_head_dim, self.num_global_kv_heads,
                self.per_layer_input_dim, self.num_experts, self.expert_dim)

    def param_count(self) -> int:
        return sum(_numel(s) for _, s in param_shapes(self.transformer_config_fields()))

    def effective_params(self) -> int:
        """Params that compute per token, the per-layer embedding table aside (E-models)."""
        table = self.vocab_size * self.num_layers * self.per_layer_input_dim
        return self.param_count() - table

    def active_params(self) -> int:
        """Params used per token (MoE: ``top_k`` of the experts)."""
        if not self.moe:
            return self.effective_params()
        bank = self.num_layers * self.num_experts * 3 * self.expert_dim * self.embed_dim
        return self.effective_params() - bank + bank * self.top_k_experts // self.num_experts

    def describe(self) -> str:
        extra = []
        if self.moe:
            extra.append(f"{self.num_experts} experts top-{self.top_k_experts}")
        if self.per_layer_input_dim:
            extra.append(f"per-layer inputs {self.per_layer_input_dim}")
        if self.kv_shared_layers:
            extra.append(f"{self.kv_shared_layers} KV-shared layers")
        return super().describe() + "".join(f", {e}" for e in extra)

    def transformer_config_fields(self) -> dict[str, Any]:
        """The gemma ``TransformerConfig`` fields, as plain values (no gemma import)."""
        frac = self.kv_shared_layers / self.num_layers if self.kv_shared_layers else 0.0
        return dict(
            num_embed=self.vocab_size, embed_dim=self.embed_dim, hidden_dim=self.hidden_dim,
            num_heads=self.num_heads, head_dim=self.head_dim, num_kv_heads=self.num_kv_heads,
            final_logit_softcap=self.final_logit_softcap, use_post_attn_norm=True,
            use_post_ffw_norm=True,
            attention_types=tuple("GLOBAL" if a == "global" else "LOCAL_SLIDING" for a in self.attention),
            attn_logits_soft_cap=self.attn_logit_softcap,
            sliding_window_size=self.sliding_window, qk_norm_with_scale=True,
            num_global_kv_heads=self.num_global_kv_heads or None,
            global_key_size=self.global_head_dim or None, k_eq_v_global=self.k_eq_v_global,
            global_rope_proportion=self.global_rope_proportion,
            local_rope_proportion=self.local_rope_proportion,
            local_base_frequency=int(self.local_rope), global_base_frequency=int(self.global_rope),
            local_scale_factor=self.local_rope_scale, global_scale_factor=self.global_rope_scale,
            per_layer_input_dim=self.per_layer_input_dim, kv_shared_fraction=frac,
            override_kv_shared_ffw_hidden=self.kv_shared_ffw_hidden or None,
            enable_moe=self.moe, num_experts=self.num_experts, expert_dim=self.expert_dim,
            top_k_experts=self.top_k_experts or 8,
            moe_dense_hidden_dim=self.hidden_dim if self.moe else 0, family="gemma4")

    def transformer_config(self) -> Any:
        """gemma's ``gemma4`` ``TransformerConfig`` (imports gemma; text only)."""
        from gemma.gm.nn.gemma4 import _config, _modules

        f = self.transformer_config_fields()
        kinds = {"local": _modules.AttentionType.LOCAL_SLIDING, "global": _modules.AttentionType.GLOBAL}
        f["attention_types"] = tuple(kinds[a] for a in self.attention)
        frac = f.pop("kv_shared_fraction")
        f.pop("family")
        f["kv_cache_sharing_config"] = (_config.KVCacheSharingConfig(
            frac_shared_layers=frac, share_global=True, share_local=True) if frac else None)
        return _config.TransformerConfig(**f, vision_encoder=None, audio_encoder=None)


def arch_from_config(config: Any) -> Gemma4Arch:
    """A ``Gemma4Arch`` from gemma's Gemma 4 ``TransformerConfig`` (the inverse of
    ``Gemma4Arch.transformer_config``)."""
    kinds = tuple("global" if _is_global(a) else "local" for a in config.attention_types)
    share = config.kv_cache_sharing_config
    shared = round(share.frac_shared_layers * len(kinds)) if share is not None else 0
    return Gemma4Arch(
        "gemma4", len(kinds), config.embed_dim, config.hidden_dim, config.num_heads, config.head_dim,
        config.num_kv_heads, config.num_embed, kinds, config.sliding_window_size, use_qk_norm=True,
        transpose_gating=True, query_pre_attn_scalar=1.0, final_logit_softcap=config.final_logit_softcap,
        attn_logit_softcap=config.attn_logits_soft_cap, local_rope=config.local_base_frequency,
        global_rope=config.global_base_frequency, local_rope_scale=config.local_scale_factor,
        global_rope_scale=config.global_scale_factor, global_head_dim=config.global_key_size or 0,
        num_global_kv_heads=config.num_global_kv_heads or 0, k_eq_v_global=config.k_eq_v_global,
        global_rope_proportion=config.global_rope_proportion or 1.0,
        local_rope_proportion=config.local_rope_proportion or 1.0,
        per_layer_input_dim=config.per_layer_input_dim, kv_shared_layers=shared,
        kv_shared_ffw_hidden=config.override_kv_shared_ffw_hidden or 0,
        num_experts=config.num_experts if config.enable_moe else 0,
        expert_dim=config.expert_dim if config.enable_moe else 0,
        top_k_experts=config.top_k_experts if config.enable_moe else 0)


def from_shapes(shapes: Mapping[str, tuple[int, ...]]) -> Gemma4Arch:
    """The known Gemma 4 size whose text-tower tree has exactly these shapes (an orbax
    checkpoint, flat or nested keys; vision/audio params ignored), else ``ArchError``."""
    def norm(key: str) -> str:
        key = key.replace(".", "/").removeprefix("transformer/")
        return key[:-2] if key.endswith("/w") else key

    theirs = {norm(k): tuple(v) for k, v in shapes.items()}
    towers = tuple(t for t in ("vision", "audio") if any(t in k for k in theirs))
    for _, (_, known) in KNOWN.items():
        want = {norm("/".join(p)): s for p, s in param_shapes(known.transformer_config_fields())}  # type: ignore[attr-defined]
        vocab = theirs.get("embedder/input_embedding", (0,))[0]
        want["embedder/input_embedding"] = (vocab, known.embed_dim)
        if all(theirs.get(k) == v for k, v in want.items() if not k.startswith("embedder/per_layer_emb")):
            return dataclasses.replace(known, vocab_size=vocab, towers=towers)  # type: ignore[return-value]
    raise ArchError("Gemma 4 shapes match no known size; put a config.json beside the checkpoint",
                    "unsupported", "gemma4")


def shared_kv_layers(types: tuple[Any, ...], frac: float) -> tuple[int, ...]:
    """The layers of a config that reuse another's k/v (``arch.kv_sources``): ``types`` its
    attention types (gemma's enums or names), ``frac`` its ``frac_shared_layers`` (the count
    rounded: gemma's ``int(n - frac·n)`` makes 14 of 25 layers 15)."""
    kinds = tuple("global" if _is_global(t) else "local" for t in types)
    return tuple(sorted(kv_sources(kinds, round(frac * len(kinds))))) if frac else ()


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _cfg(config: Any, name: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def _is_global(kind: Any) -> bool:
    return str(getattr(kind, "name", kind)).upper() in ("GLOBAL", "ATTENTIONTYPE.GLOBAL")


def _frac(config: Any) -> float:
    if "kv_shared_fraction" in (config if isinstance(config, Mapping) else {}):
        return float(config["kv_shared_fraction"])
    share = _cfg(config, "kv_cache_sharing_config")
    return float(getattr(share, "frac_shared_layers", 0.0)) if share is not None else 0.0


def param_shapes(config: Any) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    """(path, shape) of every text-tower weight of a Gemma 4 config (gemma's tree; every
    expert resident, the per-layer embedding table included)."""
    g = _getter(config)
    v, d, f, n, h, k = (g("num_embed"), g("embed_dim"), g("hidden_dim"), g("num_heads"),
                        g("head_dim"), g("num_kv_heads"))
    gh, gk = g("global_key_size") or h, g("num_global_kv_heads") or k
    p, e, x = g("per_layer_input_dim"), g("num_experts") if _cfg(config, "enable_moe") else 0, g("expert_dim")
    types = tuple(_cfg(config, "attention_types"))
    layers = len(types)
    shared = set(shared_kv_layers(types, _frac(config)))
    wide = g("override_kv_shared_ffw_hidden")
    out: list[tuple[tuple[str, ...], tuple[int, ...]]] = [
        (("embedder", "input_embedding"), (v, d)), (("final_norm", "scale"), (d,))]
    if p:
        out += [(("embedder", "per_layer_embeddings"), (v, layers, p)),
                (("embedder", "per_layer_model_projection", "w"), (d, layers, p)),
                (("embedder", "per_layer_projection_norm", "scale"), (p,))]
    for i, kind in enumerate(types):
        lay = f"layer_{i}"
        glob = _is_global(kind)
        hh, kk = (gh, gk) if glob else (h, k)
        out.append(((lay, "attn", "q_einsum", "w"), (n, d, hh)))
        if glob and _cfg(config, "k_eq_v_global", False):
            out.append(((lay, "attn", "k_einsum", "w"), (kk, d, hh)))
        else:
            out.append(((lay, "attn", "kv_einsum", "w"), (2, kk, d, hh)))
        out.append(((lay, "attn", "attn_vec_einsum", "w"), (n, hh, d)))
        out += [((lay, "attn", "query_norm", "scale"), (hh,)), ((lay, "attn", "key_norm", "scale"), (hh,))]
        ff = wide if (i in shared and wide) else f
        norms = ["pre_attention_norm", "post_attention_norm", "pre_ffw_norm", "post_ffw_norm"]
        if e:
            out += [((lay, "mlp", "router_logits", "w"), (d, e)),
                    ((lay, "mlp", "gating_einsum", "w"), (e, 2, x, d)),
                    ((lay, "mlp", "linear", "w"), (e, x, d)),
                    ((lay, "mlp", "per_expert_scale"), (e,)), ((lay, "mlp", "router_scale"), (d,)),
                    ((lay, "mlp2", "gating_einsum"), (2, ff, d)), ((lay, "mlp2", "linear"), (ff, d))]
            norms += ["pre_ffw2_norm", "post_ffw1_norm", "post_ffw2_norm"]
        else:
            out += [((lay, "mlp", "gating_einsum"), (2, ff, d)), ((lay, "mlp", "linear"), (ff, d))]
        if p:
            out += [((lay, "per_layer_input_gate", "w"), (d, p)), ((lay, "per_layer_projection", "w"), (p, d))]
            norms.append("post_per_layer_input_norm")
        out += [((lay, nm, "scale"), (d,)) for nm in norms]
        out.append(((lay, "skip_scale"), (1,)))
    return out


def lora_shapes(config: Any, rank: int, targets: tuple[str, ...]) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    """(path, shape) of every adapter matrix ``lora.init_lora`` makes for a Gemma 4 config: per
    layer its own head dims (global layers differ), ``k`` on the ``k_einsum`` of k=v layers, no
    k/v on KV-shared layers, gate/up/down on the dense (or shared ``mlp2``) MLP, ``experts`` on
    the bank."""
    out: list[tuple[tuple[str, ...], tuple[int, ...]]] = []
    shapes = dict(param_shapes(config))
    shared = set(shared_kv_layers(tuple(_cfg(config, "attention_types")), _frac(config)))
    for i in range(len(tuple(_cfg(config, "attention_types")))):
        lay = f"layer_{i}"
        q = shapes[(lay, "attn", "q_einsum", "w")]
        n, d, h = q
        mats: list[tuple[tuple[str, ...], str, int, int]] = []
        if "q" in targets:
            mats.append(((lay, "attn", "q_einsum", "lora"), "q", d, n * h))
        kv = shapes.get((lay, "attn", "kv_einsum", "w"))
        k1 = shapes.get((lay, "attn", "k_einsum", "w"))
        if i not in shared:
            if kv is not None:
                mats += [((lay, "attn", "kv_einsum", "lora"), t, d, kv[1] * kv[3]) for t in ("k", "v") if t in targets]
            elif k1 is not None and "k" in targets:
                mats.append(((lay, "attn", "k_einsum", "lora"), "k", d, k1[0] * k1[2]))
        if "o" in targets:
            mats.append(((lay, "attn", "attn_vec_einsum", "lora"), "o", n * h, d))
        dense = "mlp2" if (lay, "mlp2", "linear") in shapes else "mlp"
        f = shapes[(lay, dense, "linear")][0]
        mats += [((lay, dense, "lora_gating_einsum"), t, d, f) for t in ("gate", "up") if t in targets]
        if "down" in targets:
            mats.append(((lay, dense, "lora_linear"), "down", f, d))
        for node, t, fin, fout in mats:
            out += [((*node, f"{t}_a"), (fin, rank)), ((*node, f"{t}_b"), (rank, fout))]
        bank = shapes.get((lay, "mlp", "gating_einsum", "w"))
        if bank is not None and "experts" in targets:
            e, _, x, _ = bank
            for t, fin, fout in (("gate", d, x), ("up", d, x), ("down", x, d)):
                out += [((lay, "mlp", f"lora_experts_{t}_a"), (e, fin, rank)),
                        ((lay, "mlp", f"lora_experts_{t}_b"), (e, rank, fout))]
    return out


def _getter(config: Any):
    def g(name: str) -> int:
        return int(_cfg(config, name, 0) or 0)
    return g


def _g4(layers, d, f, n, h, k, *, window, pattern, gk=0, kv_eq=False, ple=0, shared=0, wide=0,
        experts=0, expert_dim=0, top_k=0, vocab=262_144) -> Gemma4Arch:
    attention = tuple(pattern[i % len(pattern)] for i in range(layers))
    return Gemma4Arch("gemma4", layers, d, f, n, h, k, vocab, attention, window, use_qk_norm=True,
                      transpose_gating=True, query_pre_attn_scalar=1.0, final_logit_softcap=30.0,
                      local_rope=10_000, global_rope=1_000_000, global_head_dim=512,
                      num_global_kv_heads=gk, k_eq_v_global=kv_eq, per_layer_input_dim=ple,
                      kv_shared_layers=shared, kv_shared_ffw_hidden=wide, num_experts=experts,
                      expert_dim=expert_dim, top_k_experts=top_k)


# --------------------------------------------------------------------------- HF config.json
# (read and written by ``gemma4_config``)

HF_DEFAULTS = {"vocab_size": 262_144, "hidden_size": 2304, "intermediate_size": 9216,
               "num_hidden_layers": 30, "num_attention_heads": 8, "num_key_value_heads": 4,
               "head_dim": 256, "sliding_window": 512, "final_logit_softcapping": None,
               "hidden_size_per_layer_input": 256, "attention_k_eq_v": False,
               "num_kv_shared_layers": 0, "enable_moe_block": False, "use_double_wide_mlp": False,
               "global_head_dim": 512}


_P5 = ("local",) * 4 + ("global",)
_P6 = ("local",) * 5 + ("global",)

# size → (gemma class, Arch): mirrors gm.nn.Gemma4_* (tests/test_gemma4.py checks it)
KNOWN: dict[str, tuple[str, Arch]] = {
    "e2b": ("Gemma4_E2B", _g4(35, 1536, 6144, 8, 256, 1, window=512, pattern=_P5, ple=256,
                              shared=20, wide=12288)),
    "e4b": ("Gemma4_E4B", _g4(42, 2560, 10240, 8, 256, 2, window=512, pattern=_P6, ple=256, shared=18)),
    "31b": ("Gemma4_31B", _g4(60, 5376, 21504, 32, 256, 16, window=1024, pattern=_P6, gk=4, kv_eq=True)),
    "26b-a4b": ("Gemma4_26B_A4B", _g4(30, 2816, 2112, 16, 256, 8, window=1024, pattern=_P6, gk=2,
                                      kv_eq=True, experts=128, expert_dim=704, top_k=8)),
}

CHAT = ChatTemplate(("<|turn>", "<turn|>"), system_role=True,
                    stop_pieces=("<turn|>", "<eos>"), thinking_on="<|think|>",
                    thought_channel=("<|channel>", "<channel|>"))

LORA_TARGETS: dict[str, tuple[LoraSlot, ...]] = {
    "q": (LoraSlot("q_einsum"),),
    "k": (LoraSlot("kv_einsum", 0), LoraSlot("k_einsum")),
    "v": (LoraSlot("kv_einsum", 1),),
    "o": (LoraSlot("attn_vec_einsum"),),
    "gate": (LoraSlot("gating_einsum", 0),),
    "up": (LoraSlot("gating_einsum", 1),),
    "down": (LoraSlot("linear"),),
    "experts": (LoraSlot("experts"),),
}

SHARDING: dict[tuple[str, int], tuple[Axis, ...]] = {
    ("k_einsum", 3): ("tensor", "fsdp", None),  # (K, D, H)
    ("gating_einsum", 4): ("fsdp", None, "tensor", None),  # experts (E, 2, H, D)
    ("linear", 3): ("fsdp", "tensor", None),  # experts (E, H, D)
    ("per_layer_embeddings", 3): ("tensor", None, None),  # (V, L, P)
}
SHARDING_WORDS = (
    "vocab, heads, KV heads and the MLP hidden dim on tensor",
    "the embedding dim on fsdp",
    "the expert bank split over fsdp (experts) and tensor (expert hidden dim)",
    "the per-layer embedding table's vocab on tensor",
    "router and norms replicated",
)
LORA_AXES: dict[str, tuple[Axis, Axis]] = {"k_einsum": ("fsdp", "tensor")}

FAMILY = Family(
    name="gemma4", label="Gemma 4", hf_model_types=("gemma4", "gemma4_text"),
    gguf_arches=("gemma4",), loads=True, known=KNOWN, hf_defaults=HF_DEFAULTS, norm_plus_one=False, gguf_norm_offset=0.0,
    lora_targets=LORA_TARGETS,
    layer_classes={"einsum": ("gemma.gm.nn.gemma4._layers:Einsum",),
                   "moe": ("gemma.gm.nn.gemma4._moe:MoERagged",)},
    chat=CHAT, sharding=SHARDING, sharding_words=SHARDING_WORDS, lora_axes=LORA_AXES,
    param_shapes=param_shapes, lora_shapes=lora_shapes, tokenizer_class="Gemma4Tokenizer",
    hf_map="adapters_lib.models.families.gemma4_hf",
)
