"""Foreground ``train`` through the engine: create (or resume) a run there, then follow it.

The run directory goes to stdout first (scripts read it; its last part is the run id, which
``runs``, ``compare --run`` and ``export`` take), progress lines to stderr (the engine's log
lines of the run, like the in-process trainer printed them). With ``--json`` stdout is one
JSON object instead, the run's summary at its end. Ctrl-C asks on a
terminal whether to stop the run (it checkpoints and stops at its next step; we follow it to
the end) or to detach (it goes on in the engine). Without a terminal Ctrl-C detaches and
says how to stop it. With ``--in-process`` the engine is this process: Ctrl-C stops the run. The exit status is the run's: 0 completed, 130 stopped, 2 failed on a
user mistake (the one-line cause), 1 failed otherwise.
"""

from __future__ import annotations

import sys
from typing import Any

from adapters_lib.engine import api
from adapters_lib.errors import WorkbenchError
from adapters_lib.runs.state import TERMINAL_STATES, RunState


def _client(in_process: bool) -> Any:
    from argparse import Namespace

    from workbench.commands._generation_args import engine_client

    return engine_client(Namespace(in_process=in_process))


def precheck_mesh(client: Any, config_toml: str, overrides: list[str],
                  mesh: Any = None) -> None:
    """A mesh that does not fit the engine's devices or the batch fails before a run dir exists.

    When ``mesh`` (the config's ``MeshSpec``) cannot be laid on the engine's devices, the error
    names the engine, what this shell asks for and how to restart it (``engine_devices``)."""
    est = client.estimate(config_toml=config_toml, overrides=overrides)
    errors = [p for p in est.mesh_problems or [] if p.level == "error"]
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        err = WorkbenchError(errors[0].message + more, where=errors[0].where or "[mesh]",
                             hint=errors[0].hint or None)
        if mesh is not None:
            from workbench import engine_devices, remote

            status = client.status()
            if not engine_devices.fits(mesh, len(status.devices)):
                spec = remote.selected()
                raise engine_devices.device_mismatch(
                    err, status, remote=spec.host if spec is not None else None) from None
        raise err


def train_and_follow(config_toml: str, overrides: list[str], *, source: str, quiet: bool = False,
                     mesh: Any = None, as_json: bool = False, in_process: bool = False,
                     note: str = "") -> int:
    """``note``: a line for stderr once the run is created (``train``'s model defaults)."""
    with _client(in_process) as client:
        precheck_mesh(client, config_toml, overrides, mesh)
        run = client.create_run(config_toml=config_toml, overrides=overrides, source=source)
        _started(run, as_json, not in_process)
        if note and not quiet:
            print(note, file=sys.stderr, flush=True)
        return follow(client, run.id, quiet=quiet, as_json=as_json, detachable=not in_process)


def resume_and_follow(ref: str, *, quiet: bool = False, as_json: bool = False,
                      in_process: bool = False) -> int:
    with _client(in_process) as client:
        run = client.resume_run(ref)
        _started(run, as_json, not in_process)
        return follow(client, run.id, quiet=quiet, as_json=as_json, detachable=not in_process)


def _started(run: Any, as_json: bool, detachable: bool) -> None:
    if not as_json:
        print(run.dir, flush=True)
    keys = "Ctrl-C: stop or detach" if detachable else "Ctrl-C stops it"
    print(f"run {run.id}: following it here ({keys})", file=sys.stderr, flush=True)


def _ask(run_id: str) -> str:
    """"stop" or "detach": asked on a terminal; without one, detach."""
    if not sys.stdin or not sys.stdin.isatty():
        return "detach"
    sys.stderr.write(f"\nstop run {run_id} (it checkpoints first) or detach (it goes on)? [s/D] ")
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        return "detach"
    return "stop" if answer.strip().lower() in ("s", "stop") else "detach"


def _progress(line: Any, quiet: bool) -> str | None:
    """A ``log`` item (``api.LogLine``) worth printing, or None."""
    if not line.logger.startswith("adapters_lib"):
        return None  # the libraries' own chatter (absl, jax, orbax) stays in train.log
    if quiet and line.level in ("DEBUG", "INFO"):
        return None
    return line.message


def follow(client: Any, run_id: str, *, quiet: bool = False, as_json: bool = False,
           detachable: bool = True) -> int:
    """Print the run's progress until it ends; returns the exit status (see the module doc).
    ``detachable``: Ctrl-C may leave the run going (False for an engine in this process:
    Ctrl-C stops the run, a second one stops waiting for its checkpoint)."""
    from workbench.commands._interrupts import interrupts

    with interrupts() as ctrl_c:
        return _follow(client, run_id, ctrl_c, quiet=quiet, as_json=as_json,
                       detachable=detachable)


def _follow(client: Any, run_id: str, ctrl_c: Any, *, quiet: bool, as_json: bool,
            detachable: bool) -> int:
    since, stopping, ended, streams = 0, False, False, 0
    while not ended:
        streams += 1
        try:
            replaying = True
            for item in client.stream_run(run_id, since_step=since):
                ctrl_c.check()
                kind, data = item.type, item.data
                if kind == "metrics":
                    since = max(since, int(data.get("step", 0)))
                elif kind == "replayed":
                    replaying = False
                elif kind == "log" and not (streams > 1 and replaying):  # printed by an earlier stream
                    line = _progress(data, quiet)
                    if line:
                        print(line, file=sys.stderr, flush=True)
                elif kind == "end":
                    ended = True
                    break
            if not ended:  # the stream closed early: a final state ends it, else follow again
                ended = client.get_run(run_id, metrics=False, events=False).state in TERMINAL_STATES
        except KeyboardInterrupt:
            ctrl_c.taken()
            if not detachable and stopping:
                raise
            if detachable and (stopping or _ask(run_id) == "detach"):
                print(f"\ndetached: run {run_id} goes on in the engine; follow it with "
                      f"`gemma-workbench runs attach {run_id}`, stop it with "
                      f"`gemma-workbench runs stop {run_id}`", file=sys.stderr)
                return 0
            client.stop_run(run_id)
            stopping = True
            again = "detaches" if detachable else "stops waiting"
            print(f"stopping run {run_id}: it checkpoints at its next step (Ctrl-C again {again})",
                  file=sys.stderr, flush=True)
    run = client.get_run(run_id, metrics=True, events=False)
    if as_json:
        import json

        summary = {k: v for k, v in run.to_json().items() if k not in ("metrics", "config")}
        print(json.dumps(summary), flush=True)
    return finish(run)


def summary_line(run: api.RunDetail) -> str:
    line = f"{run.state} at step {run.step}/{run.total_steps}"
    metrics = run.metrics or []
    losses = [m["loss"] for m in metrics if isinstance(m.get("loss"), (int, float))]
    evals = [m["eval_loss"] for m in metrics if isinstance(m.get("eval_loss"), (int, float))]
    if losses:
        line += f", loss {losses[-1]:.4f}"
    if evals:
        line += f", eval loss {evals[-1]:.4f}"
    if run.exact_match_tuned is not None:
        line += f", exact-match {run.exact_match_base or 0:.1%} (base) → {run.exact_match_tuned:.1%} (tuned)"
    return line


def finish(run: api.RunDetail) -> int:
    """The run's end as this command's: a summary line on stderr and the exit status."""
    state, run_id = run.state, run.id
    error = run.error
    if state == RunState.FAILED:
        if error is not None and (error.where or error.hint):  # a user mistake: its one line, exit 2
            raise WorkbenchError(error.message or run.message or "the run failed",
                                 where=error.where, hint=error.hint)
        why = run.message or (error.message if error is not None else "") or "see its train.log"
        print(f"run {run_id} failed: {why}", file=sys.stderr)
        return 1
    print(summary_line(run), file=sys.stderr)
    if state == RunState.STOPPED:
        print(f"resume with: gemma-workbench train --resume {run_id}", file=sys.stderr)
        return 130
    return 0 if state == RunState.COMPLETED else 1
