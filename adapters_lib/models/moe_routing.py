"""Gemma 4's MoE block routed as the checkpoints are meant to be read.

transformers (``Gemma4TextDecoderLayer``), keras-hub (``Gemma4DecoderBlock``) and llama.cpp
(``src/models/gemma4.cpp``) route each token on the block's raw residual stream: the router
RMS-normalises it (no scale), multiplies by ``router_scale · D^-0.5`` and projects; only the
experts read ``pre_feedforward_layernorm_2`` of it. The pinned gemma library's
``Block._forward_moe`` routes on the *normalised* input (``pre_ffw_norm``'s output, which is
that same ``pre_feedforward_layernorm_2``), so on a real checkpoint it picks other experts
with other weights. ``interceptor`` replaces ``_forward_moe`` by the three others' order,
built from the library's own submodules (the shared MLP, the router's norm and projection,
``MoERagged._router`` and ``_run_ffw_and_routing``): the bank's dispatch stays the library's
(and ``lora.experts`` adapts it there). ``families.model_class`` installs it on every Gemma 4
MoE model; tests/test_gemma4_oracle.py checks the logits against keras-hub's on one checkpoint.
"""

from __future__ import annotations

from typing import Any


def forward_moe(block: Any, x: Any) -> Any:
    """The MoE block's feed-forward output for the residual ``x`` (``[B, T, D]``)."""
    import jax
    import jax.numpy as jnp

    dense = block.mlp2(block.pre_ffw2_norm(x))
    if block.post_ffw2_norm is not None:
        dense = block.post_ffw2_norm(dense)
    bank = block.mlp
    routed = bank.router_norm(x)
    root = jax.lax.rsqrt(jnp.array(bank.features, dtype=routed.dtype))
    routed = routed * root * bank.router_scale.astype(routed.dtype)
    weights, choices = bank._router(bank.router_logits("gsd,de->gse", routed))  # noqa: SLF001
    experts = bank._run_ffw_and_routing(block.pre_ffw_norm(x), choices, weights)  # noqa: SLF001
    if block.post_ffw1_norm is not None:
        experts = block.post_ffw1_norm(experts)
    out = dense + experts
    if block.post_ffw_norm is not None:
        out = block.post_ffw_norm(out)
    return out


def interceptor(next_fun, args, kwargs, context):
    """An ``nn.intercept_methods`` function: Gemma 4 blocks' ``_forward_moe`` → ``forward_moe``."""
    if context.method_name == "_forward_moe":
        return forward_moe(context.module, *args, **kwargs)
    return next_fun(*args, **kwargs)
