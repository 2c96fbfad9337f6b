"""When the program store writes its copies (``program_store``): a program serves at once;
its copy for the next engine is written when nothing needs the GIL it holds.

Serializing an executable holds the GIL (a 20 MB program ~2 s on the v5e's host: a 1.73 s stall
between the 1B's steps). So a copy waits:
- while a run's steps run (``steps_running``), when a compile thread made it;
- in an engine (``write_when_idle``: its idle clock), until the engine has been idle
  ``QUIET_S`` — also the copy of the program the device thread compiled for a run's first step
  (on the v5e writing the 1B's took 20.1 s before step 1) or that a compile thread finished in
  the next run's set-up (17.3 s of the 270M's rank tweak).

A waiting program is written by one thread (``program-store-writer``), or at once by ``flush``
(the process ends, a test reads the store). Until its file is in place ``unwritten`` gives it
to whoever needs it again: on the v5e the 270M's length tweak waited 48 s for a second compile
of a program compiled a minute earlier, its copy waiting for idle and its ``Steps`` no longer
among the eight ``step_programs.kept`` holds.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("adapters_lib.program_store")

QUIET_S = 1.0
"""Seconds the process must have been idle (``write_when_idle``) before a waiting copy is
written: not in a run's end, the Compare warm-up after it, a Compare's stream or the next
run's set-up (on the v5e the cold 270M run's end took 22.4 s beside the writes)."""

_QUIET = threading.Condition()
_running = 0
"""Runs whose steps run now (``steps_running``)."""
_queue: list[tuple[Path, Callable[[], None]]] = []
"""The copies to write, oldest first: (their file, the write)."""
_unwritten: dict[Path, Any] = {}
"""Each waiting program by its file, queued or being written (``unwritten``)."""
_writer: threading.Thread | None = None
_idle_for: Callable[[], float] | None = None


def steps_running() -> Callable[[], None]:
    """While a run's steps run (until the returned function is called; idempotent), a program
    compiled on a compile thread is written when they end and the process is idle."""
    global _running
    with _QUIET:
        _running += 1
    done = False

    def release() -> None:
        global _running
        nonlocal done
        with _QUIET:
            if done:
                return
            done = True
            _running -= 1
            _QUIET.notify_all()

    return release


def write_when_idle(idle_for: Callable[[], float] | None) -> None:
    """The process's idle clock (the engine's ``idle_for``: seconds since it last did anything,
    0 while it trains or streams), which the copies wait on; None: only the steps."""
    global _idle_for
    _idle_for = idle_for


def unwritten(path: Path | None) -> Any:
    """The program whose copy for ``path`` waits or is being written, else None."""
    if path is None:
        return None
    with _QUIET:
        return _unwritten.get(path)


def write_or_defer(path: Path, compiled: Any, name: str, write: Callable[[], None]) -> None:
    """``write()`` (``compiled``'s copy into ``path``) now, or later (the module doc)."""
    global _writer
    behind = threading.current_thread().name.startswith("compile-behind")  # ``compile_queue``'s
    busy = _idle_for is not None and not _idle()
    with _QUIET:
        if busy or (behind and _running):
            _queue.append((path, write))
            _unwritten[path] = compiled
            if _writer is None:
                _writer = threading.Thread(target=_write_when_quiet, name="program-store-writer",
                                           daemon=True)
                _writer.start()
            _QUIET.notify_all()
            log.info("program store: %s kept for when the engine is idle (serializing holds the "
                     "GIL)", name)
            return
    write()


def flush() -> int:
    """Write every waiting copy now; how many."""
    n = 0
    while _write_next():
        n += 1
    return n


def _idle() -> bool:
    clock = _idle_for
    if clock is None:
        return True
    try:
        return clock() >= QUIET_S
    except Exception:  # noqa: BLE001 - a clock that fails never holds a write back
        return True


def _write_when_quiet() -> None:
    while True:
        with _QUIET:
            _QUIET.wait_for(lambda: _queue and not _running)
        if not _idle():
            time.sleep(0.25)
            continue
        with _QUIET:
            if _running:
                continue
        _write_next()


def _write_next() -> bool:
    """Write the oldest waiting copy (``unwritten`` finds its program until its file is in
    place); False when none waits."""
    with _QUIET:
        if not _queue:
            return False
        path, write = _queue.pop(0)
    try:
        write()
    finally:
        with _QUIET:
            _unwritten.pop(path, None)
    return True


atexit.register(flush)
