"""The Compare's two sides' adapters stacked on a leading axis: one jitted program (``stacked``)
for the base (zeros) and the tuned side, compiled ahead with the sampler's prefill and decode
(``compile_behind``: the first Compare after a run compiled it, 1.4 s on the v5e)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from adapters_lib.sample.program import abstract, signature


def stacked(tuned: Any, pattern: tuple[bool, ...]) -> Any:
    """``tuned``'s leaves stacked once for each variant of ``pattern`` (True: the tuned side,
    False: the base's zeros), as one jitted program: eager, each leaf's zeros and stack were ops
    compiled apart on a TPU (~1.6 s of the first Compare after a run on the v5e). Its program
    for these shapes is compiled ahead with the sampler's (``compile_ahead``: the first Compare
    after a run compiled it, 1.4 s of its 1.9–2.1 s on the v5e); else jitted here."""
    import jax

    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(tuned)):  # traced (eval_shape)
        return _stacked_jit()(tuned, pattern)
    key = (signature(tuned), pattern)
    compiled = _AHEAD.get(key)
    if compiled is not None:
        try:
            return compiled(tuned)
        except (TypeError, ValueError):  # another placement than compiled for: the jitted one
            _AHEAD.pop(key, None)
    return _stacked_jit()(tuned, pattern)


_AHEAD: dict[tuple, Any] = {}
"""``stacked``'s programs compiled ahead, by (the tuned tree's signature, pattern)."""
_KEPT = 8


def compile_ahead(tuned: Any, pattern: tuple[bool, ...]) -> None:
    """Compile ``stacked``'s program for ``tuned`` (arrays, or ``jax.ShapeDtypeStruct`` with
    their shardings) and ``pattern``, from abstract arguments (a compile thread: nothing runs on
    the devices); kept for the calls of those shapes (the last ``_KEPT``)."""
    key = (signature(tuned), pattern)
    if key in _AHEAD:
        return
    _AHEAD[key] = _stacked_jit().lower(abstract(tuned), pattern).compile()
    while len(_AHEAD) > _KEPT:
        _AHEAD.pop(next(iter(_AHEAD)))


def parts(adapters: Sequence[Any]) -> tuple[Any, tuple[bool, ...]] | None:
    """(the tuned tree, the pattern) that ``Sampler._stack`` passes to ``stacked`` for these
    variants, or None when it stacks nothing that way (base only, or several tuned trees)."""
    template = next((a for a in adapters if a is not None), None)
    if template is None or not all(a is None or a is template for a in adapters):
        return None
    return template, tuple(a is not None for a in adapters)


@functools.lru_cache(maxsize=1)
def _stacked_jit() -> Any:
    import jax
    import jax.numpy as jnp

    def stack(tuned: Any, pattern: tuple[bool, ...]) -> Any:
        return jax.tree.map(lambda x: jnp.stack([x if p else jnp.zeros_like(x) for p in pattern]), tuned)

    return jax.jit(stack, static_argnums=(1,))


def compile_behind(submit: Any, adapters: Sequence[Any]) -> None:
    """Queue ``compile_ahead`` for these variants (``Sampler.compile_behind``'s) through
    ``submit(fn) -> Future``, unless stacked another way or compiled already."""
    got = parts(adapters)
    if got is not None and (signature(got[0]), got[1]) not in _AHEAD:
        tuned, pattern = abstract(got[0]), got[1]  # the job holds no arrays
        submit(lambda: compile_ahead(tuned, pattern))
