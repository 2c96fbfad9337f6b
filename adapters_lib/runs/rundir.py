"""``RunDir``: the paths of one run directory (contract) and its small readers and writers.

Every state change goes through ``write_status``: under a lock on the run folder it reads
the current state, refuses a move the lifecycle does not allow (``state.check_move``), and
replaces status.json atomically and durably. ``expect=`` makes it a compare-and-set: the
write happens only if the run is still in one of those states (a reconciler never overwrites
a state another thread or process has just written). Events are appended and fsync'd;
metrics are flushed per line and fsync'd before each checkpoint (``sync_metrics``): a resume
drops metric lines past its checkpoint anyway.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from adapters_lib.runs import files
from adapters_lib.runs.state import check_move


def now() -> float:
    return round(time.time(), 3)


@dataclass(frozen=True)
class RunDir:
    """Paths of one run directory, and small readers/writers over them."""

    path: Path
    records: ClassVar[bool] = True
    """Whether this process records the run (status, events, metrics, lease). False on the
    processes of a multi-host job other than 0 (``multihost.FollowerRunDir``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def config_path(self) -> Path:
        return self.path / "config.toml"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def events_path(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def status_path(self) -> Path:
        return self.path / "status.json"

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def adapter_dir(self) -> Path:
        return self.path / "adapter"

    @property
    def owner_path(self) -> Path:
        """``owner.json``: the lease of the process that works on the run (``runs.lease``)."""
        return self.path / "owner.json"

    # ----------------------------------------------------------------- reading

    def exists(self) -> bool:
        return self.config_path.is_file()

    def config(self):
        """The run's resolved ``RunConfig``."""
        from adapters_lib.config import load_config

        return load_config(self.config_path)

    def metrics(self) -> list[dict[str, Any]]:
        return files.read_jsonl(self.metrics_path)

    def events(self) -> list[dict[str, Any]]:
        return files.read_jsonl(self.events_path)

    def status(self) -> dict[str, Any]:
        """The last status written; ``{"state": "queued", ...}`` before any; ``failed`` (in
        memory, nothing written) when the run's folder itself is gone."""
        try:
            return json.loads(self.status_path.read_text(encoding="utf-8"))
        except (FileNotFoundError, NotADirectoryError):
            if not self.path.is_dir():
                return {"state": "failed", "step": 0, "total_steps": 0, "updated": None,
                        "run_id": self.run_id, "message": f"its folder {self.path} is gone"}
            return {"state": "queued", "step": 0, "total_steps": 0, "updated": None}
        except json.JSONDecodeError:  # never torn (os.replace); only a hand-edited file
            return {"state": "interrupted", "step": 0, "total_steps": 0, "updated": None}

    @property
    def state(self) -> str:
        return str(self.status().get("state", "queued"))

    def checkpoints(self) -> list[int]:
        """Steps with a complete, finite checkpoint, ascending (``runs.checkpoints``)."""
        from adapters_lib.runs.checkpoints import complete_steps

        return complete_steps(self.checkpoints_dir)

    # ----------------------------------------------------------------- writing

    def append_metrics(self, record: dict[str, Any]) -> None:
        files.append_jsonl(self.metrics_path, record, durable=False)

    def append_metrics_many(self, records: Iterable[dict[str, Any]]) -> None:
        files.append_jsonl_many(self.metrics_path, records, durable=False)

    def sync_metrics(self) -> None:
        """Make every metric line written so far durable (before a checkpoint)."""
        files.fsync_file(self.metrics_path)

    def append_event(self, kind: str, **fields: Any) -> dict[str, Any]:
        record = {"time": now(), "kind": kind, **fields}
        files.append_jsonl(self.events_path, record)
        return record

    def write_status(self, state: str, *, expect: Iterable[str] | None = None,
                     **fields: Any) -> dict[str, Any] | None:
        """Move to ``state`` (merging ``fields``) and replace status.json atomically and durably.

        Raises ``IllegalTransition`` for a move the lifecycle refuses and ``FileNotFoundError``
        when the run folder is gone. With ``expect``, writes only if the current state is one
        of them, else returns None.
        """
        with files.dir_lock(self.path):
            status = self.status()
            current = str(status.get("state", "queued"))
            if expect is not None and current not in tuple(expect):
                return None
            check_move(self.run_id, current, state)
            status.update(fields)
            status.update(state=state, run_id=self.run_id, updated=now())
            files.write_json_atomic(self.status_path, status)
        return status

    def set_state(self, state: str, message: str = "", *, expect: Iterable[str] | None = None,
                  **fields: Any) -> dict[str, Any] | None:
        """Write the state to status.json and a ``state`` event to events.jsonl."""
        extra = {"message": message} if message else {}
        kwargs = {"expect": expect} if expect is not None else {}
        status = self.write_status(state, **kwargs, **fields, **extra)
        if status is not None:
            self.append_event("state", state=state, step=status.get("step", 0), **extra)
        return status

    def truncate_metrics_after(self, step: int) -> None:
        """Drop metric lines past ``step`` (a resume re-runs them from the checkpoint)."""
        kept = [m for m in self.metrics() if int(m.get("step", 0)) <= step]
        tmp = self.metrics_path.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(json.dumps(m) + "\n" for m in kept))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.metrics_path)
        files.fsync_dir(self.path)
