"""Which bytes of a compiled program the program store keeps (``program_store``).

``compile_noting_origin(lower)`` compiles and says where the executable came from: JAX's
persistent cache (with the cache's own bytes), XLA just now, or JAX's memory (a compile of
an earlier call). ``serialize`` writes the cache's bytes where it served them: an executable
the cache served serializes again without its kernels on XLA:CPU (jaxlib 0.12), and the
store keeps no program JAX's memory answered there. ``devices_of`` and ``platform`` read an
executable's placement. Importing this module imports no JAX.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

_LOCK = threading.Lock()


def compile_noting_origin(lower: Callable[[], Any]) -> tuple[Any, str, bytes | None]:
    """``(lower().compile(), origin, the cache's bytes or None)``, ``origin`` as ``origin``
    says; nested calls in one thread note their own compile. JAX's cache keeps no second copy
    of the program on an accelerator (``no_second_copy``)."""
    install_capture()
    outer = (getattr(_capture, "on", False), getattr(_capture, "served", []), getattr(_capture, "fresh", []))
    _capture.on, _capture.served, _capture.fresh = True, [], []
    try:
        with no_second_copy(default_platform()):
            compiled = lower().compile()
        where, served = origin(compiled, _capture.served, _capture.fresh)
    finally:
        _capture.on, _capture.served, _capture.fresh = outer
    return compiled, where, served


_capture = threading.local()
"""While a ``load_or_compile`` compiles in this thread (``on``): the executables JAX's
persistent cache served, with their bytes (``served``), and those XLA compiled (``fresh``)."""


def install_capture() -> None:
    """Note which executables JAX's persistent cache serves, with its bytes, and which XLA
    compiles, while this thread's ``load_or_compile`` compiles.

    An executable the cache served serializes again without its kernels on XLA:CPU (jaxlib
    0.12: the next process fails at its first run with ``Function <name> not found``), so
    the store keeps the cache's own bytes — what the original compile serialized. And a
    ``compile()`` may be answered from JAX's memory (the same jitted function compiled earlier
    in this process: no cache read, no compile), where what it returns may be an executable the
    cache served long before; on XLA:CPU such a program is not kept (``origin``)."""
    from jax._src import compilation_cache as cc
    from jax._src import compiler

    with _LOCK:
        if getattr(cc.get_executable_and_time, "workbench_capture", False):
            return
        extract_bytes, get, compile_and_load = (cc.extract_executable_and_time, cc.get_executable_and_time,
                                                compiler.backend_compile_and_load)

        def extract(data: bytes) -> Any:
            out = extract_bytes(data)
            _capture.last = out[0]
            return out

        def served(*args: Any, **kwargs: Any) -> Any:
            _capture.last = None
            executable, seconds = get(*args, **kwargs)
            if executable is not None and getattr(_capture, "on", False) and _capture.last is not None:
                _capture.served.append((executable, _capture.last))
            _capture.last = None
            return executable, seconds

        def compiled(*args: Any, **kwargs: Any) -> Any:
            executable = compile_and_load(*args, **kwargs)
            if getattr(_capture, "on", False):
                _capture.fresh.append(executable)
            return executable

        served.workbench_capture = True  # type: ignore[attr-defined]
        cc.extract_executable_and_time = extract
        cc.get_executable_and_time = served
        compiler.backend_compile_and_load = compiled


def origin(compiled: Any, served: list[tuple[Any, bytes]], fresh: list[Any]) -> tuple[str, bytes | None]:
    """Where ``compiled``'s executable came from during the compile just done: ``"cache"`` (with
    the cache's bytes), ``"compiled"`` (by XLA, now), or ``"memory"`` (neither: JAX's memory
    answered, from a compile of an earlier call whose origin is unknown here)."""
    try:
        executable = compiled.runtime_executable()
    except Exception:  # noqa: BLE001 - another jax: serialized as it is
        return "compiled", None
    for candidate, data in served:
        if candidate is executable:
            return "cache", data
    if any(candidate is executable for candidate in fresh):
        return "compiled", None
    return "memory", None


def platform(compiled: Any) -> str:
    try:
        return str(compiled.runtime_executable().client.platform)
    except Exception:  # noqa: BLE001 - unknown: as a CPU (the cautious answer)
        return "cpu"


def devices_of(compiled: Any) -> list[int] | None:
    """The device ids the executable runs on, in its assignment's order."""
    try:
        shardings = [s for s in _leaves(compiled.input_shardings) if hasattr(s, "_device_assignment")]
        return [int(d.id) for d in shardings[0]._device_assignment] if shardings else None
    except Exception:  # noqa: BLE001 - the default (every device of the backend)
        return None


def serialize(compiled: Any, served: bytes | None) -> tuple[bytes, Any, Any]:
    """``serialize_executable.serialize``, with the executable's bytes ``served`` by JAX's
    persistent cache where it served them (see ``install_capture``)."""
    import io

    import jax
    from jax._src.lib import _jax
    from jax._src.lib import xla_client as xc
    from jax.experimental import serialize_executable

    if served is None:
        return serialize_executable.serialize(compiled)

    class Pickler(serialize_executable._JaxPjrtPickler):
        def persistent_id(self, obj: Any) -> Any:
            if isinstance(obj, (xc.LoadedExecutable, _jax.Executable)):
                return ("exec", served)
            return super().persistent_id(obj)

    unloaded = compiled._executable._unloaded_executable
    if unloaded is None or compiled._params.const_args:
        raise ValueError("this program cannot be serialized")
    args_info_flat, in_tree = jax.tree_util.tree_flatten(compiled.args_info)
    with io.BytesIO() as f:
        Pickler(f).dump((unloaded, args_info_flat, compiled._no_kwargs))
        return f.getvalue(), in_tree, compiled.out_tree


def _leaves(tree: Any) -> list[Any]:
    import jax

    return jax.tree_util.tree_leaves(tree)


def no_second_copy(platform: str) -> Any:
    """A context (this thread) in which JAX's persistent cache writes nothing, on an
    accelerator (``compile_noting_origin``: a program the store keeps). Its write serializes
    the executable on the compiling thread holding the GIL, in the middle of the steps that run
    beside it, where the store's own write waits until they end (``program_store.steps_running``):
    on the v5e the 1B's eval scorer (52 MB) stopped the steps of the run beside it for 4.66 s,
    the run's own program compiled behind a LoRA family's 1.94 s. JAX still reads its cache. On
    a CPU it writes as before (no compile runs beside the steps there; the suite's engines share
    that cache)."""
    if platform == "cpu":
        return contextlib.nullcontext()
    from jax._src import config

    return config.persistent_cache_min_compile_time_secs(float("inf"))


def default_platform() -> str:
    import jax

    return jax.default_backend()
