"""The LoRA adapters' shapes and count, from a model config: arithmetic only, no JAX.

``memory.estimate``, ``lora.targeted.expected_lora_params`` and the TUI's LoRA form
(``workbench.widgets.lora_form``, which must not import JAX, even indirectly) use this one count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def config_field(config: Any, name: str, default: Any = None) -> Any:
    """``name`` of a gemma config, or of a mapping of its fields."""
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def num_layers(config: Any) -> int:
    """Layers of a config: ``len(attention_types)``, else its ``num_layers``."""
    types = config_field(config, "attention_types")
    if types is not None:
        return len(types)
    return int(config_field(config, "num_layers", 0))


def uses_qkv(config: Any) -> bool:
    """gemma uses one qkv_einsum when num_heads == num_kv_heads (Gemma 1 style)."""
    return int(config_field(config, "num_heads")) == int(config_field(config, "num_kv_heads"))


_LORA_KIND = {"q": "q_einsum", "k": "kv_einsum", "v": "kv_einsum", "o": "attn_vec_einsum",
              "gate": "gating_einsum", "up": "gating_einsum", "down": "linear"}


def lora_param_shapes(config: Any, rank: int, targets: tuple[str, ...]):
    """(path, shape) of every adapter matrix (A: in×r, B: r×out) for ``targets``."""
    d, f = int(config_field(config, "embed_dim")), int(config_field(config, "hidden_dim"))
    n, h, k = (int(config_field(config, name)) for name in ("num_heads", "head_dim", "num_kv_heads"))
    in_out = {"q": (d, n * h), "k": (d, k * h), "v": (d, k * h), "o": (n * h, d),
              "gate": (d, f), "up": (d, f), "down": (f, d)}
    qkv = uses_qkv(config)
    out = []
    for i in range(num_layers(config)):
        for t in targets:
            kind = _LORA_KIND[t]
            if qkv and kind in ("q_einsum", "kv_einsum"):
                kind = "qkv_einsum"
            block = "mlp" if t in ("gate", "up", "down") else "attn"
            node = (f"lora_{kind}",) if block == "mlp" else (kind, "lora")
            fin, fout = in_out[t]
            out.append(((f"layer_{i}", block, *node, f"{t}_a"), (fin, rank)))
            out.append(((f"layer_{i}", block, *node, f"{t}_b"), (rank, fout)))
    return out


def lora_param_count(config: Any, rank: int, targets: tuple[str, ...] | list[str]) -> int:
    """Adapter parameters for ``targets`` at ``rank``: the one count (``lora.expected_lora_params``
    and the TUI's LoRA form call it). ``config``: a gemma config or a mapping of its fields
    (``num_layers`` may stand for ``attention_types``)."""
    return sum(math.prod(shape) for _, shape in lora_param_shapes(config, int(rank), tuple(targets)))
