"""JAX's trace context made complete before the first program is traced.

JAX keys every jitted function's in-memory cache on its *trace context*: the values of the
config options registered with ``include_in_trace_context``. A module that registers a new
one when it is first imported changes that context for the rest of the process, so every
program traced before misses its cache and is traced and compiled again. The first
generation does that: it imports JAX's Pallas fuser (``pallas_fuser_disable_nested_fuse``),
so the second Compare re-traced its prefill (~20 s of the 270M's first-token wait), and a
run started after a Compare would re-trace its kept train step. ``complete()`` imports those
modules first: the train step's module at import, the engine at start-up, the sampler
when it builds a program (not at import: the CLI imports ``adapters_lib.sample``).
"""

from __future__ import annotations

import importlib

REGISTERING = ("jax._src.pallas.fuser.jaxpr_fusion",)
"""Modules that register a trace-context config option when first imported (jax 0.12)."""

_done = False


def complete() -> None:
    global _done
    if _done:
        return
    for name in REGISTERING:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - another jax: nothing to register
            pass
    _done = True
