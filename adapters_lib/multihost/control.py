"""The training control of a multi-host run: process 0's stop decision, on every process."""

from __future__ import annotations

from typing import Any

from adapters_lib.multihost.bus import Bus
from adapters_lib.multihost.distributed import is_primary
from adapters_lib.multihost.messages import Step


class SyncedControl:
    """A ``TrainControl`` whose stop decision is process 0's, on every process.

    Process 0 wraps its real control (``inner``); the others have ``inner=None``. Each call of
    ``should_stop`` is one ``Bus`` message, so every process leaves the loop at the same step.
    Metrics and events reach ``inner`` on process 0 only; ``between_steps`` runs only there
    (the engine serves sampling on process 0's own devices).
    """

    def __init__(self, bus: Bus, inner: Any = None):
        self.bus = bus
        self.inner = inner

    def should_stop(self) -> bool:
        if is_primary():
            local = bool(self.inner.should_stop()) if self.inner is not None else False
            return self.bus.send_command(Step(stop=local)).stop
        msg = self.bus.receive_command()
        if not isinstance(msg, Step):
            raise RuntimeError(f"multi-host: expected a step message, got {msg.name!r}")
        return msg.stop

    def on_metrics(self, record: dict[str, Any]) -> None:
        if self.inner is not None and is_primary():
            self.inner.on_metrics(record)

    def on_event(self, record: dict[str, Any]) -> None:
        if self.inner is not None and is_primary():
            self.inner.on_event(record)

    def between_steps(self) -> None:
        if self.inner is not None and is_primary():
            self.inner.between_steps()
