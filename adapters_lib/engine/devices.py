"""What the engine knows about its process and devices: JAX start-up, heavy imports,
the compile cache, device memory.

Nothing here is imported by clients; JAX is passed in or imported by the caller.
"""

from __future__ import annotations

import importlib
import logging
import os
from pathlib import Path
from typing import Any

from adapters_lib import paths

log = logging.getLogger("adapters_lib.engine")

HEAVY_MODULES = (
    "gemma.gm", "adapters_lib.models.loader", "adapters_lib.models.demo",
    "adapters_lib.lora.traced_shapes",  # with lora.targeted, lora.einsum and lora.fresh
    "adapters_lib.catalog", "adapters_lib.data", "adapters_lib.memory.estimate", "adapters_lib.mesh",
    "adapters_lib.train.loop", "adapters_lib.train.checkpoints", "adapters_lib.sample",
    "adapters_lib.export", "adapters_lib.engine.sampling",
    # a run's own first imports (~0.7 s and ~0.6 s on 2 busy cores): done while the engine idles
    "adapters_lib.train.step", "adapters_lib.tensorboard_log", "tensorboardX",
)


def import_heavy() -> None:
    from adapters_lib.import_shields import trace_context

    trace_context.complete()  # before any program is traced
    for name in HEAVY_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as e:  # an area not in this build: its routes say so when used
            log.warning("cannot import %s: %s", name, e)
    try:
        from gemma import gm

        # resolve the lazy sub-packages every run uses now; ``gm.ckpts`` (orbax-format weights,
        # the merged export) on first use: it imports kauldron → clu → TensorFlow (~5 s, ~700 MB),
        # which the gemma route's training and sampling never need. The lazy-import hook is
        # thread-aware (``runtime.guard_lazy_imports``), so a later resolve in another thread is safe.
        for sub in ("nn", "text"):
            getattr(gm, sub)
    except Exception:  # noqa: BLE001 - reported when a run needs it
        log.warning("gemma did not import fully", exc_info=True)


def enable_compile_cache(jax: Any) -> None:
    """Keep compiled programs on disk: a restarted engine (or a resumed run) skips compiling.

    ``GEMMA_WORKBENCH_COMPILE_CACHE``: the folder (default ``<state dir>/compile-cache``);
    empty turns it off. The program store (``program_store``) is turned on here too.
    """
    folder = os.environ.get("GEMMA_WORKBENCH_COMPILE_CACHE",
                            str(paths.state_dir() / "compile-cache"))
    if not folder:
        return
    try:
        paths.ensure_private_dir(Path(folder))
        jax.config.update("jax_compilation_cache_dir", folder)
        # every program, the small ones too: on 2 cores each of the ~20 small eager programs
        # of a run start (RNG splits, casts) compiles in 0.05-0.2 s and reads back in ~1 ms
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    except Exception:  # noqa: BLE001 - a cache is an optimization, never a failure
        log.warning("compile cache at %s not enabled", folder, exc_info=True)
    try:  # the train, eval, prefill and decode programs themselves: a new engine traces none
        from adapters_lib import program_store

        program_store.enable()
    except Exception:  # noqa: BLE001 - an optimization, never a failure
        log.warning("program store not enabled", exc_info=True)


def device_info(d: Any) -> dict[str, Any]:
    memory = None
    try:
        stats = d.memory_stats()
        if stats:
            memory = stats.get("bytes_limit") or stats.get("bytes_reservable_limit")
    except Exception:  # noqa: BLE001 - CPU devices have no stats
        memory = None
    return {"id": d.id, "platform": d.platform, "kind": getattr(d, "device_kind", d.platform),
            "process_index": getattr(d, "process_index", 0), "memory_bytes": memory}


def live_memory(info: dict[str, Any], device: Any) -> dict[str, Any]:
    """The device entry with ``bytes_in_use``/``peak_bytes_in_use`` where the backend says."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 - CPU devices have none
        stats = {}
    return {**info, "bytes_in_use": stats.get("bytes_in_use"),
            "peak_bytes_in_use": stats.get("peak_bytes_in_use")}


def host_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
