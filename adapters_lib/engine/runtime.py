"""The engine's runtime: JAX start-up in one thread, the devices, the compile cache.

Start-up runs in one background thread (``start``), in three phases, so that the socket
answers at once:

1. **metadata**: the lazy-import guard (below), then a preload of the light modules that the
   catalog, run and data-check requests use (``METADATA_MODULES``) → ``metadata_ready``;
2. **JAX**: import, the compile cache (``devices.enable_compile_cache``), the devices →
   ``devices_known``;
3. **heavy**: gemma and the engine's own heavy modules (``devices.import_heavy``) → ``ready``.

**The gemma lazy-import race.** gemma (through etils ``lazy_imports``) swaps
``builtins.__import__`` for the whole process while its modules load: an ``import`` in
another thread at that moment gets a lazy stub (``from typing import get_type_hints``
turned into a module!). So every heavy import happens in the start-up thread, and commands
that need JAX (``needs_jax``) wait for ``ready`` before they run. The others (status, runs,
the catalog, data checks) are answered at once, on a cold engine too: they run inside
``plain_imports()``, under which etils' hook hands every import of that thread to the real
import machinery (``guard_lazy_imports``, installed before gemma is imported). Where the
hook cannot be guarded (another etils), they wait for ``ready`` as well.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import logging
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from adapters_lib.engine import api
from adapters_lib.engine import devices as devices_mod

log = logging.getLogger("adapters_lib.engine")

METADATA_MODULES = (
    "adapters_lib.config.run_config", "adapters_lib.runs", "adapters_lib.catalog",
    "adapters_lib.models.demo", "adapters_lib.data", "adapters_lib.engine.compute",
    "adapters_lib.sweeps.results",
    "numpy", "sentencepiece", "huggingface_hub", "gguf", "tensorstore",
)
"""What metadata requests (catalog, runs, data check) import: loaded in phase 1."""

_REAL_IMPORT = builtins.__import__
_plain = threading.local()


@contextlib.contextmanager
def plain_imports() -> Iterator[None]:
    """Imports of this thread bypass etils' lazy-import hook (see the module doc)."""
    _plain.depth = getattr(_plain, "depth", 0) + 1
    try:
        yield
    finally:
        _plain.depth -= 1


def guard_lazy_imports() -> bool:
    """Make etils' lazy ``__import__`` pass imports of ``plain_imports()`` threads through.

    etils builds its hook as ``functools.partial(_lazy_import, ...)`` each time a
    ``lazy_imports()`` block opens, looking ``_lazy_import`` up in its module: replacing that
    function before gemma is imported covers every block gemma opens. Returns whether the
    guard is in place.
    """
    try:
        from etils.epy import lazy_imports_utils as lazy
    except ImportError:  # no etils: no gemma, no race
        return True
    original = getattr(lazy, "_lazy_import", None)
    if original is None:
        log.warning("etils has no _lazy_import: metadata requests wait for the heavy imports")
        return False
    if getattr(original, "workbench_guard", False):
        return True

    def guarded(name: str, globals_: Any = None, locals_: Any = None,
                fromlist: Any = (), level: int = 0, **kwargs: Any) -> Any:
        if getattr(_plain, "depth", 0) or not getattr(_opened, "depth", 0):
            return _REAL_IMPORT(name, globals_, locals_, fromlist, level)
        return original(name, globals_, locals_, fromlist, level, **kwargs)

    guarded.workbench_guard = True  # type: ignore[attr-defined]
    lazy._lazy_import = guarded
    _count_openers(lazy)
    return True


_opened = threading.local()


def _count_openers(lazy: Any) -> None:
    """Make the hook thread-aware: it lazifies the imports of the thread that opened a
    ``lazy_imports()`` block only. Another thread importing at that moment — or after a
    racy restore left the hook in ``builtins.__import__`` — gets the real import. So gemma's
    lazily imported parts (``gm.ckpts``: kauldron, clu, TensorFlow) may be resolved on first
    use, in any thread, instead of all in the start-up thread."""
    original = lazy.lazy_imports

    @contextlib.contextmanager
    def lazy_imports(*args: Any, **kwargs: Any) -> Iterator[None]:
        _opened.depth = getattr(_opened, "depth", 0) + 1
        try:
            with original(*args, **kwargs):
                yield
        finally:
            _opened.depth -= 1

    lazy.lazy_imports = lazy_imports
    try:
        from etils import epy

        epy.lazy_imports = lazy_imports
    except ImportError:  # pragma: no cover - etils without epy
        pass


class Runtime:
    """JAX and the devices of this process, started once (see the module doc)."""

    def __init__(self, *, warm: bool = True):
        self.warm = warm
        self.metadata_ready = threading.Event()
        self.devices_known = threading.Event()
        self.ready = threading.Event()
        self._guard: bool | None = None
        self._guard_lock = threading.Lock()
        self.error: str | None = None
        self.backend: str | None = None
        self.devices: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the three phases in the background (``warm``), or leave them to first use."""
        if self.warm:
            threading.Thread(target=self.ensure_ready, name="jax-import", daemon=True).start()

    # ----------------------------------------------------------------- waiting

    def ensure_guard(self) -> bool:
        """Install the lazy-import guard (once); whether it is in place."""
        with self._guard_lock:
            if self._guard is None:
                self._guard = guard_lazy_imports()
            return self._guard

    def ensure_plain(self) -> None:
        """What a request that needs no JAX waits for: nothing, once the guard is in place
        (its imports are real ones, whatever gemma does meanwhile); without the guard, the
        end of start-up."""
        if not self.ensure_guard():
            self.ensure_ready()

    def ensure_ready(self) -> None:
        """All three phases done (runs them here, once; other callers wait for the first)."""
        with self._lock:
            if not self.ready.is_set():
                self._start_up()

    def wait_devices(self, timeout: float = 300.0) -> None:
        if self.warm:
            self.devices_known.wait(timeout)
        else:
            self.ensure_ready()

    # ----------------------------------------------------------------- phases

    def _import_metadata(self) -> None:
        """Preload what metadata requests use, so that their first answer is quick."""
        t0 = time.perf_counter()
        for name in METADATA_MODULES:
            try:
                importlib.import_module(name)
            except Exception as e:  # noqa: BLE001 - an optional area: its requests say so
                log.info("metadata module %s not imported: %s", name, e)
        self.metadata_ready.set()
        log.info("metadata modules imported in %.2f s", time.perf_counter() - t0)

    def _start_up(self) -> None:
        t0 = time.perf_counter()
        try:
            self.ensure_guard()  # before gemma is imported
            if not self.metadata_ready.is_set():
                self._import_metadata()
            import jax

            devices_mod.enable_compile_cache(jax)
            devices = jax.devices()
            self.backend = jax.default_backend()
            self.devices = [devices_mod.device_info(d) for d in devices]
            self.devices_known.set()
            log.info("JAX ready in %.1f s: backend %s, %d device(s)", time.perf_counter() - t0,
                     self.backend, len(devices))
            devices_mod.import_heavy()
            log.info("engine modules imported in %.1f s", time.perf_counter() - t0)
        except Exception as e:  # a broken accelerator install: say so in status
            self.error = f"{type(e).__name__}: {e}"
            log.exception("JAX failed to start")
        finally:
            self.metadata_ready.set()
            self.devices_known.set()
            self.ready.set()

    # ----------------------------------------------------------------- status

    def jax_state(self) -> api.JaxState:
        known = self.devices_known.is_set()
        return api.JaxState(ready=known and self.error is None, loading=not known,
                            error=self.error, modules_ready=self.ready.is_set())

    def device_rows(self) -> list[api.DeviceInfo]:
        """The devices with their live memory (``bytes_in_use``) where the backend says."""
        rows = self.devices
        jax = sys.modules.get("jax") if self.devices_known.is_set() else None
        if jax is not None and rows:
            rows = [devices_mod.live_memory(d, dev)
                    for d, dev in zip(rows, jax.devices(), strict=False)]
        return [api.DeviceInfo.from_json(r) for r in rows]
