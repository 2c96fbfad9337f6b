"""Runs: the run directory (contract), its states, the registry, the owner lease, and the one
place that records a run's failure.

::

    <runs dir>/<run-id>/
        config.toml      the fully resolved RunConfig
        metrics.jsonl    one JSON object per logged step (step, loss, lr, grad_norm, ...)
        events.jsonl     {"time", "kind", ...}: state changes, checkpoints, evals, errors
        status.json      {"state", "step", "total_steps", "updated", ...}, replaced atomically
        checkpoints/     one sub-dir per step (orbax on the gemma route)
        adapter/         the exported adapter (written by the export area)
        owner.json       the lease of the process working on it, while one does

Run ids are ``YYYYmmdd-HHMMSS-<name>`` (``demo`` when the run has no name), unique in their
parent. Readers tolerate a torn last line (a writer may be mid-append). Importing this
package is cheap: no JAX.

- ``rundir``: ``RunDir`` — paths, readers, durable writers; every state change checked.
- ``state``: ``RunState``, ``TRANSITIONS`` (illegal moves are refused).
- ``registry``: ``Registry`` over every run root — ``find``, ``create``, ``delete``.
- ``rundir``: ``RunDir`` — its files, and ``checkpoints()``: the complete ones, by the rule below.
- ``checkpoints``: the one rule for a complete checkpoint, and the retention rule.
- ``lease``: the owner lease (pid, process start time, host).
- ``lifecycle``: ``record_failure``, ``mark_interrupted``, ``reconcile``, ``settle``.
"""

from __future__ import annotations

from adapters_lib.runs import checkpoints, lease, lifecycle
from adapters_lib.runs.checkpoints import complete_steps, latest_complete
from adapters_lib.runs.files import append_jsonl, iter_jsonl, read_jsonl, write_json_atomic
from adapters_lib.runs.lease import RunOwned
from adapters_lib.runs.registry import (
    AmbiguousRun,
    LinkedRun,
    NoSuchRun,
    Registry,
    create_run,
    delete_run_dir,
    find_run,
    list_runs,
    remember_root,
    remembered_roots,
    runs_root,
    select_run,
)
from adapters_lib.runs.rundir import RunDir
from adapters_lib.runs.state import (
    ACTIVE_STATES,
    RESUMABLE_STATES,
    STATES,
    TERMINAL_STATES,
    TRANSITIONS,
    IllegalTransition,
    RunState,
)

__all__ = [
    "ACTIVE_STATES", "RESUMABLE_STATES", "STATES", "TERMINAL_STATES", "TRANSITIONS",
    "AmbiguousRun", "IllegalTransition", "LinkedRun", "NoSuchRun", "Registry", "RunDir",
    "RunOwned", "RunState", "append_jsonl", "checkpoints", "complete_steps",
    "create_run", "delete_run_dir", "find_run", "iter_jsonl", "latest_complete", "lease",
    "lifecycle", "list_runs", "read_jsonl", "remember_root",
    "remembered_roots", "runs_root", "select_run", "write_json_atomic",
]
