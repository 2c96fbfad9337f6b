"""LoRA on Gemma 4's MoE expert bank (keras-hub's ``Gemma4MoEBlock``): the ``experts`` target.

keras-hub's ``enable_lora`` reaches ``EinsumDense``/``Dense`` layers only; the expert bank holds
its weights as plain variables (``gate_proj``/``up_proj`` [E, hidden, I], ``down_proj``
[E, I, hidden]) and multiplies them with ``ops.einsum``, so its LoRA is built here, as on the
gemma route (``adapters_lib.lora.experts``): each expert gets its own low-rank pair on each
projection (``lora_experts_gate_a`` [E, hidden, r] and ``…_gate_b`` [E, r, I], the same for up,
``…_down_a`` [E, I, r] and ``…_down_b`` [E, r, hidden]; A he-uniform, B zeros; scale
alpha/rank). They act on the activations, beside the frozen bank:
``x·W_e + (x·A_e)·B_e · alpha/r`` for every expert ``e`` (keras-hub computes every expert for
every token and combines them by the router's weights, so an adapter's gradient is that of its
expert's routed tokens). The router and ``per_expert_scale`` stay frozen.

The bank's class is swapped for ``LoraMoEBlock`` (same weights, a ``call`` with the adapters);
``expert_adapters(backbone)`` lists the adapter variables for export.
"""

from __future__ import annotations

from typing import Any

NAMES = ("gate", "up", "down")  # the bank's gate_proj, up_proj, down_proj
PREFIX = "lora_experts"


def _lora_block_class() -> type:
    import keras
    from keras import ops
    from keras_hub.src.models.gemma4.gemma4_moe import Gemma4MoEBlock

    class LoraMoEBlock(Gemma4MoEBlock):
        """``Gemma4MoEBlock`` with per-expert low-rank adapters on gate, up and down."""

        def _adapted(self, x: Any, eq: str, name: str, base: Any) -> Any:
            dtype = x.dtype
            out = ops.einsum(eq, x, ops.cast(base, dtype))
            a = ops.cast(getattr(self, f"{PREFIX}_{name}_a"), dtype)
            b = ops.cast(getattr(self, f"{PREFIX}_{name}_b"), dtype)
            low = ops.einsum(eq, x, a)  # A is [E, in, r]: the same contraction gives [E, T, r]
            return out + ops.einsum("etr,ero->eto", low, b) * ops.cast(self.lora_scale, dtype)

        def call(self, x: Any, dispatch_weights: Any) -> Any:
            dtype = x.dtype
            gate = self._adapted(x, "th,ehi->eti", "gate", self.gate_proj)
            up = self._adapted(x, "th,ehi->eti", "up", self.up_proj)
            gate = ops.cast(keras.activations.gelu(ops.cast(gate, "float32"), approximate=True), dtype)
            out = self._adapted(gate * up, "eti,eih->eth", "down", self.down_proj)
            scale = ops.cast(self.per_expert_scale, dtype)
            out = out * ops.reshape(scale, (self.num_experts, 1, 1))
            dw = ops.transpose(ops.cast(dispatch_weights, dtype), (1, 0))
            return ops.sum(out * dw[:, :, None], axis=0)

    return LoraMoEBlock


_CLASS: list[type] = []


def enable_expert_lora(bank: Any, rank: int, alpha: float) -> list[Any]:
    """Give ``bank`` (a built ``Gemma4MoEBlock``) its adapters; freeze its own weights. Returns
    the adapter variables."""
    import keras

    if not _CLASS:
        _CLASS.append(_lora_block_class())
    e, h, i = bank.num_experts, bank.hidden_dim, bank.expert_intermediate_dim
    shapes = {"gate": ((e, h, rank), (e, rank, i)), "up": ((e, h, rank), (e, rank, i)),
              "down": ((e, i, rank), (e, rank, h))}
    bank.trainable = True
    bank._tracker.unlock()
    made = []
    for name in NAMES:
        a_shape, b_shape = shapes[name]
        # he-uniform over each expert's own fan-in (keras' initializer would count E·in)
        limit = (6.0 / a_shape[1]) ** 0.5
        a = bank.add_weight(name=f"{PREFIX}_{name}_a", shape=a_shape, dtype="float32",
                            initializer=keras.initializers.RandomUniform(-limit, limit))
        b = bank.add_weight(name=f"{PREFIX}_{name}_b", shape=b_shape, dtype="float32",
                            initializer="zeros")
        setattr(bank, f"{PREFIX}_{name}_a", a)
        setattr(bank, f"{PREFIX}_{name}_b", b)
        made += [a, b]
    bank._tracker.lock()
    for v in (bank.gate_proj, bank.up_proj, bank.down_proj, bank.per_expert_scale):
        v.trainable = False
    bank.lora_scale = float(alpha) / float(rank)
    bank.__class__ = _CLASS[0]
    return made


def expert_adapters(backbone: Any) -> dict[str, Any]:
    """``{variable path: variable}`` of every expert adapter in ``backbone``."""
    return {v.path: v for v in backbone.weights if f"/{PREFIX}_" in v.path}


def is_lora_b(path: str) -> bool:
    """A LoRA "B" variable (zeroed, the model is its base): keras' or an expert adapter's."""
    return path.endswith("lora_kernel_b") or (f"/{PREFIX}_" in path and path.endswith("_b"))
