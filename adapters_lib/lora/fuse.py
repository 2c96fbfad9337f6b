"""Folding LoRA adapters into base weights and reading them out, in numpy only (no JAX, flax
or gemma: an export or a merge can use it without the model stack).

``fuse_lora`` folds every adapter into the weight it adapts (``W += (alpha/rank)·A·B`` in that
weight's einsum layout; see ``lora.einsum`` for the layouts), which gemma's
``peft.fuse_params`` does not do; ``iter_adapters`` lists the ``(layer, target)`` pairs in PEFT
terms. ``_EINSUM_TARGETS`` (weight name → targets and their slice) is shared with ``lora.einsum``
and ``lora.targeted``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from adapters_lib.config import LORA_TARGETS, LoraSpec
from adapters_lib.models import families

LORA_PREFIX = "lora"

# weight name → the targets it can carry, with the slice index along the leading axis
# (None = the whole weight): the families' LoRA target tables, seen from the weights.
_EINSUM_TARGETS: dict[str, dict[str, int | None]] = families.einsum_targets()


def _is_lora_key(key: str) -> bool:
    return key == LORA_PREFIX or key.startswith(LORA_PREFIX + "_")


def _target_delta(a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    return scale * (np.asarray(a, np.float32) @ np.asarray(b, np.float32))  # in × out


def fuse_lora(params: Mapping[str, Any], spec: LoraSpec, transpose_gating: bool = True) -> dict:
    """Fold adapters into the base weights: ``W += (alpha/rank)·A·B`` per einsum layout.

    ``params`` is a merged tree (base + adapters); returns a plain base tree (numpy).
    """
    scale = spec.scale

    def fuse_node(node: Mapping[str, Any]) -> dict:
        out: dict = {}
        adapters = {k: v for k, v in node.items() if _is_lora_key(k) and not k.startswith(EXPERTS_KEY)}
        experts = {k[len(EXPERTS_KEY) + 1:]: v for k, v in node.items() if k.startswith(EXPERTS_KEY + "_")}
        for key, value in node.items():
            if _is_lora_key(key):
                continue
            out[key] = fuse_node(value) if isinstance(value, Mapping) else value
        if experts:  # an expert bank (Gemma 4 MoE)
            out["gating_einsum"], out["linear"] = fuse_experts(out["gating_einsum"], out["linear"], experts, scale)
        for key, ad in adapters.items():
            if key == LORA_PREFIX:  # attention einsum: weight is out["w"]
                w = np.array(out["w"], np.float32)
                targets = {t[:-2] for t in ad}
                if w.ndim == 4:
                    kind = "qkv_einsum" if w.shape[0] == 3 else "kv_einsum"
                else:
                    kind = ("attn_vec_einsum" if "o" in targets else
                            "k_einsum" if "k" in targets else "q_einsum")
                dtype = np.asarray(out["w"]).dtype
                out["w"] = _fuse_weight(w, kind, ad, scale, transpose_gating).astype(dtype)
            else:
                weight_name = key[len(LORA_PREFIX) + 1:]
                w = np.array(out[weight_name], np.float32)
                dtype = np.asarray(out[weight_name]).dtype
                out[weight_name] = _fuse_weight(w, weight_name, ad, scale, transpose_gating).astype(dtype)
        return out

    return fuse_node(params)


def _fuse_weight(w: np.ndarray, kind: str, adapters: Mapping[str, Any], scale: float,
                 transpose_gating: bool) -> np.ndarray:
    slots = _EINSUM_TARGETS[kind]
    for target, idx in slots.items():
        if f"{target}_a" not in adapters:
            continue
        delta = _target_delta(adapters[f"{target}_a"], adapters[f"{target}_b"], scale)
        if kind in ("q_einsum", "k_einsum"):  # N D H ← (D, N*H)
            n, d, h = w.shape
            w = w + delta.reshape(d, n, h).transpose(1, 0, 2)
        elif kind in ("kv_einsum", "qkv_einsum"):  # C K D H ← (D, K*H)
            _, k, d, h = w.shape
            w[idx] += delta.reshape(d, k, h).transpose(1, 0, 2)
        elif kind == "attn_vec_einsum":  # N H D ← (N*H, D)
            n, h, d = w.shape
            w = w + delta.reshape(n, h, d)
        elif kind == "gating_einsum":  # (2, F, D) transposed ← (D, F)
            w[idx] += delta.T if transpose_gating else delta
        elif kind == "linear":  # F D ← (F, D)
            w = w + delta
    return w


EXPERTS_KEY = "lora_experts"


def fuse_experts(gating: Mapping[str, Any], linear: Mapping[str, Any], ad: Mapping[str, Any],
                 scale: float) -> tuple[dict, dict]:
    """Fold the ``experts`` adapters (``{gate,up,down}_{a,b}``) into an expert bank: gating
    ``w (E, 2, X, D)``, linear ``w (E, X, D)``."""
    g = np.array(gating["w"], np.float32)
    lin = np.array(linear["w"], np.float32)

    def delta(name):
        return scale * np.einsum("eir,ero->eio", np.asarray(ad[f"{name}_a"], np.float32),
                                 np.asarray(ad[f"{name}_b"], np.float32))

    g[:, 0] += delta("gate").transpose(0, 2, 1)
    g[:, 1] += delta("up").transpose(0, 2, 1)
    lin += delta("down")
    return ({**gating, "w": g.astype(np.asarray(gating["w"]).dtype)},
            {**linear, "w": lin.astype(np.asarray(linear["w"]).dtype)})


@dataclasses.dataclass(frozen=True)
class AdapterTensor:
    """One adapter matrix pair, addressed in PEFT terms (for export)."""

    layer: int
    target: str
    a: np.ndarray  # in × r
    b: np.ndarray  # r × out


def iter_adapters(lora: Mapping[str, Any]) -> list[AdapterTensor]:
    """Every (layer, target) adapter in a LoRA tree, in layer then target order."""
    found: list[AdapterTensor] = []

    def walk(node: Mapping[str, Any], layer: int | None) -> None:
        for key, value in node.items():
            if isinstance(value, Mapping):
                walk(value, int(key.split("_")[1]) if key.startswith("layer_") else layer)
            elif key.endswith("_a") and key[:-2] in LORA_TARGETS and layer is not None:
                t = key[:-2]
                found.append(AdapterTensor(layer, t, np.asarray(value), np.asarray(node[f"{t}_b"])))

    walk(lora, None)
    order = {t: i for i, t in enumerate(LORA_TARGETS)}
    return sorted(found, key=lambda x: (x.layer, order[x.target]))
