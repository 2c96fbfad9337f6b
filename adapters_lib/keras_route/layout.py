"""The ``[mesh]`` section as a Keras distribution: DeviceMesh(("batch", "model")) + LayoutMap.

``plan_layout(dims, data=, tensor=, batch_size=)`` is pure: it returns the LayoutMap rules for
the base weights and the notes, or raises ``WorkbenchError`` naming what does not divide, before
anything is built. Rules (keras-hub's variable paths):

- ``token_embedding/embeddings`` [vocab, hidden]: vocab on ``model`` (else hidden, else replicated);
- ``attention/query|attention_output/kernel`` [heads, …]: heads on ``model`` (must divide);
- ``attention/key|value/kernel`` [kv_heads, …]: kv heads on ``model`` when they divide (on every
  layer: Gemma 4's global layers have their own count), else replicated (1 KV head);
- ``ffw_gating|ffw_gating_2/kernel`` [hidden, ffw]: ffw on ``model``; ``ffw_linear/kernel`` [ffw, hidden];
- Gemma 4's expert bank ``moe_expert_bank/gate_proj|up_proj`` [E, hidden, I] and ``down_proj``
  [E, I, hidden]: the experts on ``model`` (else the expert width I);
- the per-layer-input tables (Gemma 4 E-models, Gemma 3n) ``…/embeddings`` [vocab, L·P] and
  their projection [hidden, L·P]: the L·P columns on ``model`` (the table is the biggest
  weight of an E-model);
- Gemma 3n's ``keras.layers.Dense`` kernels [in, out]: ``q_proj``/``k_proj``/``v_proj``/
  ``gate_proj``/``up_proj`` on their out dim, ``o_proj``/``down_proj`` on their in dim.

Every regex ends in ``/kernel$``, ``/embeddings$`` or the expert bank's ``_proj$``, so it never
matches a LoRA kernel (``…/query/lora_kernel_a``, ``…/moe_expert_bank/lora_experts_gate_a``;
keras #19496): LoRA kernels and norm scales stay replicated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from adapters_lib.errors import WorkbenchError

BLOCK = r"(?:^|/)decoder_block_\d+/"
EMBEDDING = r"(?:^|/)(?:token_embedding|embed_tokens/embedding)/embeddings$"
QUERY_OUT = BLOCK + r"attention/(?:query|attention_output)/kernel$"
KEY_VALUE = BLOCK + r"attention/(?:key|value)/kernel$"
FFW_IN = BLOCK + r"ffw_gating(?:_2)?/kernel$"
FFW_OUT = BLOCK + r"ffw_linear/kernel$"
EXPERTS_IN = BLOCK + r"moe_expert_bank/(?:gate_proj|up_proj)$"
EXPERTS_OUT = BLOCK + r"moe_expert_bank/down_proj$"
PER_LAYER_TABLE = r"(?:^|/)(?:per_layer_token_embedding|embed_tokens_per_layer/embedding)/embeddings$"
PER_LAYER_PROJECTION = r"(?:^|/)per_layer_model_projection/kernel$"
DENSE_OUT_SHARDED = BLOCK + r"(?:attention/q_proj|mlp/gate_proj|mlp/up_proj)/kernel$"
DENSE_IN_SHARDED = BLOCK + r"(?:attention/o_proj|mlp/down_proj)/kernel$"
DENSE_KEY_VALUE = BLOCK + r"attention/(?:k_proj|v_proj)/kernel$"


@dataclass(frozen=True)
class ModelDims:
    """What the layout and the checks need of a keras-hub Gemma: read from its config."""

    vocab: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffw: int  # the FFW width (Gemma 3n: the gcd of its per-layer widths)
    layers: int
    global_kv_heads: int = 0  # Gemma 4's global layers, when they have their own count
    experts: int = 0  # Gemma 4's MoE expert bank
    expert_dim: int = 0
    per_layer: int = 0  # hidden size of the per-layer inputs (Gemma 4 E-models, Gemma 3n)
    per_layer_vocab: int = 0
    dense_kernels: bool = False  # Gemma 3n: keras Dense [in, out] kernels, not EinsumDense

    @classmethod
    def from_keras_config(cls, class_name: str, c: dict[str, Any]) -> ModelDims:
        """From a keras-hub backbone config (GemmaBackbone's intermediate_dim is 2× the kernel's)."""
        if class_name == "Gemma3nBackbone":
            widths = c["intermediate_size"]
            widths = widths if isinstance(widths, list) else [widths]
            return cls(vocab=c["text_vocab_size"], hidden=c["text_hidden_size"],
                       heads=c["num_attention_heads"], kv_heads=c["num_key_value_heads"],
                       head_dim=c["head_dim"], ffw=math.gcd(*map(int, widths)),
                       layers=c["num_hidden_layers"], per_layer=c.get("hidden_size_per_layer_input") or 0,
                       per_layer_vocab=c.get("vocab_size_per_layer_input") or c["text_vocab_size"],
                       dense_kernels=True)
        ffw = c["intermediate_dim"] // 2 if class_name == "GemmaBackbone" else c["intermediate_dim"]
        extra: dict[str, Any] = {}
        if class_name == "Gemma4Backbone":
            extra = dict(global_kv_heads=c.get("num_global_key_value_heads") or 0,
                         experts=(c.get("num_experts") or 0) if c.get("enable_moe_block") else 0,
                         expert_dim=c.get("expert_intermediate_dim") or 0,
                         per_layer=c.get("hidden_size_per_layer_input") or 0,
                         per_layer_vocab=c.get("vocab_size_per_layer_input") or c["vocabulary_size"])
        return cls(vocab=c["vocabulary_size"], hidden=c["hidden_dim"], heads=c["num_query_heads"],
                   kv_heads=c["num_key_value_heads"], head_dim=c["head_dim"], ffw=ffw,
                   layers=c["num_layers"], **extra)


@dataclass
class LayoutPlan:
    data: int
    tensor: int
    rules: dict[str, tuple[str | None, ...]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    devices: int = 0  # the first N devices (0: all)

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
    kv = [k for k in (dims.kv_heads, dims.global_kv_heads) if k]
    kv_sharded = all(k % m == 0 for k in kv)
    if not kv_sharded:
        plan.notes.append(f"{'/'.join(map(str, kv))} KV head(s) on a {m}-way model axis: "
                          "key/value kernels replicated")
    if dims.dense_kernels:  # Gemma 3n: Dense [in, out]
        plan.rules[DENSE_OUT_SHARDED] = (None, "model")
        plan.rules[DENSE_IN_SHARDED] = ("model", None)
        if kv_sharded:
            plan.rules[DENSE_KEY_VALUE] = (None, "model")
    else:
        plan.rules[QUERY_OUT] = ("model", None, None)
        if kv_sharded:
            plan.rules[KEY_VALUE] = ("model", None, None)
        plan.rules[FFW_IN] = (None, "model")
        plan.rules[FFW_OUT] = ("model", None)
    if dims.experts:
        if dims.experts % m == 0:
            plan.rules[EXPERTS_IN] = plan.rules[EXPERTS_OUT] = ("model", None, None)
            plan.notes.append(f"expert bank: {dims.experts} experts split over the {m}-way model axis")
        elif dims.expert_dim % m == 0:
            plan.rules[EXPERTS_IN] = (None, None, "model")
            plan.rules[EXPERTS_OUT] = (None, "model", None)
            plan.notes.append(f"expert bank: {dims.experts} experts do not divide by {m}: "
                              f"each expert's width {dims.expert_dim} is split instead")
        else:
            plan.notes.append("expert bank replicated (neither the experts nor their width divide)")
    if dims.per_layer:
        columns = dims.layers * dims.per_layer
        if columns % m == 0:
            plan.rules[PER_LAYER_TABLE] = (None, "model")
            plan.rules[PER_LAYER_PROJECTION] = (None, "model")
        else:
            plan.notes.append(f"per-layer input table replicated ({columns} columns do not divide by {m})")
    return plan


def plan_for(cfg: Any, dims: ModelDims) -> LayoutPlan:
    """The plan of a run config: ``[mesh] data``/``tensor`` over its devices (``[mesh] devices``:
    the first N; 0 = all of them)."""
    import jax

    from adapters_lib.config import MeshSpec

    n = cfg.mesh.devices or len(jax.devices())
    mesh = MeshSpec(data=cfg.mesh.data, fsdp=1, tensor=cfg.mesh.tensor).resolve(n)
    plan = plan_layout(dims, data=mesh.data, tensor=mesh.tensor, batch_size=cfg.train.batch_size)
    plan.devices = n
    return plan


def make_distribution(plan: LayoutPlan, devices: list[Any] | None = None):
    """The keras distribution for ``plan`` (None on one device). Keras must already be imported."""
    import keras

    devices = devices or keras.distribution.list_devices()[:plan.devices or None]
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
