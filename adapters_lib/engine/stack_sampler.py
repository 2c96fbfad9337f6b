"""What a stall between steps waited for (``GEMMA_WORKBENCH_STACKS_EVERY_S``): a thread that
wakes at that period and writes to ``state/stacks.log`` how late it woke — how long it waited
for the GIL — and, when that wait was long, every other thread's Python stack; and every
garbage collection that took as long. And when the thread that runs the steps (``watch``: the
engine's ``device``) stands at one line for ``stuck_s`` or more — a call that waits without the
GIL (a transfer, a lock, the runtime), which no late wake-up shows — every thread's stack, once
a wait.

A thread that holds the GIL in native code (a lowering pass, a serialize) keeps this one
waiting; when it lets go, its stack still stands at the line that made the call, so a late
sample names what held the interpreter. The sampler holds the GIL while it reads the stacks
(``sys._current_frames``), which is what makes it safe: ``faulthandler``'s watchdog reads them
without the GIL, and on the TPU VM the engine ended within ~30 s of being ready with a 0.25 s
period (its JAX import thread making frames the while); it did not on the CPU.

The frames it reads are let go before each sample ends (its own taken out of the dict, the dict
cleared): the sampler's frame in that dict made a reference cycle holding every thread's frame
of the moment, so a frame whose function had returned (its locals with it) died only in a
later collection. On the v5e, with Python 3.12.1, that killed the engine at a run's end twice:
the finished frame of tensorboardX's queue feeder held a ``BytesIO.getbuffer()`` view, and a
collection of a ``BytesIO`` with its view in one cycle is CPython's segfault gh-111049.
"""

from __future__ import annotations

import datetime
import gc
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TextIO

DEPTH = 14
"""Innermost frames written per thread."""
BUSY = frozenset({"_run_item", "_run_job"})
"""The engine scheduler's functions under which its device thread works (elsewhere it waits
for work, at one line as long as it is idle)."""


def _busy(frame: object | None) -> bool:
    while frame is not None:
        if frame.f_code.co_name in BUSY:  # type: ignore[attr-defined]
            return True
        frame = frame.f_back  # type: ignore[attr-defined]
    return False


class StackSampler:
    def __init__(self, path: Path, every: float, *, late_s: float | None = None,
                 gc_s: float | None = None, watch: str = "device", stuck_s: float = 1.0) -> None:
        self.path = Path(path)
        self.every = float(every)
        self.late_s = max(0.05, self.every / 5) if late_s is None else float(late_s)
        """A wake-up at least this late writes every thread's stack (else one line)."""
        self.gc_s = self.late_s if gc_s is None else float(gc_s)
        """A garbage collection at least this long is written (a full one walks the whole heap
        holding the GIL: on this CPU a trace of the Gemma-3-1B step met one of 0.37 s, the
        longest pause of the steps beside it)."""
        self.watch, self.stuck_s = watch, float(stuck_s)
        self._at: tuple[int, int] | None = None
        """The watched thread's innermost frame and line at the last wake-up, and since when."""
        self._at_since = 0.0
        self._told = False
        self._gc_t0 = 0.0
        self._gc_lines: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._out: TextIO | None = None

    def start(self) -> StackSampler:
        self._out = open(self.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - the process's life
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)
        self._thread.start()
        gc.callbacks.append(self._on_gc)
        return self

    def stop(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._out is not None:
            gc_lines = self._flush_gc()
            if gc_lines:
                self._out.write("\n".join(gc_lines) + "\n")
            self._out.close()

    def _run(self) -> None:
        due = time.monotonic() + self.every
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            woke = time.monotonic()
            try:
                self._write(woke - due)
                stalled = time.monotonic() - woke  # the write gave the GIL up and waited to have it back:
                if stalled >= self.late_s:  # a stall met mid-write, written as one met at the wake-up
                    self._write(stalled)
            except (OSError, ValueError):  # the file went away (closed at stop): nothing to say
                return
            due += self.every
            if due < time.monotonic():  # after a stall: the next one a period on, not a burst
                due = time.monotonic() + self.every

    def _on_gc(self, phase: str, info: dict) -> None:
        """Noted here, written by the sampler (a write from the collecting thread could land
        inside one of the sampler's own, on the same file)."""
        if phase == "start":
            self._gc_t0 = time.perf_counter()
            return
        took = time.perf_counter() - self._gc_t0
        if took >= self.gc_s:
            stamp = datetime.datetime.now().strftime("%H:%M:%S.%f")[:-3]
            self._gc_lines.append(f"{stamp} gc generation {info['generation']} took {took * 1e3:.0f} ms "
                                  f"({info['collected']} collected) in {threading.current_thread().name}")

    def _flush_gc(self) -> list[str]:
        lines, self._gc_lines = self._gc_lines, []  # one swap under the GIL: none lost
        return lines

    def _stuck(self, frames: dict[int, object], names: dict[int, str]) -> float:
        """Seconds the watched thread has stood at its present line (0: it moved, or the
        wait was written already)."""
        ident = next((i for i, n in names.items() if n == self.watch), None)
        frame = frames.get(ident) if ident is not None else None
        at = (id(frame), frame.f_lineno) if _busy(frame) else None  # type: ignore[attr-defined]
        now = time.monotonic()
        if at != self._at:
            self._at, self._at_since, self._told = at, now, False
            return 0.0
        if at is None or self._told or now - self._at_since < self.stuck_s:
            return 0.0
        self._told = True
        return now - self._at_since

    def _write(self, late: float) -> None:
        stamp = datetime.datetime.now().strftime("%H:%M:%S.%f")[:-3]
        lines = [*self._flush_gc(), f"{stamp} late {late * 1e3:.0f} ms"]
        names = {t.ident: t.name for t in threading.enumerate()}
        frames = sys._current_frames()
        frames.pop(threading.get_ident(), None)  # this frame: in the dict, a cycle (see below)
        try:
            stuck = self._stuck(frames, names)
            if stuck:
                lines[-1] += f"; thread {self.watch} at one line for {stuck:.2f} s"
            if late >= self.late_s or stuck:
                for ident, frame in frames.items():
                    lines.append(f"  thread {names.get(ident, ident)}:")
                    lines += [f"    {f.filename}:{f.lineno} {f.name}"
                              for f in traceback.extract_stack(frame)[-DEPTH:]]
        finally:
            frames.clear()  # no thread's frame outlives this call here
        self._out.write("\n".join(lines) + "\n")
