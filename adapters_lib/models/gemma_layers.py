"""gemma's layer classes the quantized base and GPTQ intercept, and the qwix qtype of a
``[model] quantize`` mode: looked up lazily (gemma and JAX load when first asked)."""

from __future__ import annotations

import functools
from typing import Any


def qtype(mode: str) -> Any:
    """qwix's qtype for ``mode`` ("int8", "int4", "nf4")."""
    import jax.numpy as jnp

    return {"int8": jnp.int8, "int4": jnp.int4, "nf4": "nf4"}[mode]


@functools.cache
def einsum_classes() -> tuple[type, ...]:
    """gemma's Einsum layers: Gemma 2/3's and Gemma 4's own (which also has ``w_scale``)."""
    from gemma.gm.nn import _layers

    classes: list[type] = [_layers.Einsum]
    try:
        from gemma.gm.nn.gemma4 import _layers as g4_layers

        classes.append(g4_layers.Einsum)
    except ImportError:
        pass
    return tuple(classes)


@functools.cache
def embedder_classes() -> tuple[type, ...]:
    from gemma.gm.nn import _modules

    classes: list[type] = [_modules.Embedder]
    try:
        from gemma.gm.nn.gemma4 import _modules as g4_modules

        classes.append(g4_modules.Embedder)
    except ImportError:
        pass
    return tuple(classes)


@functools.cache
def bank_weight_classes() -> tuple[type, ...]:
    """The MoE expert bank's weight holders (Gemma 4's ``_moe._Weight``)."""
    try:
        from gemma.gm.nn.gemma4 import _moe
    except ImportError:
        return ()
    return (_moe._Weight,)  # noqa: SLF001 - the bank's weights come from its __call__
