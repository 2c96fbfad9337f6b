"""``engine.stack_sampler``: a thread kept from the GIL says how long it waited, and names the
thread and the line that held it (what a stall between a run's steps was spent on)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from adapters_lib.engine.stack_sampler import StackSampler

HEADER = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} late (\d+) ms(; .*)?$")


def _hold_the_gil() -> float:
    """One C call that keeps the GIL for its whole length (``sum`` over a range of ints checks
    for no switch request), then a sleep (the GIL let go): the call's length."""
    t0 = time.perf_counter()
    sum(range(30_000_000))
    held = time.perf_counter() - t0
    time.sleep(0.2)
    return held


def _records(text: str) -> list[tuple[float, list[str]]]:
    """(late in ms, the record's stack lines) per sample, in order."""
    out: list[tuple[float, list[str]]] = []
    for line in text.splitlines():
        m = HEADER.match(line)
        if m:
            out.append((float(m.group(1)), []))
        elif " gc generation " in line:
            continue
        else:
            assert out and line.startswith("  "), line  # a stack line belongs to a sample
            out[-1][1].append(line)
    return out


def test_a_long_hold_of_the_gil_is_written_with_the_holders_stack(tmp_path):
    path = tmp_path / "stacks.log"
    sampler = StackSampler(path, 0.02).start()
    try:
        time.sleep(0.2)  # quiet samples first
        held = _hold_the_gil()
    finally:
        sampler.stop()
    records = _records(path.read_text())
    assert held > 0.1 and len(records) >= 5, (held, records)
    quiet = [stack for late, stack in records if late < sampler.late_s * 1e3]
    assert not any(quiet)  # a sample on time is one line (under load, few may be on time)
    stalled = [stack for late, stack in records if late >= 0.5 * held * 1e3]
    assert stalled, (held, [late for late, _ in records])
    # the wait's record names the thread that held the GIL, in the function that held it
    assert any(any("thread MainThread:" in line for line in stack)
               and any("test_stack_sampler.py" in line and "_hold_the_gil" in line for line in stack)
               for stack in stalled), stalled


def test_a_long_garbage_collection_is_written_with_its_generation_and_length(tmp_path):
    """A full collection walks the whole heap holding the GIL: the steps beside it wait (a
    trace of the Gemma-3-1B step met one of 0.37 s on this CPU). One that takes ``gc_s`` or
    more is written, with its generation, its length and the thread that ran it. In a Python
    of its own (a test worker's heap would make the collection seconds long)."""
    import subprocess
    import sys

    here = Path(__file__).resolve().parent
    path = tmp_path / "stacks.log"
    out = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(here)!r}); "
                          f"import test_stack_sampler; test_stack_sampler.collect_cycles({str(path)!r})"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    freed, took_ms = map(float, out.stdout.split())
    lines = [line for line in path.read_text().splitlines() if " gc generation 2 " in line]
    assert freed >= 200_000 and lines, path.read_text()
    m = re.search(r"gc generation 2 took (\d+) ms \((\d+) collected\) in MainThread$", lines[-1])
    assert m and int(m.group(2)) >= 200_000 and int(m.group(1)) <= took_ms + 1, lines[-1]


def collect_cycles(path: str) -> None:
    import gc

    sampler = StackSampler(Path(path), 10.0, gc_s=0.0).start()  # every collection, no sample
    try:
        cycles = [[] for _ in range(200_000)]
        for c in cycles:
            c.append(c)  # garbage only the collector frees
        del cycles, c
        t0 = time.perf_counter()
        freed = gc.collect()
        took = time.perf_counter() - t0
    finally:
        sampler.stop()
    assert gc.callbacks.count(sampler._on_gc) == 0  # taken out at stop
    print(freed, took * 1e3)


def test_a_wait_met_while_writing_a_sample_is_written_too(tmp_path):
    """A sample's write gives the GIL up (file I/O) and waits to have it back: a stall that
    began then is written as the next record, not lost in the sampler's own write (the suite
    once saw a 0.31 s hold recorded nowhere)."""
    sampler = StackSampler(tmp_path / "stacks.log", 0.02).start()

    class SlowOnce:  # the first write waits 0.2 s, as for the GIL held elsewhere
        def __init__(self, out):
            self.out, self.slow = out, True

        def write(self, text: str) -> int:
            if self.slow:
                self.slow = False
                time.sleep(0.2)
            return self.out.write(text)

        def close(self) -> None:
            self.out.close()

    sampler._out = SlowOnce(sampler._out)
    try:
        time.sleep(0.3)
    finally:
        sampler.stop()
    lates = [late for late, _ in _records((tmp_path / "stacks.log").read_text())]
    assert any(late >= 190 for late in lates), lates


def _run_item(release: threading.Event) -> None:
    """As the engine's scheduler runs a run: under a function of that name (``BUSY``)."""
    release.wait()  # without the GIL, at one line: as a step waiting on the runtime


def test_the_device_thread_waiting_at_one_line_is_written_with_every_stack(tmp_path):
    """A wait that holds no GIL (the runtime, a transfer, a lock) never makes the sampler late;
    the device thread standing at one line for ``stuck_s`` is written once, with the line it
    waits at. Idle (not under the scheduler's run or job), the same wait says nothing."""
    path = tmp_path / "stacks.log"
    name = "device-under-test"  # an engine's own "device" thread may live on in this process
    sampler = StackSampler(path, 0.02, stuck_s=0.2, watch=name).start()
    busy, idle = threading.Event(), threading.Event()
    working = threading.Thread(target=_run_item, args=(busy,), name=name)
    try:
        working.start()
        time.sleep(0.6)
        busy.set()
        working.join()
        waiting = threading.Thread(target=idle.wait, name=name)  # the scheduler waits for work
        waiting.start()
        time.sleep(0.6)
        idle.set()
        waiting.join()
    finally:
        busy.set()
        idle.set()
        sampler.stop()
    text = path.read_text()
    told = [line for line in text.splitlines() if "at one line for" in line]
    assert len(told) == 1, told  # once a wait, and never for the idle one
    assert float(re.search(r"for ([\d.]+) s", told[0]).group(1)) >= 0.2
    device = [stack for _, stack in _records(text) if any(f"thread {name}:" in line for line in stack)]
    assert device and any("test_stack_sampler.py" in line and "_run_item" in line for line in device[0]), device


def test_a_sample_keeps_no_threads_frame_alive_after_it(tmp_path):
    """A frame the sampler read dies with its function, not in a later collection: its
    locals (on Python 3.12.1 a ``BytesIO`` and its ``getbuffer()`` view, collected together in
    a cycle, crash the interpreter: gh-111049, which killed the engine on the v5e) go at once."""
    import gc
    import weakref

    class Held:  # a local of the sampled thread's frame
        pass

    sampler = StackSampler(tmp_path / "stacks.log", every=60.0, late_s=0.0)  # every sample has stacks
    sampler._out = open(tmp_path / "stacks.log", "a", encoding="utf-8")
    sampled, finish = threading.Event(), threading.Event()
    refs: list[weakref.ref] = []

    def work() -> None:
        held = Held()
        refs.append(weakref.ref(held))
        sampled.wait(10)
        finish.set()

    gc.disable()  # only reference counts free it, as between two collections in the engine
    try:
        t = threading.Thread(target=work, name="sampled")
        t.start()
        while not refs:
            time.sleep(0.01)
        sampler._write(1.0)  # reads every thread's frame, ``work``'s among them
        sampled.set()
        t.join(10)
        assert finish.is_set() and refs[0]() is None, "a finished frame's locals outlived it"
    finally:
        gc.enable()
        sampler._out.close()
    assert "thread sampled:" in (tmp_path / "stacks.log").read_text()
