"""Compiled programs kept on disk across processes, keyed by what they compute: a new engine
neither traces nor lowers a program an earlier one compiled.

JAX's persistent compilation cache spares a new process the XLA compile, not the tracing
and lowering that make its key: on 2 busy cores the real 270M's train step takes ~5 s to
trace and ~1.5 s to lower, its prefill and decode ~3-4 s each to trace, before the cache
answers. Here the caller names the key instead — everything the program depends on (the
train step's ``step_programs.program_key``, the static arguments, the argument shapes) —
and the store keeps the executable serialized (``jax.experimental.serialize_executable``)
under its hash together with this build's fingerprint (``fingerprint``: adapters_lib's
sources, the versions of jax, jaxlib, flax, gemma and optax, ``XLA_FLAGS``, JAX's trace
context): new code or new libraries never read an old program.

The engine turns it on (``enable``, beside the compile cache, ``engine.devices``); off, and
in any process that did not (the tests, in-process commands), ``load_or_compile`` is
``lower().compile()``. A program that cannot be serialized or read back is compiled as
before (a warning in the log); an unreadable entry is removed. What is kept is the bytes XLA's
compile wrote: JAX's persistent cache's own bytes when it served the program, and on XLA:CPU
no program that JAX's memory answered (one compiled before in this process, maybe served by
the cache then: serialized again, it would lack its kernels — ``program_bytes``). ``remembered_shapes`` keeps
the result of an abstract trace the same way (the LoRA adapters' shapes).

A program serves at once; its copy for the next engine is written when nothing needs the GIL
that serializing holds (``program_writes``: after a run's steps, while the engine is idle).

- ``GEMMA_WORKBENCH_PROGRAMS``: the folder (default ``<state dir>/programs``); empty: off.
- ``GEMMA_WORKBENCH_PROGRAMS_GB``: the cap (default 2); the least recently used go first.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import re
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapters_lib import program_bytes, program_writes
from adapters_lib.program_writes import QUIET_S, flush, steps_running, write_when_idle  # noqa: F401 - the store's face

log = logging.getLogger(__name__)

_FOLDER: Path | None = None
_LOCK = threading.Lock()
_FINGERPRINT: str | None = None
SUFFIX = ".jaxprogram"
stats = {"loaded": 0, "stored": 0, "compiled": 0, "failed": 0}
"""Programs read back, written, compiled (off or not found) and entries that failed (tests, logs)."""


def enable(folder: str | Path | None = None) -> Path | None:
    """Turn the store on in this process (``folder``, else ``GEMMA_WORKBENCH_PROGRAMS``, else
    ``<state dir>/programs``); the folder, or None when the variable turns it off."""
    global _FOLDER
    from adapters_lib import paths

    chosen = folder if folder is not None else os.environ.get(
        "GEMMA_WORKBENCH_PROGRAMS", str(paths.state_dir() / "programs"))
    _FOLDER = Path(chosen) if chosen and cap_bytes() > 0 else None
    if _FOLDER is not None:
        paths.ensure_private_dir(_FOLDER)
    return _FOLDER


def disable() -> None:
    global _FOLDER
    _FOLDER = None


def folder() -> Path | None:
    return _FOLDER


def cap_bytes() -> int:
    from adapters_lib import paths

    return int(paths.env_number("GEMMA_WORKBENCH_PROGRAMS_GB") * (1 << 30))


def fingerprint() -> str:
    """This build: adapters_lib's sources, the libraries that lower programs, XLA_FLAGS."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        from importlib import metadata

        h = hashlib.sha256()
        root = Path(__file__).resolve().parent
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
        for dist in ("jax", "jaxlib", "flax", "gemma", "optax"):
            try:
                h.update(f"{dist}={metadata.version(dist)};".encode())
            except metadata.PackageNotFoundError:
                h.update(f"{dist}=none;".encode())
        h.update(os.environ.get("XLA_FLAGS", "").encode())
        _FINGERPRINT = h.hexdigest()
    return _FINGERPRINT


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
"""An object's address in a ``repr`` (JAX's trace context holds its axis environment's)."""


def _trace_context() -> str:
    """JAX's trace context (the config values a trace depends on), as text."""
    try:
        from jax._src import config

        return repr(config.trace_context())
    except Exception:  # noqa: BLE001 - another jax: the fingerprint's versions still key it
        return ""


def placement(x: Any) -> str:
    """Where an argument lives, as a program's key sees it: a fully replicated array is its
    devices (a one-device mesh's ``NamedSharding`` and a ``SingleDeviceSharding`` compile the
    same program, and either array is taken by either executable: the engine that trained
    holds the base placed on its mesh, a new engine's Compare loads it on one device)."""
    sharding = getattr(x, "sharding", None)
    if sharding is None:
        return ""
    try:
        if sharding.is_fully_replicated:
            return "replicated:" + ",".join(str(d.id) for d in sharding._device_assignment)
    except Exception:  # noqa: BLE001 - another sharding type: its text
        pass
    return str(sharding)


def entry_path(name: str, key: Any, suffix: str = SUFFIX) -> Path | None:
    """Where ``key``'s program is kept (None: the store is off, or this is one process of
    several: every process must run the program it compiles with the others)."""
    root = _FOLDER
    if root is None:
        return None
    import jax

    if jax.process_count() > 1:
        return None
    text = _ADDRESS.sub("", repr((name, key, fingerprint(), _trace_context())))
    digest = hashlib.sha256(text.encode()).hexdigest()
    return root / f"{name}-{digest[:40]}{suffix}"


def load_or_compile(name: str, key: Any, lower: Callable[[], Any]) -> Any:
    """The compiled program for ``key`` (hashable, its ``repr`` stable across processes):
    read back from the store, or ``lower().compile()`` (and stored)."""
    path = entry_path(name, key)
    waiting = program_writes.unwritten(path)
    if waiting is not None:
        stats["loaded"] += 1
        log.info("%s: the program compiled earlier in this engine, its copy not yet written "
                 "(nothing traced or compiled)", name)
        return waiting
    if path is not None and path.is_file():
        t0 = time.perf_counter()
        compiled = _read(path)
        if compiled is not None:
            stats["loaded"] += 1
            log.info("%s: the stored program read back in %.1f s (nothing traced or lowered)",
                     name, time.perf_counter() - t0)
            return compiled
    stats["compiled"] += 1
    if path is None:
        return lower().compile()
    t0 = time.perf_counter()
    compiled, origin, served = program_bytes.compile_noting_origin(lower)
    log.info("%s: compiled in %.1f s", name, time.perf_counter() - t0)
    if origin == "memory" and program_bytes.platform(compiled) == "cpu":
        log.info("program store: %s not kept (compiled earlier in this process, where JAX's "
                 "cache may have served it: its bytes would lack their kernels)", name)
        return compiled
    program_writes.write_or_defer(path, compiled, name, lambda: _write(path, compiled, name, served))
    return compiled


def _read(path: Path) -> Any:
    import jax
    from jax.experimental import serialize_executable

    try:
        record = pickle.loads(zlib.decompress(path.read_bytes()))
        by_id = {d.id: d for d in jax.devices()}
        devices = [by_id[i] for i in record["devices"]] if record.get("devices") else None
        compiled = serialize_executable.deserialize_and_load(
            record["blob"], record["in_tree"], record["out_tree"], execution_devices=devices)
    except Exception as e:  # noqa: BLE001 - a stale or broken entry: compile as before
        stats["failed"] += 1
        log.warning("program store: %s not read back (%s: %s); compiling", path.name, type(e).__name__, e)
        path.unlink(missing_ok=True)
        return None
    try:
        os.utime(path)  # the last use, for the cap
    except OSError:
        pass
    return compiled


def _write(path: Path, compiled: Any, name: str, served: bytes | None = None) -> None:
    t0 = time.perf_counter()
    try:
        blob, in_tree, out_tree = program_bytes.serialize(compiled, served)
        data = zlib.compress(pickle.dumps({"blob": blob, "in_tree": in_tree, "out_tree": out_tree,
                                           "devices": program_bytes.devices_of(compiled), "name": name,
                                           "created": time.time()}), 1)
    except Exception as e:  # noqa: BLE001 - a program that cannot be kept is only compiled
        stats["failed"] += 1
        log.warning("program store: %s not kept (%s: %s)", name, type(e).__name__, e)
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        with _LOCK:
            prune(keep_free=len(data))
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        log.warning("program store: %s not written (%s)", path.name, e)
        return
    stats["stored"] += 1
    log.info("%s: program kept for the next engine (%.1f MB, %.1f s)", name, len(data) / 1e6,
             time.perf_counter() - t0)


def remembered_shapes(name: str, key: Any, make: Callable[[], Any]) -> Any:
    """``make()``'s tree of ``ShapeDtypeStruct`` in nested dicts (an abstract trace's result,
    e.g. the adapters' shapes: ~1-3 s of tracing the 270M), read back from the store when it is
    on and holds it (keyed like a program, this build's fingerprint included)."""
    import jax
    import numpy as np

    path = entry_path(name, key, ".shapes")
    if path is not None and path.is_file():
        try:
            tree: dict[str, Any] = {}
            for keys, shape, dtype in pickle.loads(path.read_bytes()):
                node = tree
                for k in keys[:-1]:
                    node = node.setdefault(k, {})
                node[keys[-1]] = jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype))
            return tree
        except Exception as e:  # noqa: BLE001 - made again below
            log.warning("program store: %s not read back (%s)", path.name, e)
    tree = make()
    if path is not None:
        rows = []
        for keys, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            names = [getattr(k, "key", None) for k in keys]
            if not all(isinstance(n, str) for n in names) or not isinstance(leaf, jax.ShapeDtypeStruct):
                return tree  # not plain nested dicts of shapes: not kept
            rows.append((names, tuple(leaf.shape), np.dtype(leaf.dtype).name))
        try:
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_bytes(pickle.dumps(rows))
            os.replace(tmp, path)
        except OSError as e:
            log.warning("program store: %s not written (%s)", path.name, e)
    return tree


def prune(*, keep_free: int = 0) -> list[str]:
    """Remove the least recently used entries until they and ``keep_free`` bytes fit the cap."""
    root = _FOLDER
    if root is None or not root.is_dir():
        return []
    entries = []
    for p in root.glob(f"*{SUFFIX}"):
        try:
            st = p.stat()
        except OSError:
            continue
        entries.append((st.st_mtime, st.st_size, p))
    entries.sort()
    total = sum(size for _, size, _ in entries) + keep_free
    removed = []
    while entries and total > cap_bytes():
        _, size, p = entries.pop(0)
        p.unlink(missing_ok=True)
        total -= size
        removed.append(p.name)
    return removed


def report() -> dict[str, Any]:
    """The store as ``doctor`` may show it: folder, cap, entries and bytes."""
    root = _FOLDER
    files = list(root.glob(f"*{SUFFIX}")) if root is not None and root.is_dir() else []
    return {"path": str(root or ""), "enabled": root is not None, "cap_bytes": cap_bytes(),
            "entries": len(files), "bytes": sum(f.stat().st_size for f in files)}
