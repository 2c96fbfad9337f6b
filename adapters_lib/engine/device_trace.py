"""A device trace of chosen runs (``GEMMA_WORKBENCH_TRACE_RUNS``): what the accelerator and each
host thread did while a run's steps were slow.

``GEMMA_WORKBENCH_TRACE_RUNS="2,3"`` records JAX's profiler trace of the engine's 2nd and 3rd
runs (counted from 1 in this engine process) under ``state/traces/run-N/``, and beside each a
``summary.txt`` (``summarize``): every program the device ran, when and for how long; its other
events of 1 ms or more; each host thread's calls of 100 ms or more, with the labels the thread
ran under (the run, a compile job). Unset or empty: nothing is traced. A value that is not a
list of run numbers is a warning, and nothing is traced.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ENV = "GEMMA_WORKBENCH_TRACE_RUNS"
_lock = threading.Lock()
_count = 0


def chosen(text: str | None = None) -> set[int]:
    """The run numbers ``GEMMA_WORKBENCH_TRACE_RUNS`` names (empty: none)."""
    text = os.environ.get(ENV, "") if text is None else text
    try:
        runs = {int(part) for part in text.replace(" ", "").split(",") if part}
    except ValueError:
        runs = {0}
    if any(n < 1 for n in runs):
        log.warning("%s is %r, not run numbers (1 is the engine's first run); nothing is traced", ENV, text)
        return set()
    return runs


@contextlib.contextmanager
def maybe_trace(folder: Path) -> Iterator[None]:
    """Around one run: a device trace into ``folder/run-N`` when run N is chosen."""
    global _count
    with _lock:
        _count += 1
        number = _count
    if number not in chosen():
        yield
        return
    import jax

    out = folder / f"run-{number}"
    out.mkdir(parents=True, exist_ok=True)
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # the runtime's events, not every Python call
    options.host_tracer_level = 1
    try:
        jax.profiler.start_trace(str(out), profiler_options=options)
    except Exception as e:  # noqa: BLE001 - a trace never fails the run (another one running…)
        log.warning("device trace of run %d not started (%s: %s)", number, type(e).__name__, e)
        yield
        return
    log.info("device trace of run %d to %s", number, out)
    try:
        with jax.profiler.TraceAnnotation(f"run {number} (the device thread)"):
            yield
    finally:
        try:
            jax.profiler.stop_trace()
            (out / "summary.txt").write_text(summarize(out))
        except Exception as e:  # noqa: BLE001 - the run's own end matters, not its trace's
            log.warning("device trace of run %d: no summary (%s: %s)", number, type(e).__name__, e)


def summarize(folder: Path, host_min_ms: float = 100.0) -> str:
    """From the trace under ``folder`` (``*.trace.json.gz``, one timeline for host and device):
    every program the device ran (start in seconds from the trace's first event, duration), its
    other events of 1 ms or more, and each host thread's events of ``host_min_ms`` or more,
    with the thread's name and the labels it ran under (the traced run, a compile job:
    ``TraceAnnotation``), so that a long call says which thread made it."""
    import gzip
    import json

    lines: list[str] = []
    for path in sorted(folder.rglob("*.trace.json.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            events = json.load(f).get("traceEvents", [])
        procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
        threads = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
                   if e.get("ph") == "M" and e.get("name") == "thread_name"}
        spans = [e for e in events if e.get("ph") == "X" and "ts" in e]
        if not spans:
            continue
        t0 = min(e["ts"] for e in spans)
        labels: dict[Any, list[str]] = {}  # thread -> the labels it ran under, in order
        for e in spans:
            name = str(e.get("name", ""))
            seen = labels.setdefault(e.get("tid"), []) if name.startswith(("compile job ", "run ")) else None
            if seen is not None and name not in seen:
                seen.append(name)
        kept = []
        for e in spans:
            proc = procs.get(e["pid"], str(e["pid"]))
            thread = threads.get((e["pid"], e.get("tid")), str(e.get("tid")))
            dur_ms = float(e.get("dur", 0)) / 1e3
            device = proc.startswith("/device")
            if device and thread == "XLA Ops":
                continue
            if (device and (thread == "XLA Modules" or dur_ms >= 1)) or dur_ms >= host_min_ms:
                kept.append((e["ts"], dur_ms, proc, thread, e.get("tid"), str(e.get("name", ""))))
        lines.append(f"== {path.name}: {len(kept)} events, seconds from the first")
        lines += [f"   thread {tid}: {'; '.join(names[:3])}" for tid, names in labels.items()]
        for ts, dur_ms, proc, thread, tid, name in sorted(kept, key=lambda k: k[0]):
            where = thread if proc.startswith("/device") else f"{thread} [{tid}]"
            lines.append(f"{(ts - t0) / 1e6:9.3f} {dur_ms:10.1f} ms  {proc} {where}: {name[:120]}")
    return "\n".join(lines) + "\n"
