"""A run's states (contract: the ``state`` of status.json) and the moves allowed between them.

::

    queued ──▶ running ──▶ completed
      │  │        │ └──▶ stopping ──▶ stopped ──┐
      │  │        └──────────────────▶ stopped  │ resume (queued, or running in the
      │  └──────▶ failed ◀── running/stopping   │ foreground) from stopped, failed,
      └─────────▶ interrupted ◀── the owner is gone ┘ interrupted

``completed`` is final (``stopping`` → ``completed`` when a hook ended the run early).
``failed`` may become ``interrupted`` (a multi-host job that lost a
process first sees the runtime error). Writing a run's current state again (a progress
update) is always allowed; any other move not in ``TRANSITIONS`` is refused.
"""

from __future__ import annotations

import enum

from adapters_lib.errors import WorkbenchError


class RunState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


STATES = tuple(s.value for s in RunState)
ACTIVE_STATES = (RunState.QUEUED, RunState.RUNNING, RunState.STOPPING)
"""States in which a process is (or should be) working on the run."""
RESUMABLE_STATES = (RunState.STOPPED, RunState.FAILED, RunState.INTERRUPTED)
TERMINAL_STATES = (RunState.STOPPED, RunState.COMPLETED, RunState.FAILED, RunState.INTERRUPTED)
"""The states a run ends in (compared as ``RunState``: a reply's ``state`` string equals its member)."""

TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"running", "stopped", "failed", "interrupted"}),
    "running": frozenset({"stopping", "stopped", "completed", "failed", "interrupted"}),
    "stopping": frozenset({"stopped", "completed", "failed", "interrupted"}),
    "stopped": frozenset({"queued", "running"}),
    "failed": frozenset({"queued", "running", "interrupted"}),
    "interrupted": frozenset({"queued", "running"}),
    "completed": frozenset(),
}


class IllegalTransition(WorkbenchError):
    """A state change the lifecycle does not allow (e.g. ``completed`` → ``running``)."""


def can_move(current: str, new: str) -> bool:
    return new == current or new in TRANSITIONS.get(current, frozenset())


def check_move(run_id: str, current: str, new: str) -> None:
    if new not in STATES:
        raise ValueError(f"unknown run state {new!r}")
    if not can_move(current, new):
        allowed = ", ".join(sorted(TRANSITIONS.get(current, ()))) or "nothing (it is final)"
        raise IllegalTransition(f"run {run_id} cannot go from {current} to {new}",
                                hint=f"from {current} a run may go to {allowed}")
