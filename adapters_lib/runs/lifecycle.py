"""The one place that records how a run ends badly: ``record_failure``, ``mark_interrupted``,
and ``reconcile`` (an active run whose owner is gone becomes ``interrupted``).

- ``record_failure(run, err)``: the run becomes ``failed`` with the one-line reason and the
  error envelope (``{"message", "where", "hint"}``, plus a traceback for a bug). It is
  recorded once per exception: the trainer harness records, the engine records what fails
  outside it, and neither needs to look at the other's work. A run whose folder is gone,
  or whose disk refuses the write, is failed in memory (the returned status) and logged:
  nothing is re-created behind the user's back.
- ``mark_interrupted(run, reason)``: ``interrupted`` (resumable), only if the run is still in
  one of ``expect`` (compare-and-set: a state just written elsewhere is never overwritten).
- ``reconcile(run, status)``: cheap enough for every request (read owner.json, look the owner
  up); ``here`` says the caller itself works on the run.
- ``settle(run, state, message)``: a trainer's own end (``stopped``/``completed``), releasing
  its lease.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.runs import lease
from adapters_lib.runs.rundir import RunDir, now
from adapters_lib.runs.state import ACTIVE_STATES, IllegalTransition, RunState

log = logging.getLogger("adapters_lib.runs")

_RECORDED = "_run_failure_recorded"


def failure_envelope(err: BaseException) -> tuple[str, dict[str, Any]]:
    """``(one-line message, error envelope)`` of an exception."""
    if isinstance(err, WorkbenchError):
        return str(err), err.to_dict()
    if isinstance(err, OSError) and err.filename and err.strerror:
        text = f"{type(err).__name__}: {err.strerror}: {err.filename}"
    else:
        text = f"{type(err).__name__}: {err}".rstrip(": ")
    return text, {"message": text, "where": None, "hint": "see the engine log",
                  "traceback": "".join(traceback.format_exception(err, limit=-12))}


def failure_recorded(err: BaseException) -> bool:
    return bool(getattr(err, _RECORDED, False))


def record_failure(run: RunDir, err: BaseException, **fields: Any) -> dict[str, Any]:
    """Mark ``run`` failed because of ``err`` (once per exception); return the status."""
    message, envelope = failure_envelope(err)
    failed = {"state": "failed", "run_id": run.run_id, "message": message, "error": envelope,
              "updated": now(), **fields}
    if failure_recorded(err):
        return failed
    try:
        err.__dict__[_RECORDED] = True
    except (AttributeError, TypeError):  # pragma: no cover - exceptions carry a __dict__
        pass
    try:
        status = run.set_state("failed", message, error=envelope, **fields)
    except IllegalTransition as e:  # it ended otherwise already (e.g. completed): keep that
        log.warning("run %s: not marked failed (%s): %s", run.run_id, e.message, message)
        return run.status()
    except OSError as e:  # the folder is gone, or the disk refuses the whole envelope
        status = _record_reason_only(run, message, envelope, e, fields)
        if status is None:
            return failed
    lease.release(run)
    return status or failed


def _record_reason_only(run: RunDir, message: str, envelope: dict[str, Any], err: OSError,
                        fields: dict[str, Any]) -> dict[str, Any] | None:
    """A full disk (or a file-size limit) may refuse status.json with a traceback in it, yet
    take the one-line reason: try that before leaving the run active on disk."""
    if not run.path.is_dir():
        log.error("run %s failed (%s) and its folder is gone: %s", run.run_id, message, err)
        return None
    short = {k: envelope.get(k) for k in ("message", "where", "hint")}
    try:
        return run.set_state("failed", message, error=short, **fields)
    except (OSError, IllegalTransition) as again:
        log.error("run %s failed (%s) and its status could not be written: %s; %s",
                  run.run_id, message, err, again)
        try:  # status.json may have taken it while the events line did not
            status = run.status()
        except OSError:
            return None
        return status if status.get("state") == RunState.FAILED else None


def mark_interrupted(run: RunDir, reason: str, *,
                     expect: tuple[str, ...] = ACTIVE_STATES) -> dict[str, Any] | None:
    """``interrupted`` (resumable) if the run is still in one of ``expect``; else None."""
    try:
        status = run.set_state("interrupted", reason, expect=expect)
    except (IllegalTransition, OSError) as e:
        log.warning("run %s: not marked interrupted: %s", run.run_id, e)
        return None
    if status is not None:
        lease.drop_stale(run)
        lease.release(run)
    return status


def settle(run: RunDir, state: str, message: str = "", **fields: Any) -> dict[str, Any] | None:
    """A trainer's own end (``stopped`` or ``completed``): write it, release the lease."""
    status = run.set_state(state, message, **fields)
    lease.release(run)
    return status


def owner_gone(run: RunDir, status: dict[str, Any], *, here: bool = False) -> str | None:
    """Why the active ``run`` has nobody working on it, or None while somebody does.

    ``here``: the calling process works on it. When the lease names the calling process but
    ``here`` is False, the run is an orphan of this process (its worker ended without
    settling it).
    """
    if here:
        return None
    owner = lease.owner_of(run, status)
    state = status.get("state")
    if owner is None:
        return ("the process that queued it is gone (no owner recorded)" if state == RunState.QUEUED
                else "the process running it is gone (no owner recorded)")
    if lease.is_me(owner):
        return f"{owner.describe()} no longer works on it"
    if lease.alive(owner):
        return None
    if state == RunState.QUEUED:
        return f"the engine stopped before the run started ({owner.describe()} is gone)"
    return f"the process running it stopped unexpectedly ({owner.describe()} is gone)"


def reconcile(run: RunDir, status: dict[str, Any] | None = None, *,
              here: bool = False) -> dict[str, Any]:
    """The run's status, with an active run whose owner is gone marked ``interrupted``."""
    status = status if status is not None else run.status()
    state = status.get("state")
    if state not in ACTIVE_STATES:
        return status
    reason = owner_gone(run, status, here=here)
    if reason is None:
        return status
    marked = mark_interrupted(run, reason, expect=(str(state),))
    if marked is not None:
        log.warning("run %s was %s: now interrupted (%s)", run.run_id, state, reason)
        return marked
    return run.status()
