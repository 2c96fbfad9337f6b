"""Keras presets (Kaggle's ``…/keras/…`` variants) read for the gemma route.

A preset folder holds ``config.json`` (keras-hub's backbone class and its arguments),
``model.weights.h5`` — or, for a backbone over 10 GB, ``model.weights.json`` and its shards
``model_NNNNN.weights.h5`` — and ``assets/tokenizer/vocabulary.spm``. Nothing here imports
keras: the weights are read with h5py, one tensor at a time.

- ``hf_config(class_name, config)``: the Hugging Face ``config.json`` the backbone corresponds
  to (the inverse of keras-hub's own ``convert_backbone_config``), so the family's HF reader
  gives the ``Arch``; a setting the gemma modules cannot express is an ``ArchError``.
- ``KerasPresetTensors(folder)``: the backbone's tensors under their Hugging Face names
  (``.where``, ``.shapes()``, ``.get(name)``), laid out as transformers stores them: the exact
  inverse of keras-hub's ``convert_gemma``/``convert_gemma3``/``convert_gemma4``/
  ``convert_gemma3n`` weight ports (transposes and head reshapes only, so nothing is rounded). The HF loader then maps them into
  the gemma tree, sharded at load, as it does for safetensors.

How the weights file names a variable: Keras saves each layer's variables as
``<attribute path>/vars/<i>`` and writes the layer's own name on that ``vars`` group (across
shards, the group carrying the name may sit in another file than the data). The name path
(``decoder_block_3/attention/query``, index 0) is what the map below reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from adapters_lib.models.families import ArchError


def read_preset_config(folder: Path) -> tuple[str, dict[str, Any]]:
    raw = json.loads((Path(folder) / "config.json").read_text())
    return str(raw.get("class_name", "")), dict(raw.get("config") or {})


def preset_family(class_name: str, config: dict[str, Any]) -> str:
    """gemma2 / gemma3 / gemma3n / gemma4 / other (Gemma 1 is a GemmaBackbone without post norms)."""
    if class_name == "GemmaBackbone":
        return "gemma2" if config.get("use_post_ffw_norm") else "other"
    return {"Gemma3Backbone": "gemma3", "Gemma4Backbone": "gemma4",
            "Gemma3nBackbone": "gemma3n"}.get(class_name, "other")


def _types(n: int, is_local: Callable[[int], bool]) -> list[str]:
    return ["sliding_attention" if is_local(i) else "full_attention" for i in range(n)]


def hf_config(class_name: str, c: dict[str, Any]) -> dict[str, Any]:
    """The Hugging Face ``config.json`` of a keras-hub Gemma backbone config."""
    family = preset_family(class_name, c)
    if family == "other":
        what = "a Gemma 1" if class_name == "GemmaBackbone" else f"a {class_name or 'non-Gemma'}"
        raise ArchError(f"Keras preset of {what} backbone: the gemma route loads Gemma 2, 3, 3n and 4",
                        "unsupported", "other")
    if family == "gemma3n":
        return _hf_config_3n(c)
    n, d = int(c["num_query_heads"]), int(c["hidden_dim"])
    h, layers = int(c["head_dim"]), int(c["num_layers"])
    common = {"vocab_size": c["vocabulary_size"], "hidden_size": d, "num_hidden_layers": layers,
              "num_attention_heads": n, "num_key_value_heads": c["num_key_value_heads"],
              "head_dim": h, "rms_norm_eps": c.get("layer_norm_epsilon", 1e-6),
              "final_logit_softcapping": c.get("final_logit_soft_cap")}
    scalar = h if c.get("query_head_dim_normalize", True) else d // n
    window = c.get("sliding_window_size") if c.get("use_sliding_window_attention") else None
    if family == "gemma2":
        return {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], **common,
                "intermediate_size": int(c["intermediate_dim"]) // 2, "query_pre_attn_scalar": scalar,
                "attn_logit_softcapping": c.get("attention_logit_soft_cap"), "sliding_window": window,
                "layer_types": _types(layers, lambda i: bool(window) and i % 2 == 0), "rope_theta": 10_000}
    if family == "gemma3":
        if not (c.get("use_post_ffw_norm") and c.get("use_post_attention_norm") and
                c.get("use_query_key_norm", True)) or c.get("is_embedding_model"):
            raise ArchError("a Keras Gemma 3 preset of a kind the gemma route does not build "
                            "(no post/QK norms, or an embedding head)", "unsupported", "gemma3")
        if float(c.get("local_rope_scaling_factor", 1.0)) != 1.0:
            raise ArchError("a Keras Gemma 3 preset with local RoPE scaling", "unsupported", "gemma3")
        factor = float(c.get("global_rope_scaling_factor", 1.0))
        text = {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], **common,
                "intermediate_size": c["intermediate_dim"], "query_pre_attn_scalar": scalar,
                "attn_logit_softcapping": c.get("attention_logit_soft_cap"), "sliding_window": window,
                "layer_types": _types(layers, lambda i: bool(window) and i % 6 < 5),
                "rope_theta": 1_000_000, "rope_local_base_freq": 10_000,
                "rope_scaling": {"rope_type": "linear", "factor": factor} if factor != 1.0 else None}
        if c.get("vision_encoder"):  # the text tower loads; the vision tower is not read
            return {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
                    "text_config": text, "vision_config": {}}
        return text
    if float(c.get("local_rope_scaling_factor", 1.0)) != 1.0 or float(c.get("global_rope_scaling_factor", 1.0)) != 1.0:
        raise ArchError("a Keras Gemma 4 preset with RoPE scaling", "unsupported", "gemma4")
    pattern = int(c.get("sliding_window_pattern") or 6)
    types = c.get("layer_types") or _types(layers, lambda i: i % pattern != pattern - 1)
    global_kv = c.get("num_global_key_value_heads")
    moe = bool(c.get("enable_moe_block"))
    text = {"model_type": "gemma4_text", "architectures": ["Gemma4ForCausalLM"], **common,
            "intermediate_size": c["intermediate_dim"],
            "global_head_dim": c.get("global_head_dim") or h, "num_global_key_value_heads": global_kv,
            "attention_k_eq_v": global_kv is not None,
            "sliding_window": c.get("sliding_window_size") if c.get("use_sliding_window_attention", True) else None,
            "layer_types": list(types),
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default",
                                      "rope_theta": float(c.get("local_rope_wavelength") or 10_000.0)},
                "full_attention": {"rope_type": "proportional",
                                   "rope_theta": float(c.get("global_rope_wavelength") or 1_000_000.0),
                                   "partial_rotary_factor": float(c.get("global_rope_partial_rotary_factor", 1.0))}},
            "hidden_size_per_layer_input": c.get("hidden_size_per_layer_input") or 0,
            "vocab_size_per_layer_input": c.get("vocab_size_per_layer_input") or c["vocabulary_size"],
            "num_kv_shared_layers": c.get("num_kv_shared_layers") or 0,
            "use_double_wide_mlp": bool(c.get("use_double_wide_mlp")),
            "enable_moe_block": moe, "num_experts": c.get("num_experts") if moe else None,
            "top_k_experts": c.get("num_experts_per_token") if moe else None,
            "moe_intermediate_size": c.get("expert_intermediate_dim") if moe else None}
    towers = {f"{t}_config": {} for t in ("vision", "audio") if c.get(f"{t}_encoder")}
    if towers:
        return {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"],
                "text_config": text, **towers}
    return text


def _hf_config_3n(c: dict[str, Any]) -> dict[str, Any]:
    """keras-hub's ``Gemma3nBackbone`` arguments (the inverse of ``convert_gemma3n``'s)."""
    if c.get("hidden_activation") not in ("gelu_approximate", "gelu_pytorch_tanh"):
        raise ArchError(f"a Keras Gemma 3n preset with {c.get('hidden_activation')!r} activations",
                        "unsupported", "gemma3n")
    text = {"model_type": "gemma3n_text", "architectures": ["Gemma3nForCausalLM"],
            "vocab_size": c["text_vocab_size"], "vocab_size_per_layer_input": c["vocab_size_per_layer_input"],
            "hidden_size": c["text_hidden_size"], "intermediate_size": c["intermediate_size"],
            "num_hidden_layers": c["num_hidden_layers"], "num_attention_heads": c["num_attention_heads"],
            "num_key_value_heads": c["num_key_value_heads"], "head_dim": c["head_dim"],
            "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": c.get("rms_norm_eps", 1e-6),
            "sliding_window": c["sliding_window"], "layer_types": c["layer_types"],
            "rope_theta": c["rope_theta"], "rope_local_base_freq": c.get("rope_local_base_freq", 10_000.0),
            "rope_scaling": c.get("rope_scaling"), "final_logit_softcapping": c.get("final_logit_soft_cap"),
            "hidden_size_per_layer_input": c["hidden_size_per_layer_input"],
            "altup_num_inputs": c["altup_num_inputs"], "altup_coef_clip": c.get("altup_coef_clip"),
            "altup_active_idx": c.get("altup_active_idx", 0), "altup_correct_scale": c.get("altup_correct_scale", True),
            "num_kv_shared_layers": c.get("num_kv_shared_layers", 0), "laurel_rank": c["laurel_rank"],
            "activation_sparsity_pattern": c.get("activation_sparsity_pattern")}
    if c.get("rope_scaling"):
        raise ArchError("a Keras Gemma 3n preset with RoPE scaling", "unsupported", "gemma3n")
    towers = {f"{t}_config": {} for t in ("vision", "audio") if c.get(f"{t}_encoder_config")}
    if towers:
        return {"model_type": "gemma3n", "architectures": ["Gemma3nForConditionalGeneration"],
                "text_config": text, **towers}
    return text


# --------------------------------------------------------------------------- the name map

_NORMS = {"pre_attention_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
          "pre_ffw_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
          "post_ffw_norm_dense": "post_feedforward_layernorm_1",
          "pre_ffw_norm_moe": "pre_feedforward_layernorm_2",
          "post_ffw_norm_moe_path": "post_feedforward_layernorm_2",
          "post_per_layer_input_norm": "post_per_layer_input_norm",
          "attention/query_norm": "self_attn.q_norm", "attention/key_norm": "self_attn.k_norm"}
_LINEAR = {"ffw_gating": "mlp.gate_proj", "ffw_gating_2": "mlp.up_proj", "ffw_linear": "mlp.down_proj",
           "per_layer_input_gate": "per_layer_input_gate", "per_layer_up_proj": "per_layer_projection",
           "moe_router/proj": "router.proj"}
_TOP = {"token_embedding": ("embed_tokens.weight", False), "final_normalization": ("norm.weight", False),
        "per_layer_token_embedding": ("embed_tokens_per_layer.weight", False),
        "per_layer_model_projection": ("per_layer_model_projection.weight", True),
        "per_layer_projection_norm": ("per_layer_projection_norm.weight", False)}

Rule = tuple[list[str], Callable[..., np.ndarray], Callable[..., tuple[int, ...]]]

# Gemma 3n (keras ``Dense`` kernels are [in, out], HF's [out, in]; names under text_model/)
_3N_SAME = {"embed_tokens/embedding": "embed_tokens.weight",
            "embed_tokens_per_layer/embedding": "embed_tokens_per_layer.weight",
            "norm": "norm.weight", "per_layer_projection_norm": "per_layer_projection_norm.weight"}
_3N_BLOCK_SAME = {"attention/q_norm": "self_attn.q_norm.weight", "attention/k_norm": "self_attn.k_norm.weight",
                  "altup": "altup.correct_output_scale", "altup/router_norm": "altup.router_norm.weight",
                  "laurel/post_laurel_norm": "laurel.post_laurel_norm.weight",
                  **{n: f"{n}.weight" for n in ("input_layernorm", "post_attention_layernorm",
                                                "pre_feedforward_layernorm", "post_feedforward_layernorm",
                                                "post_per_layer_input_norm")}}
_3N_BLOCK_DENSE = {"attention/q_proj": "self_attn.q_proj", "attention/k_proj": "self_attn.k_proj",
                   "attention/v_proj": "self_attn.v_proj", "attention/o_proj": "self_attn.o_proj",
                   "mlp/gate_proj": "mlp.gate_proj", "mlp/up_proj": "mlp.up_proj", "mlp/down_proj": "mlp.down_proj",
                   "altup/correction_coefs": "altup.correction_coefs",
                   "altup/prediction_coefs": "altup.prediction_coefs",
                   "altup/modality_router": "altup.modality_router", "laurel/linear_left": "laurel.linear_left",
                   "laurel/linear_right": "laurel.linear_right", "per_layer_input_gate": "per_layer_input_gate",
                   "per_layer_projection": "per_layer_projection"}


def _rule_3n(name: str, key: str) -> tuple[str, Rule] | None:
    """The HF name (``model.language_model.`` prefix) and rule of one Gemma 3n variable."""
    p = "model.language_model."
    same: Rule = ([key], _same, lambda s: s)
    t: Rule = ([key], _t, lambda s: s[::-1])
    if name in _3N_SAME:
        return p + _3N_SAME[name], same
    if name == "per_layer_model_projection":
        return p + "per_layer_model_projection.weight", t
    m = re.fullmatch(r"altup_(unembed_)?projection_(\d+)", name)
    if m:  # keras numbers them from 1, transformers' lists from 0
        return f"{p}altup_{m.group(1) or ''}projections.{int(m.group(2)) - 1}.weight", t
    m = re.fullmatch(r"decoder_block_(\d+)/(.+)", name)
    if not m:
        return None
    block, sub = f"{p}layers.{m.group(1)}.", m.group(2)
    if sub in _3N_BLOCK_SAME:
        return block + _3N_BLOCK_SAME[sub], same
    if sub in _3N_BLOCK_DENSE:
        return block + _3N_BLOCK_DENSE[sub] + ".weight", t
    return None


def _same(x):
    return x


def _t(x):
    return np.asarray(x).T


def _heads_in(x):  # [N, D, H] → [N·H, D]
    n, d, h = x.shape
    return np.asarray(x).transpose(0, 2, 1).reshape(n * h, d)


def _heads_out(x):  # [N, H, D] → [D, N·H]
    n, h, d = x.shape
    return np.asarray(x).reshape(n * h, d).T


def _gate_up(g, u):  # 2 × [E, D, I] → [E, 2I, D]
    return np.concatenate([np.asarray(g).transpose(0, 2, 1), np.asarray(u).transpose(0, 2, 1)], axis=1)


def _rules(keys: dict[str, tuple[int, ...]]) -> dict[str, Rule]:
    """HF name (``model.`` prefix; Gemma 3n ``model.language_model.``) → (keras keys, how, its
    shape) for the keys present."""
    out: dict[str, Rule] = {}
    for key in keys:
        name, _, index = key.rpartition(":")
        if "text_model/" in name:  # Gemma 3n: its text model sits inside the embedding processor
            found = _rule_3n(name.split("text_model/", 1)[1], key) if index == "0" else None
            if found:
                out[found[0]] = found[1]
            continue
        if name in _TOP and index == "0":
            hf, transpose = _TOP[name]
            out["model." + hf] = ([key], _t if transpose else _same,
                                  (lambda s: s[::-1]) if transpose else (lambda s: s))
            continue
        m = re.fullmatch(r"decoder_block_(\d+)(?:/(.+))?", name)
        if not m:
            continue  # a vision/audio tower, the pooling head: not the text model
        p, sub = f"model.layers.{m.group(1)}.", m.group(2) or ""
        if sub == "" and index == "0":
            out[p + "layer_scalar"] = ([key], lambda x: np.reshape(x, (1,)), lambda s: (1,))
        elif sub in _NORMS:
            out[p + _NORMS[sub] + ".weight"] = ([key], _same, lambda s: s)
        elif sub in ("attention/query", "attention/key", "attention/value"):
            proj = {"query": "q", "key": "k", "value": "v"}[sub.split("/")[1]]
            out[f"{p}self_attn.{proj}_proj.weight"] = ([key], _heads_in, lambda s: (s[0] * s[2], s[1]))
        elif sub == "attention/attention_output":
            out[p + "self_attn.o_proj.weight"] = ([key], _heads_out, lambda s: (s[2], s[0] * s[1]))
        elif sub in _LINEAR:
            out[p + _LINEAR[sub] + ".weight"] = ([key], _t, lambda s: s[::-1])
        elif sub == "moe_router":
            out[p + "router.scale"] = ([key], _same, lambda s: s)
        elif sub == "moe_expert_bank" and index == "0":
            out[p + "experts.gate_up_proj"] = ([key, f"{name}:1"], _gate_up,
                                               lambda g, u: (g[0], g[2] + u[2], g[1]))
            out[p + "experts.down_proj"] = ([f"{name}:2"], lambda x: np.asarray(x).transpose(0, 2, 1),
                                            lambda s: (s[0], s[2], s[1]))
            out[p + "router.per_expert_scale"] = ([f"{name}:3"], _same, lambda s: s)
    return out


class KerasPresetTensors:
    """A Keras preset's text weights under Hugging Face names, read one at a time."""

    def __init__(self, folder: str | Path):
        import h5py

        self.folder = Path(folder)
        index = self.folder / "model.weights.json"
        if (self.folder / "model.weights.h5").is_file():
            files = [self.folder / "model.weights.h5"]
        elif index.is_file():
            shards = json.loads(index.read_text()).get("weight_map", {}).values()
            names = sorted({f for v in shards for f in (v if isinstance(v, list) else [v])})
            files = [self.folder / f for f in names]
        else:
            raise FileNotFoundError(f"{self.folder} has no model.weights.h5 (nor model.weights.json)")
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"{self.folder}: shard {missing[0]} is missing")
        self._files = {f: h5py.File(f, "r") for f in files}
        labels: dict[str, str] = {}
        datasets: dict[str, tuple[Any, str]] = {}
        for h5 in self._files.values():
            def visit(path: str, obj: Any, h5: Any = h5) -> None:
                parts = path.split("/")
                if parts[-1] == "vars" and "name" in obj.attrs:
                    labels["/".join(parts[:-1])] = str(obj.attrs["name"])
                elif len(parts) >= 2 and parts[-2] == "vars" and isinstance(obj, h5py.Dataset):
                    datasets[path] = (h5, path)
            h5.visititems(visit)
        self._data: dict[str, tuple[Any, str]] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        for path, where in datasets.items():
            parts = path.split("/")[:-2]  # the layer's group; then its index in vars/
            chain = ["/".join(parts[:i]) for i in range(2, len(parts) + 1)]  # below "layers/"
            key = "/".join(labels[g] for g in chain if g in labels) + ":" + path.split("/")[-1]
            self._data[key] = where
            self._shapes[key] = tuple(where[0][where[1]].shape)
        self._rules = _rules(self._shapes)
        self.where = {name: name for name in self._rules}

    def keras_keys(self) -> dict[str, tuple[int, ...]]:
        """``layer name path:index`` → shape, for every variable in the file(s)."""
        return dict(self._shapes)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: tuple(int(x) for x in shape(*(self._shapes[k] for k in keys)))
                for name, (keys, _, shape) in self._rules.items()}

    def get(self, name: str) -> np.ndarray:
        keys, how, _ = self._rules[name]
        arrays = []
        for k in keys:
            h5, path = self._data[k]
            ds = h5[path]
            value = np.asarray(ds[()])
            if ds.attrs.get("dtype") == "bfloat16":  # keras stores bfloat16 as 2-byte opaque
                import ml_dtypes

                value = value.view(ml_dtypes.bfloat16).reshape(ds.shape)
            arrays.append(value)
        return np.ascontiguousarray(how(*arrays))

    def close(self) -> None:
        for h5 in self._files.values():
            h5.close()

    def __enter__(self) -> KerasPresetTensors:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
