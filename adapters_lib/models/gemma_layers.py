"""gemma's layer classes the quantized base and GPTQ intercept, and the qwix qtype of a
``[model] quantize`` mode: looked up lazily (gemma and JAX load when first asked)."""

from __future__ import annotations

import functools
from typing import Any


def qtype(mode: str) -> Any:
    """qwix's qtype for ``mode`` ("int8", "int4", "nf4")."""
    import jax.numpy as jnp

    return {"int8": jnp.int8, "int4": jnp.int4, "nf4": "nf4"}[mode]


def _with_gemma4(base: Any, module: str, name: str) -> tuple[type, ...]:
    """``base`` and Gemma 4's class of the same ``name`` from ``gemma.gm.nn.gemma4.<module>``
    (absent from older gemma releases)."""
    import importlib

    try:
        return (base, getattr(importlib.import_module(f"gemma.gm.nn.gemma4.{module}"), name))
    except ImportError:
        return (base,)


@functools.cache
def einsum_classes() -> tuple[type, ...]:
    """gemma's Einsum layers: Gemma 2/3's and Gemma 4's own (which also has ``w_scale``)."""
    from gemma.gm.nn import _layers

    return _with_gemma4(_layers.Einsum, "_layers", "Einsum")


@functools.cache
def embedder_classes() -> tuple[type, ...]:
    """gemma's Embedders: Gemma 2/3's and Gemma 4's."""
    from gemma.gm.nn import _modules

    return _with_gemma4(_modules.Embedder, "_modules", "Embedder")


@functools.cache
def bank_weight_classes() -> tuple[type, ...]:
    """The MoE expert bank's weight holders (Gemma 4's ``_moe._Weight``)."""
    try:
        from gemma.gm.nn.gemma4 import _moe
    except ImportError:
        return ()
    return (_moe._Weight,)  # noqa: SLF001 - the bank's weights come from its __call__
