"""The run directory as each process of the job sees it.

``run_dir_for(path)``: the plain ``RunDir`` on process 0; a ``FollowerRunDir`` elsewhere, which
writes no metrics, events or status (it keeps its own status in memory) but shares
``checkpoints/`` — orbax's multi-host save/restore needs every process to call it on the
same directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters_lib.multihost.distributed import is_primary
from adapters_lib.runs import RunDir


@dataclass(frozen=True)
class FollowerRunDir(RunDir):
    """The run directory as seen by a process other than 0: reads work, writes are kept in
    memory (status) or dropped (metrics, events, the owner lease); ``checkpoints_dir`` is the
    shared one."""

    records = False

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "_status", dict(RunDir.status(self)))

    def status(self) -> dict[str, Any]:
        return dict(self._status)  # type: ignore[attr-defined]

    def append_metrics(self, record: dict[str, Any]) -> None:
        pass

    def append_event(self, kind: str, **fields: Any) -> dict[str, Any]:
        import time

        return {"time": round(time.time(), 3), "kind": kind, **fields}

    def append_metrics_many(self, records: Any) -> None:
        pass

    def sync_metrics(self) -> None:
        pass

    def write_status(self, state: str, *, expect: Any = None, **fields: Any) -> dict[str, Any] | None:
        status = self._status  # type: ignore[attr-defined]
        if expect is not None and status.get("state") not in tuple(expect):
            return None
        status.update(fields)
        status.update(state=state, run_id=self.run_id)
        return dict(status)

    def truncate_metrics_after(self, step: int) -> None:
        pass


def run_dir_for(path: str | Path) -> RunDir:
    """``RunDir`` on the primary process, ``FollowerRunDir`` on the others."""
    return RunDir(Path(path)) if is_primary() else FollowerRunDir(Path(path))
