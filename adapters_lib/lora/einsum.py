"""The adapted einsum: a gemma ``Einsum`` plus scaled low-rank updates on its chosen slices.

Each target's adapter is a pair of 2-D matrices in the PEFT convention (``A: in×r``, ``B: r×out``,
B zero-initialised so step 0 equals the base model), and the update is scaled by
``alpha / rank``. Targets map onto gemma's einsums:

======  ==========================================  ============================
target  gemma einsum (weight)                       slice
======  ==========================================  ============================
q       ``attn/q_einsum``  (N, D, H)                all; or ``qkv_einsum[0]``
k       ``attn/kv_einsum`` (2, K, D, H)             ``[0]``; or ``qkv_einsum[1]``
v       ``attn/kv_einsum``                          ``[1]``; or ``qkv_einsum[2]``
o       ``attn/attn_vec_einsum`` (N, H, D)          all
gate    ``mlp/gating_einsum`` (2, F, D) transposed  ``[0]``
up      ``mlp/gating_einsum``                       ``[1]``
down    ``mlp/linear`` (F, D)                       all
======  ==========================================  ============================

``lora.targeted`` puts a ``TargetedLoRAEinsum`` in place of each chosen einsum.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn

from adapters_lib.kernels.lora_matmul import lora_matmul, lora_matmul_slots
from adapters_lib.lora.fuse import _EINSUM_TARGETS


def _slice_in_out(kind: str, shape: tuple[int, ...]) -> tuple[int, int, str]:
    """(in features, out features, layout) of one target slice of a weight."""
    if kind in ("q_einsum", "k_einsum"):  # N D H (K D H): x[BTD] → [BTNH]
        n, d, h = shape
        return d, n * h, "d_nh"
    if kind in ("kv_einsum", "qkv_einsum"):  # C K D H
        _, k, d, h = shape
        return d, k * h, "d_kh"
    if kind == "attn_vec_einsum":  # N H D: x[BTNH] → [BTD]
        n, h, d = shape
        return n * h, d, "nh_d"
    if kind == "gating_einsum":  # transposed (2, F, D) or (2, D, F)
        _, a, b = shape
        return min(a, b), max(a, b), "d_f"
    if kind == "linear":  # F D
        f, d = shape
        return f, d, "f_d"
    raise ValueError(kind)


def lora_in_out(kind: str, shape: tuple[int, ...], transpose_gating: bool = True) -> tuple[int, int]:
    """In/out features of the adapter for one target slice of a gemma weight."""
    if kind == "gating_einsum":
        _, a, b = shape
        f, d = (a, b) if transpose_gating else (b, a)
        return d, f
    fin, fout, _ = _slice_in_out(kind, shape)
    return fin, fout


SLOT_MAJOR = "->N...H"
"""The gate/up einsum asked for slot-major (``[2, ..., F]``), as the train step's feed-forward
does on a TPU (``train.variants.slot_major_mlp``; gemma's own output is ``...NH``,
``[..., 2, F]``): the adapted einsum then returns the slots as a tuple ``(gate, up)``, each
``x · W[c]`` plus its update, so no stacked array exists forward or backward."""


class TargetedLoRAEinsum(nn.Module):
    """A gemma ``Einsum`` plus scaled low-rank updates on some slices of its output."""

    wrapped: nn.Module
    """The library's einsum layer (a class the family table names for the ``einsum`` role)."""
    kind: str
    targets: tuple[str, ...]
    rank: int
    scale: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, eqn: str, x: jax.Array) -> jax.Array | tuple[jax.Array, ...]:
        slot_major = self.kind == "gating_einsum" and eqn.endswith(SLOT_MAJOR)
        w = self._float_weight() if slot_major else None
        if w is not None:  # each slot's product on its own: [..., F] each (see SLOT_MAJOR)
            one = eqn.replace("N", "")  # ...F,NHF->N...H → ...F,HF->...H
            y = [jnp.einsum(one, x, w[c]) for c in range(w.shape[0])]
        else:
            y = self.wrapped(eqn, x)
        shape = tuple(self.wrapped.shape)
        if self.kind == "gating_einsum":
            fin, fout = x.shape[-1], (y[0] if isinstance(y, list) else y).shape[-1]
        else:
            fin, fout, _ = _slice_in_out(self.kind, shape)
        pairs = []
        for target in self.targets:
            a = self.param(f"{target}_a", nn.initializers.kaiming_uniform(), (fin, self.rank), self.dtype)
            b = self.param(f"{target}_b", nn.initializers.zeros_init(), (self.rank, fout), self.dtype)
            pairs.append((_EINSUM_TARGETS[self.kind][target], a, b))
        if self.kind == "attn_vec_einsum":  # x: [..., N, H] → [..., N·H]
            x = x.reshape(*x.shape[:-2], shape[0] * shape[1])
        if slot_major:  # y: C × [..., F]; each adapted slot plus its own update
            dt = x.dtype
            deltas = lora_matmul_slots(x, jnp.concatenate([a.astype(dt) for _, a, _ in pairs], axis=1),
                                       tuple(b.astype(dt) for _, _, b in pairs), self.scale)
            out = list(y)
            for (slot, _, _), d in zip(pairs, deltas, strict=True):
                out[slot] = out[slot] + d.astype(out[slot].dtype)
            return tuple(out)
        return self._add(y, self._delta(x, pairs))

    def _float_weight(self) -> jax.Array | None:
        """The wrapped einsum's weight where it is a plain float array (not at init, not a
        quantized weight): then each gate/up slot is its own product."""
        name = getattr(self.wrapped, "weight_name", None)
        if not name or self.is_initializing() or not self.wrapped.has_variable("params", name):
            return None
        w = self.wrapped.get_variable("params", name)
        return w if isinstance(w, jax.Array) and jnp.issubdtype(w.dtype, jnp.floating) else None

    def _delta(self, x: jax.Array, pairs: list[tuple[int | None, jax.Array, jax.Array]]) -> jax.Array:
        """Every target's update in one low-rank product: ``[..., slots·out]``.

        Targets that share an einsum (k/v, gate/up) share one pass over ``x``: their A
        matrices are concatenated (``in × n·r``) and their B matrices placed block-diagonally
        in their output slots (``n·r × slots·out``), so the update lands in ``y``'s own
        layout with no stack or slice of the wide activations.
        """
        dt = x.dtype
        if len(pairs) == 1 and pairs[0][0] is None:
            _, a, b = pairs[0]
            return lora_matmul(x, a.astype(dt), b.astype(dt), self.scale)
        slots = _EINSUM_TARGETS[self.kind]
        n_slots = len(set(slots.values()))
        a_cat = jnp.concatenate([a.astype(dt) for _, a, _ in pairs], axis=1)
        rows = []
        for slot, _, b in pairs:
            zero = jnp.zeros(b.shape, dt)
            rows.append(jnp.concatenate([b.astype(dt) if s == slot else zero for s in range(n_slots)], axis=1))
        return lora_matmul(x, a_cat, jnp.concatenate(rows, axis=0), self.scale)

    def _add(self, y: jax.Array, delta: jax.Array) -> jax.Array:
        """``y`` plus the update, reshaped to ``y``'s layout (one elementwise add)."""
        shape = tuple(self.wrapped.shape)
        lead = delta.shape[:-1]
        if self.kind in ("q_einsum", "k_einsum"):  # y: B T N H
            return y + delta.reshape(*lead, shape[0], shape[2]).astype(y.dtype)
        if self.kind in ("kv_einsum", "qkv_einsum"):  # y: C B T K H
            d = delta.reshape(*lead, shape[0], shape[1], shape[3])
            return y + jnp.moveaxis(d, -3, 0).astype(y.dtype)
        if self.kind == "gating_einsum":  # y: ... C F
            return y + delta.reshape(*lead, y.shape[-2], y.shape[-1]).astype(y.dtype)
        return y + delta.astype(y.dtype)  # attn_vec_einsum, linear: ... D
