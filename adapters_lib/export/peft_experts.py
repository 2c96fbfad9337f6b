"""The ``experts`` adapters of a Gemma 4 MoE bank in HF PEFT's layout.

transformers keeps the bank as two parameters of ``Gemma4TextExperts`` (``gate_up_proj`` (E, 2X,
D), ``down_proj`` (E, D, X)), not ``nn.Linear`` layers: PEFT adapts them with
``target_parameters`` and its ``lora.ParamWrapper``, which reads a 3-D parameter as
``(experts, in, out)`` and holds ``lora_A.weight`` (r·E, in) and ``lora_B.weight`` (out, r·E);
its delta is ``einsum("o r e, e r i -> e i o", B.reshape(out, r, E), A.reshape(E, r, in)) ·
alpha/r``, added to the parameter as it lies. A second parameter of the same module wraps the
first wrapper: ``gate_up_proj`` (registered first) is the inner one (``experts.base_layer.lora_*``),
``down_proj`` the outer (``experts.lora_*``). Written from PEFT's source (``tuners/lora/layer.py``,
``tuners/tuners_utils.py``); PEFT itself (torch) is not installed here, the test applies that
formula in numpy.

Ours are per expert ``gate``/``up`` ``A (E, D, r)``, ``B (E, r, X)`` and ``down`` ``A (E, X, r)``,
``B (E, r, D)`` (``lora.experts``). ``down_proj``'s delta ``(A_d·B_d)ᵀ`` is rank r as it is;
``gate_up_proj``'s stacks the gate and up deltas, rank 2r: it is written at rank 2r
(``rank_pattern``, ``alpha_pattern`` = 2·alpha keep the scale alpha/r), the off-diagonal blocks
zero. Reading one back, a non-zero off-diagonal block (an adapter trained by PEFT itself)
cannot be split into gate and up: refused in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from adapters_lib.errors import WorkbenchError

PARAMETERS = ("experts.gate_up_proj", "experts.down_proj")
PREFIX = "lora_experts"


def names(prefix: str, layer: int) -> dict[str, str]:
    """PEFT's tensor names of one layer's expert adapters (``prefix``: ``…model.layers``)."""
    base = f"{prefix}.{layer}.experts"
    return {"gate_up_A": f"{base}.base_layer.lora_A.weight", "gate_up_B": f"{base}.base_layer.lora_B.weight",
            "down_A": f"{base}.lora_A.weight", "down_B": f"{base}.lora_B.weight"}


def _pack(a_peft: np.ndarray, b_peft: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``A (E, r, in)``, ``B (out, r, E)`` → PEFT's ``lora_A.weight (r·E, in)``, ``lora_B.weight (out, r·E)``."""
    e, r, fin = a_peft.shape
    return a_peft.reshape(e * r, fin), b_peft.reshape(b_peft.shape[0], r * e)


def _unpack(a: np.ndarray, b: np.ndarray, experts: int) -> tuple[np.ndarray, np.ndarray]:
    r = a.shape[0] // experts
    return a.reshape(experts, r, a.shape[1]), b.reshape(b.shape[0], r, experts)


def layer_tensors(node: Mapping[str, Any], prefix: str, layer: int) -> dict[str, np.ndarray]:
    """One MoE layer's ``experts`` adapters (``layer_i/mlp``'s ``lora_experts_*``) as PEFT tensors."""
    def get(name: str) -> np.ndarray:
        return np.asarray(node[f"{PREFIX}_{name}"], np.float32)

    ag, bg, au, bu = get("gate_a"), get("gate_b"), get("up_a"), get("up_b")
    e, _, r = ag.shape
    x = bg.shape[2]
    # gate_up_proj[e] (2X, D) += [Bgᵀ Agᵀ; Buᵀ Auᵀ]: PEFT's A[e] (2r, 2X) = blockdiag(Bg, Bu),
    # its B[:, :, e] (D, 2r) = [Ag, Au]
    a_peft = np.zeros((e, 2 * r, 2 * x), np.float32)
    a_peft[:, :r, :x], a_peft[:, r:, x:] = bg, bu
    b_peft = np.concatenate([ag, au], axis=2).transpose(1, 2, 0)
    gate_up = _pack(a_peft, b_peft)
    # down_proj[e] (D, X) += (Ad Bd)ᵀ = Bdᵀ Adᵀ: PEFT's A[e] (r, D) = Bd, its B[:, :, e] (X, r) = Ad
    down = _pack(get("down_b"), get("down_a").transpose(1, 2, 0))
    n = names(prefix, layer)
    return {n["gate_up_A"]: gate_up[0], n["gate_up_B"]: gate_up[1], n["down_A"]: down[0], n["down_B"]: down[1]}


def read_layer(tensors: Mapping[str, np.ndarray], prefix: str, layer: int, experts: int,
               where: str) -> dict[str, np.ndarray]:
    """The inverse of ``layer_tensors``: ``{f"lora_experts_{t}_{a|b}": …}`` for one layer."""
    n = names(prefix, layer)
    missing = [v for v in n.values() if v not in tensors]
    if missing:
        raise WorkbenchError(f"adapter tensor {missing[0]} is missing", where=where,
                             hint="the adapter was made for another model or other targets")
    a, b = _unpack(np.asarray(tensors[n["gate_up_A"]]), np.asarray(tensors[n["gate_up_B"]]), experts)
    r, x = a.shape[1] // 2, a.shape[2] // 2
    if np.any(a[:, :r, x:]) or np.any(a[:, r:, :x]):
        raise WorkbenchError(f"{n['gate_up_A']} mixes the gate and up halves: not an adapter of "
                             "separate gate and up experts", where=where,
                             hint="export adapters trained here, or merge this one with PEFT")
    da, db = _unpack(np.asarray(tensors[n["down_A"]]), np.asarray(tensors[n["down_B"]]), experts)
    return {f"{PREFIX}_gate_a": b[:, :r, :].transpose(2, 0, 1), f"{PREFIX}_gate_b": a[:, :r, :x],
            f"{PREFIX}_up_a": b[:, r:, :].transpose(2, 0, 1), f"{PREFIX}_up_b": a[:, r:, x:],
            f"{PREFIX}_down_a": db.transpose(2, 0, 1), f"{PREFIX}_down_b": da}


def config_fields(rank: int, alpha: float) -> dict[str, Any]:
    """``adapter_config.json`` fields for the expert parameters."""
    return {"target_parameters": list(PARAMETERS),
            "rank_pattern": {PARAMETERS[0]: 2 * rank}, "alpha_pattern": {PARAMETERS[0]: 2 * alpha}}
