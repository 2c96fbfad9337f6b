"""The ``[mesh]`` section as a Keras distribution: DeviceMesh(("batch", "model")) + LayoutMap.

``plan_layout(dims, data=, tensor=, batch_size=)`` is pure: it returns the LayoutMap rules for
the base weights and the notes, or raises ``WorkbenchError`` naming what does not divide, before
anything is built. Rules:

- ``token_embedding/embeddings`` [vocab, hidden]: vocab on ``model`` (else hidden, else replicated);
- ``attention/query|attention_output/kernel`` [heads, …]: heads on ``model`` (must divide);
- ``attention/key|value/kernel`` [kv_heads, …]: kv heads on ``model`` when they divide, else
  replicated (Gemma 3 small models have 1 KV head);
- ``ffw_gating|ffw_gating_2/kernel`` [hidden, ffw]: ffw on ``model``; ``ffw_linear/kernel`` [ffw, hidden].

Every regex ends in ``/kernel$`` or ``/embeddings$``, so it never matches a LoRA kernel
(``…/query/lora_kernel_a``; keras #19496): LoRA kernels and norm scales stay replicated.
The same rules serve GemmaBackbone, Gemma2 and Gemma3Backbone (which has no stock layout map).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adapters_lib.errors import WorkbenchError

BLOCK = r"(?:^|/)decoder_block_\d+/"
EMBEDDING = r"(?:^|/)token_embedding/embeddings$"
QUERY_OUT = BLOCK + r"attention/(?:query|attention_output)/kernel$"
KEY_VALUE = BLOCK + r"attention/(?:key|value)/kernel$"
FFW_IN = BLOCK + r"ffw_gating(?:_2)?/kernel$"
FFW_OUT = BLOCK + r"ffw_linear/kernel$"


@dataclass(frozen=True)
class ModelDims:
    vocab: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffw: int
    layers: int

    @classmethod
    def from_keras_config(cls, class_name: str, c: dict[str, Any]) -> ModelDims:
        """From a keras-hub backbone config (GemmaBackbone's intermediate_dim is 2× the kernel's)."""
        ffw = c["intermediate_dim"] // 2 if class_name == "GemmaBackbone" else c["intermediate_dim"]
        return cls(vocab=c["vocabulary_size"], hidden=c["hidden_dim"], heads=c["num_query_heads"],
                   kv_heads=c["num_key_value_heads"], head_dim=c["head_dim"], ffw=ffw, layers=c["num_layers"])


@dataclass
class LayoutPlan:
    data: int
    tensor: int
    rules: dict[str, tuple[str | None, ...]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return "ModelParallel" if self.tensor > 1 else ("DataParallel" if self.data > 1 else "single device")


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def plan_layout(dims: ModelDims, *, data: int, tensor: int, batch_size: int) -> LayoutPlan:
    """LayoutMap rules for a (data × tensor) mesh; a WorkbenchError lists what does not divide."""
    problems: list[str] = []
    if batch_size % data:
        problems.append(f"train.batch_size {batch_size} does not split over mesh.data {data} "
                        f"(batch_size must be a multiple of {data})")
    plan = LayoutPlan(data=data, tensor=tensor)
    m = tensor
    if m > 1:
        if dims.heads % m:
            problems.append(f"{dims.heads} query heads do not divide over mesh.tensor {m} "
                            f"(use mesh.tensor in {_divisors(dims.heads)})")
        if dims.ffw % m:
            problems.append(f"the FFW width {dims.ffw} does not divide over mesh.tensor {m}")
    if problems:
        raise WorkbenchError("; ".join(problems), where="[mesh]",
                             hint="change [mesh] data/tensor or [train] batch_size")
    if m == 1:
        return plan
    if dims.vocab % m == 0:
        plan.rules[EMBEDDING] = ("model", None)
    elif dims.hidden % m == 0:
        plan.rules[EMBEDDING] = (None, "model")
        plan.notes.append(f"vocab {dims.vocab} does not divide by {m}: embeddings sharded on the hidden dim")
    else:
        plan.notes.append("embeddings replicated (neither vocab nor hidden divides by mesh.tensor)")
    plan.rules[QUERY_OUT] = ("model", None, None)
    if dims.kv_heads % m == 0:
        plan.rules[KEY_VALUE] = ("model", None, None)
    else:
        plan.notes.append(f"{dims.kv_heads} KV head(s) on a {m}-way model axis: key/value kernels replicated")
    plan.rules[FFW_IN] = (None, "model")
    plan.rules[FFW_OUT] = ("model", None)
    return plan


def make_distribution(plan: LayoutPlan, devices: list[Any] | None = None):
    """The keras distribution for ``plan`` (None on one device). Keras must already be imported."""
    import keras

    devices = devices or keras.distribution.list_devices()
    n = plan.data * plan.tensor
    if n != len(devices):
        raise WorkbenchError(f"mesh data×tensor = {plan.data}×{plan.tensor} = {n}, but there are {len(devices)} devices",
                             where="[mesh]", hint=f"make the product {len(devices)}, or set one axis to -1")
    if n == 1:
        return None
    if plan.tensor == 1:
        return keras.distribution.DataParallel(devices=devices)
    mesh = keras.distribution.DeviceMesh((plan.data, plan.tensor), ("batch", "model"), devices)
    layout_map = keras.distribution.LayoutMap(mesh)
    for regex, axes in plan.rules.items():
        layout_map[regex] = axes
    return keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
