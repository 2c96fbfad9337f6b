"""LoRA on a MoE expert bank (Gemma 4's ``MoERagged``): the ``experts`` target.

Each expert ``e`` gets its own low-rank pairs on its gate, up and down projections
(``lora_experts_gate_a: (E, D, r)``, ``…_gate_b: (E, r, X)``, the same for up, and
``…_down_a: (E, X, r)``, ``…_down_b: (E, r, D)``; B zero-initialised). They go
through the library's own ragged dispatch (its ``_run_ffw_and_routing``, intercepted): the
tokens sorted by expert once, then ``jax.lax.ragged_dot`` over the same group sizes for the
base weights and for the adapters, so an adapter sees exactly the tokens its expert sees (and
gets their gradient). The router stays
frozen. Params live beside the bank's own (``layer_i/mlp/lora_experts_gate_a`` …);
``lora.fuse.fuse_experts`` folds them back into ``mlp/gating_einsum/w`` and ``mlp/linear/w``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn

EXPERTS_PREFIX = "lora_experts"


def _ragged_lora(x: jax.Array, a: jax.Array, b: jax.Array, sizes: jax.Array, scale: float) -> jax.Array:
    u = jax.lax.ragged_dot(x, a.astype(x.dtype), group_sizes=sizes) * jnp.asarray(scale, x.dtype)
    return jax.lax.ragged_dot(u, b.astype(x.dtype), group_sizes=sizes)


def ffw_call(m: nn.Module, x: jax.Array, choices: jax.Array, weights: jax.Array, *, rank: int,
             scale: float, dtype: Any) -> jax.Array:
    """gemma's ``MoERagged._run_ffw_and_routing`` (the routed tokens through their experts) with
    per-expert low-rank updates on gate, up and down. The routing (``choices``, ``weights``)
    is the caller's (``models.moe_routing``).

    ``m`` is the bound bank, called in its own scope: the adapters are params of that scope
    (``layer_i/mlp/lora_experts_gate_a`` …; ``Scope.param`` works in its setup-style call)."""
    from gemma.gm.nn.gemma4 import _moe  # the library's own dispatch and collect

    e, f, h, r = m.num_experts, m.features, m.hidden_dim, rank
    sizes, sorted_xs, reverse, combine = _moe._expert_dispatch(x, choices, weights)  # noqa: SLF001
    a_init = nn.initializers.kaiming_uniform(in_axis=-2, out_axis=-1, batch_axis=(0,))

    def pair(name: str, fin: int, fout: int):
        a = m.scope.param(f"{EXPERTS_PREFIX}_{name}_a", a_init, (e, fin, r), dtype)
        b = m.scope.param(f"{EXPERTS_PREFIX}_{name}_b", nn.initializers.zeros_init(), (e, r, fout), dtype)
        return a, b

    gate, up, down = pair("gate", f, h), pair("up", f, h), pair("down", h, f)
    w_gate = jnp.transpose(m.gating_einsum(), (0, 3, 1, 2)).reshape(e, f, 2 * h)
    gate_out = jax.lax.ragged_dot(sorted_xs, w_gate, group_sizes=sizes)
    gate_out = gate_out + jnp.concatenate(
        [_ragged_lora(sorted_xs, *gate, sizes, scale), _ragged_lora(sorted_xs, *up, sizes, scale)],
        axis=-1).astype(gate_out.dtype)
    gate_out = gate_out.reshape(gate_out.shape[0], 2, h)
    activation = nn.gelu(gate_out[:, 0, :]) * gate_out[:, 1, :]
    out = jax.lax.ragged_dot(activation, m.linear(), group_sizes=sizes)
    out = out + _ragged_lora(activation, *down, sizes, scale).astype(out.dtype)
    index = jnp.repeat(jnp.arange(e), sizes, total_repeat_length=out.shape[0])
    out = out * m.per_expert_scale.astype(out.dtype)[index, None]
    out = _moe._expert_collect(out, xs_reverse_argsort=reverse, xs_combine_weights=combine)  # noqa: SLF001
    return jnp.einsum("blkd,blk->bld", out, combine, preferred_element_type=out.dtype)


def interceptor(banks: tuple[type, ...], *, rank: int, scale: float, dtype: Any):
    """An ``nn.intercept_methods`` function: expert banks' ``_run_ffw_and_routing`` goes
    through ``ffw_call``."""

    def intercept(next_fun, args, kwargs, context):
        if context.method_name != "_run_ffw_and_routing" or not isinstance(context.module, banks):
            return next_fun(*args, **kwargs)
        return ffw_call(context.module, *args, rank=rank, scale=scale, dtype=dtype, **kwargs)

    return intercept


def experts_param_count(num_layers: int, num_experts: int, embed_dim: int, expert_dim: int, rank: int) -> int:
    """Adapter parameters of the ``experts`` target (every MoE layer)."""
    per_expert = 2 * (embed_dim * rank + rank * expert_dim) + (expert_dim * rank + rank * embed_dim)
    return num_layers * num_experts * per_expert
