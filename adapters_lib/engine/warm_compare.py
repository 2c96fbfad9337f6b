"""Warm a finished run's Compare programs while the engine idles (#31).

The user's loop is: train, then Compare. The first Compare of a run compiles its prefill
and decode (24 s on the real 270M at load 7, longer on a loaded machine). When a run
completes or is stopped and nothing else waits, the engine makes an internal Compare of a
short prompt through the real Compare's own path (``sampling.prepare`` and
``sampling.compare_job``: the run's latest checkpoint, its LoRA spec and generation dtype,
base and tuned in one batched program, ``api.Decoding``'s default settings, the smallest
prompt bucket). It stops at the first token (both programs are compiled by then, and kept in
the program store), is never saved nor shown, and its model stays in the sampling cache: the
user's Compare right after finds everything compiled.

It never delays a user's request beyond what is already compiling:

- it runs as an internal device job, only when no run trains or waits and no request waits;
  queued, it is skipped if one arrived meanwhile (and between training steps it never runs);
- a request or a run that arrives while it works cancels it at the next boundary (after the
  model load, at the first token); an XLA compile already under way cannot be interrupted
  and finishes first (then the request reuses it).

``GEMMA_WORKBENCH_WARM_COMPARE=0`` turns it off (the test suite does, ``tests/conftest.py``).
``status.warming`` names the run while it is queued or under way; the engine log says when it
starts and how long it took.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

log = logging.getLogger("adapters_lib.engine")

ENV = "GEMMA_WORKBENCH_WARM_COMPARE"
PROMPT = "Hi."
"""Short: the chat template around it stays in the smallest prompt bucket."""
STATES = ("completed", "stopped")


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


class Warmer:
    """The engine's Compare warm-up (one at a time; the device thread runs it)."""

    def __init__(self, engine: Any):
        self.engine = engine
        self._lock = threading.Lock()
        self.current: str | None = None
        """The run being warmed (queued or under way), for ``status``."""
        self.done = 0
        """Warm-ups that compiled what they meant to (tests, logs)."""

    def after_run(self, run: Any) -> None:
        """A run's training ended (the device thread, ``Engine.run_ended``): queue its warm-up
        if it completed or was stopped and the engine has nothing else to do."""
        if not enabled() or self.engine.scheduler.closing.is_set():
            return
        if str(run.state) not in STATES or self._other_work():
            return
        with self._lock:
            self.current = run.run_id
        try:
            self.engine.scheduler.submit(lambda: self._warm(run), label=f"warm compare {run.run_id}",
                                         internal=True)
        except Exception:  # noqa: BLE001 - the engine is closing: no warm-up
            self._clear(run.run_id)

    def _other_work(self) -> bool:
        """A run trains or waits, a request waits, or the engine closes."""
        return self.engine.scheduler.waiting()

    def _clear(self, run_id: str) -> None:
        with self._lock:
            if self.current == run_id:
                self.current = None

    def _warm(self, run: Any) -> None:
        from adapters_lib import program_store
        from adapters_lib.engine import api, sampling

        t0 = time.perf_counter()
        try:
            if self._other_work():
                log.info("run %s: Compare warm-up skipped after %.1f s (other work waits)", run.run_id,
                         time.perf_counter() - t0)
                return
            log.info("warming Compare for run %s", run.run_id)
            before = dict(program_store.stats)
            cmd = api.Compare(prompt=PROMPT, run_id=str(run.path), save=False)
            prepared = sampling.prepare(self.engine, cmd)
            sampling._model(cmd, prepared)  # the real Compare's model, kept in sampling's cache
            if self._other_work():
                log.info("run %s: Compare warm-up cancelled after %.1f s (model loaded; a request "
                         "or a run waits)", run.run_id, time.perf_counter() - t0)
                return
            sampling.compare_job(self.engine, cmd, prepared, lambda *_: False)  # stop at the 1st token
            self.done += 1
            got = {k: program_store.stats[k] - before[k] for k in ("compiled", "loaded")}
            log.info("run %s: Compare warmed in %.1f s (programs compiled %d, read back %d)",
                     run.run_id, time.perf_counter() - t0, got["compiled"], got["loaded"])
        except Exception as e:  # noqa: BLE001 - a warm-up never fails anything: the Compare will say
            log.warning("run %s: Compare warm-up failed after %.1f s (%s: %s)", run.run_id,
                        time.perf_counter() - t0, type(e).__name__, e)
        finally:
            self._clear(run.run_id)
