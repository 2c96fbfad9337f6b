"""Noticing a lost process of the job (the collectives would wait on it for ever)."""

from __future__ import annotations

import logging
import os
from typing import Any

from adapters_lib.multihost.distributed import process_count, process_index

log = logging.getLogger("adapters_lib.multihost")


def _client() -> Any:
    from jax._src import distributed

    return distributed.global_state.client


def _try_get(client: Any, key: str) -> str | None:
    try:
        return client.key_value_try_get(key)
    except Exception:  # noqa: BLE001 - not written yet
        return None


class Watchdog:
    """Notices a lost process of the job (the collectives would wait on it for ever).

    Each process writes a heartbeat counter to the coordination service's key-value store
    every ``interval`` seconds and reads the others'. A counter that has not moved for
    ``timeout`` seconds (by this process's own clock, so host clocks need not agree), or a
    coordination service that stops answering (process 0 died), is a lost process: the
    watchdog calls ``on_lost(reason)`` (process 0 marks its active run ``interrupted``),
    then ends this process with ``exit_code``. A JAX job cannot go on without one of its
    processes: restart every process, then resume. (``get_live_nodes`` of the coordination
    client did not notice a killed process within 25 s in jax 0.12, hence the counters.)
    """

    PREFIX = "gemma_workbench/heartbeat/"
    LOST_EXIT = 75
    """The exit status of a process that ends because the job lost a process (EX_TEMPFAIL)."""

    def __init__(self, on_lost: Any = None, *, interval: float = 1.0, timeout: float | None = None,
                 exit_code: int = LOST_EXIT):
        import threading

        self.on_lost = on_lost
        self.interval = interval
        self.timeout = timeout if timeout is not None else float(
            os.environ.get("GEMMA_WORKBENCH_MULTIHOST_TIMEOUT", "30"))
        self.exit_code = exit_code
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="multihost-watchdog", daemon=True)

    def start(self) -> Watchdog:
        if _client() is not None and process_count() > 1:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        try:
            self._watch_loop()
        except Exception:  # noqa: BLE001 - never silently
            log.exception("multi-host watchdog failed")

    def _watch_loop(self) -> None:
        import time

        client = _client()
        me, want = process_index(), process_count()
        beat = 0
        seen: dict[int, tuple[str | None, float]] = {}
        failing_since: float | None = None
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            beat += 1
            try:
                client.key_value_set(f"{self.PREFIX}{me}", str(beat), allow_overwrite=True)
                failing_since = None
            except Exception as e:  # noqa: BLE001 - the coordination service is gone
                failing_since = failing_since or now
                if now - failing_since >= min(self.timeout, 5.0):
                    self._lost(f"lost the coordinator (process 0): {type(e).__name__}")
                    return
                continue
            values = {p: _try_get(client, f"{self.PREFIX}{p}") for p in range(want) if p != me}
            log.debug("multi-host heartbeat %d: %s", beat, values)
            for p, value in values.items():
                last_value, since = seen.get(p, (None, now))
                if value != last_value:
                    seen[p] = (value, now)
                elif now - since > self.timeout:
                    self._lost(f"process {p} of {want} sent no heartbeat for {now - since:.0f} s")
                    return

    def _lost(self, reason: str) -> None:
        if self._stop.is_set():
            return
        log.error("multi-host: %s; exiting (restart every process, then resume)", reason)
        try:
            if self.on_lost is not None:
                self.on_lost(reason)
        except Exception:  # noqa: BLE001 - exiting anyway
            log.exception("multi-host: on_lost failed")
        finally:
            logging.shutdown()
            os._exit(self.exit_code)
