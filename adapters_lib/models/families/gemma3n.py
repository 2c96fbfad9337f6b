"""Gemma 3n (text tower): its architecture record, sizes, config.json both ways, LoRA table,
sharding, memory term.

gemma's own modules (``gemma.gm.nn.gemma3n``): AltUp (4 streams; the layer runs on the first,
``altup`` predicts and corrects the others), Laurel (a low-rank residual beside attention),
per-layer inputs (``per_layer_input_embedding``, ``per_layer_mapping``), KV sharing (the last
layers reuse the k/v of the last unshared layer of their kind, ``arch.kv_sources``, and have no
k/v weights of their own), a value norm, RMSNorm by ``scale`` (not ``1 + scale``), Gaussian top-k activation
sparsity in the first layers. Gemma 3's chat template. The HF tensor map is ``gemma3n_hf``:
HF pads ``embed_tokens`` by 256 rows past the text vocabulary (audio/vision ids), trimmed here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from adapters_lib.lora.shapes import lora_param_shapes
from adapters_lib.models.families import classic
from adapters_lib.models.families.arch import (
    Arch,
    ArchError,
    Axis,
    Family,
    kv_reads,
    kv_sharing_patterns,
    kv_sources,
)

MULTIMODAL_ROWS = 256
"""Rows HF's ``embed_tokens`` holds past the text vocabulary (the audio and vision soft tokens)."""


@dataclasses.dataclass(frozen=True)
class Gemma3nArch(Arch):
    """An ``Arch`` with what Gemma 3n adds (defaults: E2B's)."""

    per_layer_input_dim: int = 256
    kv_shared_layers: int = 0
    """The last ``n`` layers reuse an earlier layer's keys and values."""
    laurel_rank: int = 64
    altup_inputs: int = 4
    altup_coef_clip: float | None = 120.0
    activation_sparsity: tuple[float, ...] = ()
    """Per layer: the Gaussian top-k target sparsity of the MLP gate (0 = none; () = none)."""
    hf_vocab_size: int = 0
    """Rows of HF's ``embed_tokens`` (0 = ``vocab_size + MULTIMODAL_ROWS``)."""
    towers: tuple[str, ...] = ()
    """Media towers the checkpoint holds (``vision``, ``audio``): listed, never trained."""

    @property
    def hf_rows(self) -> int:
        return self.hf_vocab_size or self.vocab_size + MULTIMODAL_ROWS

    def shared_kv(self) -> tuple[int, ...]:
        return tuple(sorted(self.kv_sources()))

    def kv_sources(self) -> dict[int, int]:
        """Shared layer → the layer whose k/v it reads (``arch.kv_sources``: keras-hub's rule)."""
        return kv_sources(self.attention, self.kv_shared_layers)

    def kv_reads(self) -> tuple[int, ...]:
        """Per layer, the layer whose k/v it reads: the model's ``kv_cache_sharing_patterns``."""
        return kv_reads(self.attention, self.kv_shared_layers)

    def dims(self) -> tuple[int, ...]:
        return (*super().dims(), self.per_layer_input_dim, self.laurel_rank, self.kv_shared_layers)

    def param_count(self) -> int:
        return sum(_numel(s) for _, s in param_shapes(self.transformer_config_fields()))

    def effective_params(self) -> int:
        """Params that compute per token, the per-layer embedding table aside."""
        return self.param_count() - self.vocab_size * self.num_layers * self.per_layer_input_dim

    def active_params(self) -> int:
        return self.effective_params()

    def describe(self) -> str:
        return (super().describe() + f", per-layer inputs {self.per_layer_input_dim}, AltUp "
                f"{self.altup_inputs}, Laurel {self.laurel_rank}, {self.kv_shared_layers} KV-shared layers")

    def transformer_config_fields(self) -> dict[str, Any]:
        """The gemma ``TransformerConfig`` fields, as plain values (no gemma import)."""
        frac = self.kv_shared_layers / self.num_layers if self.kv_shared_layers else 0.0
        return dict(
            num_embed=self.vocab_size, embed_dim=self.embed_dim, hidden_dim=self.hidden_dim,
            num_heads=self.num_heads, head_dim=self.head_dim, num_kv_heads=self.num_kv_heads,
            final_logit_softcap=self.final_logit_softcap, use_post_attn_norm=True,
            use_post_ffw_norm=True, use_qk_norm=True, qk_norm_with_scale=True, use_value_norm=True,
            attention_types=tuple("GLOBAL" if a == "global" else "LOCAL_SLIDING" for a in self.attention),
            attn_logits_soft_cap=self.attn_logit_softcap, sliding_window_size=self.sliding_window,
            transpose_gating_einsum=True, local_base_frequency=int(self.local_rope),
            global_base_frequency=int(self.global_rope), local_scale_factor=self.local_rope_scale,
            global_scale_factor=self.global_rope_scale,
            activation_sparsity_pattern=self.activation_sparsity or None, use_altup=True,
            num_altup_inputs=self.altup_inputs, altup_coef_clip=self.altup_coef_clip,
            per_layer_input_dim=self.per_layer_input_dim, use_laurel=True,
            laurel_rank=self.laurel_rank, kv_shared_fraction=frac, scale_plus_one=False,
            guard_against_excess_precision=True, family="gemma3n")

    def transformer_config(self) -> Any:
        """gemma's ``gemma3n`` ``TransformerConfig`` (imports gemma; text only)."""
        from gemma.gm.nn.gemma3n import _config, _modules

        f = self.transformer_config_fields()
        kinds = {"LOCAL_SLIDING": _modules.AttentionType.LOCAL_SLIDING, "GLOBAL": _modules.AttentionType.GLOBAL}
        f["attention_types"] = tuple(kinds[a] for a in f["attention_types"])
        frac = f.pop("kv_shared_fraction")
        f.pop("family")
        f["kv_cache_sharing_config"] = (_config.KVCacheSharingConfig(
            frac_shared_layers=frac, share_global=True, share_local=True) if frac else None)
        f["query_pre_attn_norm"] = _config.QueryPreAttentionNormalisation.NONE
        return _config.TransformerConfig(**f, vision_encoder=None)


def arch_from_config(config: Any) -> Gemma3nArch:
    """A ``Gemma3nArch`` from gemma's Gemma 3n ``TransformerConfig`` (the inverse of
    ``Gemma3nArch.transformer_config``)."""
    kinds = tuple("global" if str(getattr(a, "name", a)).upper().endswith("GLOBAL") else "local"
                  for a in config.attention_types)
    share = config.kv_cache_sharing_config
    shared = round(share.frac_shared_layers * len(kinds)) if share else 0
    return Gemma3nArch(
        "gemma3n", len(kinds), config.embed_dim, config.hidden_dim, config.num_heads, config.head_dim,
        config.num_kv_heads, config.num_embed, kinds, config.sliding_window_size, use_qk_norm=True,
        transpose_gating=True, query_pre_attn_scalar=1.0, final_logit_softcap=config.final_logit_softcap,
        attn_logit_softcap=config.attn_logits_soft_cap, local_rope=config.local_base_frequency,
        global_rope=config.global_base_frequency, local_rope_scale=config.local_scale_factor,
        global_rope_scale=config.global_scale_factor, per_layer_input_dim=config.per_layer_input_dim,
        kv_shared_layers=shared, laurel_rank=config.laurel_rank, altup_inputs=config.num_altup_inputs,
        altup_coef_clip=config.altup_coef_clip,
        activation_sparsity=tuple(float(x) for x in config.activation_sparsity_pattern or ()))


def from_shapes(shapes: Mapping[str, tuple[int, ...]]) -> Gemma3nArch:
    """The known Gemma 3n size whose text tree has exactly these shapes (orbax, flat or nested
    keys; vision/audio params ignored), else ``ArchError``."""
    def norm(key: str) -> str:
        key = key.replace(".", "/").removeprefix("transformer/")
        return key[:-2] if key.endswith("/w") else key

    theirs = {norm(k): tuple(v) for k, v in shapes.items()}
    towers = tuple(t for t in ("vision", "audio") if any(t in k for k in theirs))
    for _, (_, known) in KNOWN.items():
        want = {norm("/".join(p)): s for p, s in param_shapes(known.transformer_config_fields())}  # type: ignore[attr-defined]
        if all(theirs.get(k) == v for k, v in want.items()):
            return dataclasses.replace(known, towers=towers)  # type: ignore[return-value]
    raise ArchError("Gemma 3n shapes match no known size; put a config.json beside the checkpoint",
                    "unsupported", "gemma3n")


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _cfg(config: Any, name: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def _shared(config: Any) -> set[int]:
    """The KV-shared layers of a config (``arch.kv_sources``; the count rounded, as in Gemma 4)."""
    if isinstance(config, Mapping) and "kv_shared_fraction" in config:
        frac = float(config["kv_shared_fraction"])
    else:
        share = _cfg(config, "kv_cache_sharing_config")
        frac = float(getattr(share, "frac_shared_layers", 0.0)) if share is not None else 0.0
    kinds = tuple("global" if str(getattr(a, "name", a)).upper().endswith("GLOBAL") else "local"
                  for a in _cfg(config, "attention_types"))
    return set(kv_sources(kinds, round(frac * len(kinds)))) if frac else set()


def param_shapes(config: Any) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    """(path, shape) of every text weight of a Gemma 3n config (gemma's tree: the per-layer
    embedding table included, no k/v on the KV-shared layers)."""
    g = {k: int(_cfg(config, k, 0) or 0) for k in ("num_embed", "embed_dim", "hidden_dim", "num_heads",
                                                   "head_dim", "num_kv_heads", "per_layer_input_dim",
                                                   "laurel_rank", "num_altup_inputs")}
    v, d, f, n, h, k = (g["num_embed"], g["embed_dim"], g["hidden_dim"], g["num_heads"], g["head_dim"],
                        g["num_kv_heads"])
    p, r, a = g["per_layer_input_dim"], g["laurel_rank"], g["num_altup_inputs"] or 4
    layers = len(tuple(_cfg(config, "attention_types")))
    shared = _shared(config)
    out: list[tuple[tuple[str, ...], tuple[int, ...]]] = [
        (("embedder", "input_embedding"), (v, d)), (("final_norm", "scale"), (d,)),
        (("embedder", "per_layer_input_embedding"), (v, layers, p)),
        (("embedder", "per_layer_input_projection", "w"), (d, layers, p)),
        (("embedder", "per_layer_projection_norm", "scale"), (p,))]
    for i in range(1, a):
        out += [((f"altup_projection_{i - 1}", f"altup_projection_{i - 1}"), (d, d)),
                ((f"altup_unembed_projection_{i - 1}", f"altup_unembed_projection_{i - 1}"), (d, d))]
    for i in range(layers):
        lay = f"layer_{i}"
        if n == k:
            out.append(((lay, "attn", "qkv_einsum", "w"), (3, n, d, h)))
        else:
            out.append(((lay, "attn", "q_einsum", "w"), (n, d, h)))
            if i not in shared:
                out.append(((lay, "attn", "kv_einsum", "w"), (2, k, d, h)))
        out.append(((lay, "attn", "attn_vec_einsum", "w"), (n, h, d)))
        out.append(((lay, "attn", "query_norm", "scale"), (h,)))
        if i not in shared:
            out.append(((lay, "attn", "key_norm", "scale"), (h,)))
        out += [((lay, "mlp", "gating_einsum"), (2, f, d)), ((lay, "mlp", "linear"), (f, d)),
                ((lay, "altup", "correct_output_scale"), (d,)), ((lay, "altup", "correction_coefs"), (4, a)),
                ((lay, "altup", "prediction_coefs"), (4, a, a)), ((lay, "altup", "modality_router", "w"), (d, 4)),
                ((lay, "altup", "router_norm_layer", "scale"), (d,)),
                ((lay, "laurel", "linear_left", "w"), (d, r)), ((lay, "laurel", "linear_right", "w"), (r, d)),
                ((lay, "per_layer_mapping", "per_layer_input_gate", "w"), (d, p)),
                ((lay, "per_layer_mapping", "per_layer_projection", "w"), (p, d)),
                ((lay, "per_layer_mapping", "post_per_layer_input_norm", "scale"), (d,))]
        out += [((lay, nm, "scale"), (d,)) for nm in ("pre_attention_norm", "post_attention_norm",
                                                      "pre_ffw_norm", "post_ffw_norm", "post_laurel_norm")]
    return out


def lora_shapes(config: Any, rank: int, targets: tuple[str, ...]) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    """(path, shape) of every adapter matrix ``lora.init_lora`` makes: Gemma 2/3's table on the
    same einsums, without k/v on the KV-shared layers (they have no k/v projection)."""
    shared = {f"layer_{i}" for i in _shared(config)}
    return [(path, shape) for path, shape in lora_param_shapes(config, rank, targets)
            if not (path[0] in shared and path[2] == "kv_einsum")]


def model_class(arch: Gemma3nArch, name: str) -> type:
    """gemma's ``Gemma3nTransformer`` carrying ``arch`` (imports gemma)."""
    from gemma.gm.nn.gemma3n import _transformer

    class Model3n(_transformer.Gemma3nTransformer):  # type: ignore[misc, valid-type]
        config: Any = arch.transformer_config()
        INFO = _transformer.ModelInfo(tokenizer_version="3n")
        # which layer's k/v each KV-shared layer reads: keras-hub's rule, not gemma's
        kv_cache_sharing_patterns = kv_sharing_patterns(arch.kv_reads())  # type: ignore[attr-defined]

    Model3n.__name__ = Model3n.__qualname__ = name
    return Model3n


def _g3n(layers: int, f: int) -> Gemma3nArch:
    attention = tuple("global" if (i + 1) % 5 == 0 else "local" for i in range(layers))
    return Gemma3nArch("gemma3n", layers, 2048, f, 8, 256, 2, 262_144, attention, 512, use_qk_norm=True,
                       transpose_gating=True, query_pre_attn_scalar=1.0, final_logit_softcap=None,
                       local_rope=10_000, global_rope=1_000_000, kv_shared_layers=layers - 20,
                       activation_sparsity=(0.95,) * 10 + (0.0,) * (layers - 10))


# size → (gemma class, Arch): mirrors gm.nn.Gemma3n_* (tests/test_gemma3n.py checks it). gemma's
# configs have no final soft-cap; transformers' have 30 (a config.json's value wins).
KNOWN: dict[str, tuple[str, Arch]] = {
    "e2b": ("Gemma3n_E2B", _g3n(30, 8192)),
    "e4b": ("Gemma3n_E4B", _g3n(35, 16384)),
}

# --------------------------------------------------------------------------- HF config.json

HF_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_400, "hidden_size": 2048, "intermediate_size": 16_384, "num_hidden_layers": 35,
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256, "sliding_window": 512,
    "final_logit_softcapping": 30.0, "vocab_size_per_layer_input": 262_144,
    "hidden_size_per_layer_input": 256, "altup_active_idx": 0, "altup_coef_clip": 120.0,
    "altup_correct_scale": True, "altup_num_inputs": 4, "num_kv_shared_layers": 15, "laurel_rank": 64,
}
"""transformers' ``Gemma3nTextConfig`` defaults (its config.json omits keys equal to them)."""


def from_hf_config(cfg: Mapping[str, Any]) -> Gemma3nArch:
    """The text tower of a Gemma 3n ``config.json`` (``gemma3n`` with ``text_config``, or ``gemma3n_text``)."""
    towers = tuple(t for t in ("vision", "audio") if isinstance(cfg.get(f"{t}_config"), Mapping))
    if isinstance(cfg.get("text_config"), Mapping):
        cfg = cfg["text_config"]
    cfg = {**HF_DEFAULTS, **{k: v for k, v in cfg.items() if v is not None or k == "final_logit_softcapping"}}
    try:
        layers, d = int(cfg["num_hidden_layers"]), int(cfg["hidden_size"])
        n, k, h = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"]), int(cfg["head_dim"])
        widths = cfg["intermediate_size"]
        widths = [int(w) for w in widths] if isinstance(widths, list) else [int(widths)] * layers
        vocab, rows = int(cfg["vocab_size_per_layer_input"]), int(cfg["vocab_size"])
    except (KeyError, TypeError, ValueError) as e:
        raise ArchError(f"config.json lacks or garbles {e}", "unreadable", "gemma3n") from None
    if len(set(widths)) != 1:
        raise ArchError(f"intermediate_size differs per layer ({sorted(set(widths))}): gemma's Gemma 3n "
                        "has one MLP width", "unsupported", "gemma3n")
    if int(cfg["altup_num_inputs"]) != 4 or int(cfg["altup_active_idx"]) != 0 or not cfg["altup_correct_scale"]:
        raise ArchError("AltUp other than 4 streams, active 0, corrected scale: gemma cannot express it",
                        "unsupported", "gemma3n")
    types = cfg.get("layer_types") or ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention"
                                       for i in range(layers)]
    attention = tuple("local" if t == "sliding_attention" else "global" for t in types)
    sparsity = cfg.get("activation_sparsity_pattern")
    if sparsity is None:
        sparsity = [0.95] * (10 if layers > 10 else 0) + [0.0] * (layers - (10 if layers > 10 else 0))
    elif not isinstance(sparsity, list):
        sparsity = [float(sparsity)] * layers
    if len(attention) != layers or len(sparsity) != layers:
        raise ArchError(f"layer_types/activation_sparsity_pattern do not have {layers} entries",
                        "unreadable", "gemma3n")
    local, global_ = _rope(cfg)
    soft = cfg.get("final_logit_softcapping")
    arch = Gemma3nArch(
        "gemma3n", layers, d, widths[0], n, h, k, vocab, attention, int(cfg["sliding_window"]),
        use_qk_norm=True, transpose_gating=True, query_pre_attn_scalar=1.0,
        final_logit_softcap=None if soft is None else float(soft), local_rope=local, global_rope=global_,
        per_layer_input_dim=int(cfg["hidden_size_per_layer_input"]),
        kv_shared_layers=int(cfg["num_kv_shared_layers"] or 0), laurel_rank=int(cfg["laurel_rank"]),
        altup_coef_clip=None if cfg.get("altup_coef_clip") is None else float(cfg["altup_coef_clip"]),
        activation_sparsity=tuple(float(x) for x in sparsity),
        hf_vocab_size=0 if rows == vocab + MULTIMODAL_ROWS else rows, towers=towers)
    return arch


def _rope(cfg: Mapping[str, Any]) -> tuple[int, int]:
    params = cfg.get("rope_parameters")
    if isinstance(params, Mapping) and "full_attention" in params:
        return (int((params.get("sliding_attention") or {}).get("rope_theta", 10_000)),
                int((params.get("full_attention") or {}).get("rope_theta", 1_000_000)))
    return int(cfg.get("rope_local_base_freq", 10_000)), int(cfg.get("rope_theta", 1_000_000))


def hf_config_for(arch: Gemma3nArch, *, dtype: str = "float32") -> dict[str, Any]:
    """A ``Gemma3nForCausalLM`` ``config.json`` (``gemma3n_text``)."""
    return {
        "architectures": ["Gemma3nForCausalLM"], "model_type": "gemma3n_text",
        "vocab_size": arch.hf_rows, "vocab_size_per_layer_input": arch.vocab_size,
        "hidden_size": arch.embed_dim, "intermediate_size": [arch.hidden_dim] * arch.num_layers,
        "num_hidden_layers": arch.num_layers, "num_attention_heads": arch.num_heads,
        "num_key_value_heads": arch.num_kv_heads, "head_dim": arch.head_dim,
        "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
        "sliding_window": arch.sliding_window,
        "layer_types": ["sliding_attention" if a == "local" else "full_attention" for a in arch.attention],
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": float(arch.local_rope)},
                            "full_attention": {"rope_type": "default", "rope_theta": float(arch.global_rope)}},
        "rope_theta": float(arch.global_rope), "rope_local_base_freq": float(arch.local_rope),
        "rope_scaling": None, "max_position_embeddings": 32_768,
        "final_logit_softcapping": arch.final_logit_softcap,
        "hidden_size_per_layer_input": arch.per_layer_input_dim, "altup_active_idx": 0,
        "altup_coef_clip": arch.altup_coef_clip, "altup_correct_scale": True,
        "altup_num_inputs": arch.altup_inputs, "num_kv_shared_layers": arch.kv_shared_layers,
        "laurel_rank": arch.laurel_rank,
        "activation_sparsity_pattern": list(arch.activation_sparsity) or [0.0] * arch.num_layers,
        "pad_token_id": 0, "eos_token_id": [1, 106], "bos_token_id": 2, "tie_word_embeddings": True,
        "torch_dtype": dtype, "use_cache": True, "attention_bias": False, "attention_dropout": 0.0,
        "initializer_range": 0.02,
    }


# --------------------------------------------------------------------------- the record

SHARDING: dict[tuple[str, int], tuple[Axis, ...]] = {
    ("per_layer_input_embedding", 3): ("tensor", None, None),  # (V, L, P)
}
SHARDING_WORDS = (*classic.SHARDING_WORDS[:2], "the per-layer embedding table's vocab on tensor",
                  "AltUp, Laurel, per-layer projections and norms replicated")

FAMILY = Family(
    name="gemma3n", label="Gemma 3n", hf_model_types=("gemma3n", "gemma3n_text"),
    gguf_arches=("gemma3n",), loads=True, known=KNOWN, hf_defaults=HF_DEFAULTS, norm_plus_one=False,
    gguf_norm_offset=0.0, lora_targets=classic.LORA_TARGETS,
    layer_classes={"einsum": ("gemma.gm.nn.gemma3n._layers:Einsum",)}, chat=classic.CHAT,
    sharding={**classic.SHARDING, **SHARDING}, sharding_words=SHARDING_WORDS, lora_axes=classic.LORA_AXES,
    param_shapes=param_shapes, lora_shapes=lora_shapes, tokenizer_class="Gemma3nTokenizer",
    hf_map="adapters_lib.models.families.gemma3n_hf",
    quantizes=False,  # models.quantize does not intercept gemma3n's own Einsum layers yet
)
