"""``gemma-workbench runs``: list, show, stop, resume, attach to and delete training runs.

All through the engine (started on demand): ``runs [list] [--json]``, ``runs show RUN``,
``runs stop RUN``, ``runs resume RUN``, ``runs attach RUN`` (follows the metrics here until the
run ends; Ctrl-C detaches — the run goes on), ``runs delete RUN [--yes]``; each names its run
as ``RUN`` or ``--run RUN``. The engine finds the run (an exact id or a unique prefix of one).
``runs sweep`` is the old spelling of ``sweep show`` (a note says so).

``runs delete`` shows what it will delete (id, state, size, folder) and asks on a terminal;
``--yes`` deletes without asking (scripts). Without a terminal and without ``--yes`` it
refuses, before anything is looked up. It then deletes by the exact id the engine found.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from adapters_lib.engine import api
from adapters_lib.errors import WorkbenchError
from adapters_lib.jsontypes import to_jsonable
from workbench.commands._run_arg import add_run_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runs", help="list and manage training runs (through the engine)",
                       description="Training runs live in the engine; they go on when the "
                                   "terminal closes. Without an action: list them.")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of the table")
    p.set_defaults(handler=run_list)
    actions = p.add_subparsers(dest="runs_action", metavar="ACTION")
    ls = actions.add_parser("list", aliases=["ls"], help="list the runs (the same as no action)")
    ls.add_argument("--json", action="store_true", help="print a JSON list instead of the table")
    ls.set_defaults(handler=run_list)
    for name, help_text, handler in (
        ("show", "a run's state, config, last metrics, checkpoints", run_show),
        ("stop", "stop a run at its next step (checkpointed, resumable)", run_stop),
        ("resume", "resume a stopped, failed or interrupted run from its last checkpoint",
         run_resume),
        ("attach", "follow a run's metrics here (Ctrl-C detaches; the run goes on)", run_attach),
        ("delete", "delete a run directory (not while it trains)", run_delete),
    ):
        a = actions.add_parser(name, help=help_text)
        add_run_arg(a, dest="run_id", required=True)
        a.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        a.set_defaults(handler=handler)
        if name == "delete":
            a.add_argument("-y", "--yes", action="store_true",
                           help="delete without asking (for scripts; needed without a terminal)")
        if name == "attach":
            a.add_argument("--since", type=_step, default=0, metavar="STEP",
                           help="replay metrics after STEP (default: all)")
    # the old spelling of `sweep show`: accepted with a note, not listed (no help=)
    from workbench.commands.sweep import add_show_args

    add_show_args(actions.add_parser("sweep", description="The old spelling of `gemma-workbench "
                                                          "sweep show`."), old=True)


def _step(text: str) -> int:
    """argparse type: a step number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a step number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; steps count from 0")
    return value


def _client():
    from workbench.connect import connect

    return connect()


def _fmt(value: Any, spec: str = ".4f") -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, spec)
    return "-" if value is None else str(value)


def _when(t: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if isinstance(t, (int, float)) else "-"


def run_list(args: argparse.Namespace) -> int:
    with _client() as c:
        runs = c.list_runs()
    if args.json:
        print(json.dumps(to_jsonable(runs)))
        return 0
    if not runs:
        print("no runs yet (start one with `gemma-workbench train CONFIG.toml --detach`)")
        return 0
    width = max(len(r.id) for r in runs)
    print(f"{'ID':<{width}}  {'STATE':<11}  {'STEP':>11}  UPDATED")
    for r in runs:
        step = f"{r.step}/{r.total_steps}"
        print(f"{r.id:<{width}}  {r.state:<11}  {step:>11}  {_when(r.updated)}")
    return 0


def render_run(r: api.RunDetail) -> str:
    lines = [f"run {r.id}: {r.state}  step {r.step}/{r.total_steps}", f"  dir          {r.dir}"]
    if r.message:
        lines.append(f"  message      {r.message}")
    cfg = r.config or {}
    if cfg:
        model, lora, train = cfg.get("model", {}), cfg.get("lora", {}), cfg.get("train", {})
        lines.append(f"  model        {model.get('source')}  data {cfg.get('data', {}).get('path')}")
        lines.append(f"  lora         {'rank ' + str(lora.get('rank')) if lora.get('enabled') else 'off (full fine-tune)'}"
                     f"  lr {train.get('learning_rate')}  batch {train.get('batch_size')}")
    metrics = r.metrics or []
    if metrics:
        last = metrics[-1]
        lines.append(f"  last metrics step {last.get('step')}: loss {_fmt(last.get('loss'))}  "
                     f"lr {_fmt(last.get('lr'), '.2e')}  grad_norm {_fmt(last.get('grad_norm'), '.3f')}"
                     f"  {_fmt(last.get('tokens_per_s'), '.0f')} tok/s")
        evals = [m for m in metrics if "eval_loss" in m]
        if evals:
            lines.append(f"  eval_loss    {_fmt(evals[-1]['eval_loss'])} (step {evals[-1]['step']})")
    if r.best_metric and r.best_step is not None:  # the evals' BestHook
        lines.append(f"  best         {r.best_metric} {_fmt(r.best_value)} at step "
                     f"{r.best_step} (--step best)")
    facts = [f"{r.trainable_params:,} trainable params" if r.trainable_params else "",
             f"peak memory {r.peak_bytes / 2**30:.2f} GiB" if r.peak_bytes else "",
             f"wall {r.wall_s:.0f} s" if r.wall_s is not None else ""]
    if any(facts):
        lines.append(f"  facts        {'  '.join(f for f in facts if f)}")
    lines.append(f"  checkpoints  {', '.join(map(str, r.checkpoints)) or 'none'}")
    return "\n".join(lines)


def run_show(args: argparse.Namespace) -> int:
    with _client() as c:
        r = c.get_run(args.run_id)
    print(json.dumps(to_jsonable(r)) if args.json else render_run(r))
    return 0


def _action(args: argparse.Namespace, method: str, verb: str) -> int:
    with _client() as c:
        r = getattr(c, method)(args.run_id)
    if args.json:
        print(json.dumps(to_jsonable(r)))
    else:
        print(f"run {r.id}: {r.state} ({verb})")
    return 0


def run_stop(args: argparse.Namespace) -> int:
    return _action(args, "stop_run", "it checkpoints and stops at its next step")


def run_resume(args: argparse.Namespace) -> int:
    return _action(args, "resume_run", "queued to continue from its last checkpoint")


def folder_size(folder: str | Path) -> tuple[int, int] | None:
    """(bytes, files) under ``folder``, symlinks counted as links, never followed;
    None when the folder is not on this machine (a remote engine's run)."""
    root = Path(folder)
    if not root.is_dir() or root.is_symlink():
        return None
    total = files = 0
    for here, _dirs, names in os.walk(root, followlinks=False):
        for name in names:
            try:
                total += os.lstat(os.path.join(here, name)).st_size
                files += 1
            except OSError:
                continue
    return total, files


def _size_text(size: tuple[int, int] | None) -> str:
    if size is None:
        return "size unknown (not on this machine)"
    n, files = size
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            amount = f"{n:.0f}" if unit == "bytes" else f"{n:.1f}"
            return f"{amount} {unit} in {files} file{'s' if files != 1 else ''}"
        n /= 1000
    raise AssertionError("unreachable")


def _confirm(question: str) -> bool:
    """Ask on the terminal (the question on stderr: stdout stays for --json)."""
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer:  # end of input
        sys.stderr.write("\n")
    return answer.strip().lower() in ("y", "yes")


def run_delete(args: argparse.Namespace) -> int:
    if not args.yes and not sys.stdin.isatty():
        raise WorkbenchError(f"not deleting run {args.run_id!r} without asking, and there is no "
                             "terminal to ask on", where="runs delete",
                             hint=f"add --yes to delete it from a script: "
                                  f"gemma-workbench runs delete {args.run_id} --yes")
    with _client() as c:
        r = c.get_run(args.run_id, metrics=False, events=False)
        checkpoints = len(r.checkpoints)
        what = (f"run {r.id}  {r.state}  step {r.step}/{r.total_steps}  "
                f"{checkpoints} checkpoint{'s' if checkpoints != 1 else ''}  "
                f"{_size_text(folder_size(r.dir))}\n  {r.dir}")
        if not args.yes:
            print(what, file=sys.stderr)
            if not _confirm("delete it?"):
                print("not deleted", file=sys.stderr)
                return 1
        result = c.delete_run(r.id)  # the exact id found above, never the text typed
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        if args.yes:
            print(what, file=sys.stderr)
        print(f"run {result.id} deleted")
    return 0


def format_item(item: api.StreamItem) -> str | None:
    """One run-stream item (``api.RUN_STREAM_ITEMS``) as a line, or None (not shown)."""
    kind, data = item.type, item.data
    if kind == "metrics":
        text = (f"step {data.get('step')}  loss {_fmt(data.get('loss'))}  "
                f"lr {_fmt(data.get('lr'), '.2e')}  grad_norm {_fmt(data.get('grad_norm'), '.3f')}  "
                f"{_fmt(data.get('tokens_per_s'), '.0f')} tok/s")
        if "eval_loss" in data:
            text += f"  eval_loss {_fmt(data['eval_loss'])}"
        return text
    if kind == "event" and data.get("kind") not in ("state",):
        extra = {k: v for k, v in data.items() if k not in ("time", "kind")}
        return f"[{data.get('kind')}] " + " ".join(f"{k}={v}" for k, v in extra.items())
    if kind == "status":
        return f"[state] {data.state} at step {data.step}" + (f" — {data.message}" if data.message else "")
    if kind == "error":
        return f"[error] {data.message}"
    return None


def run_attach(args: argparse.Namespace) -> int:
    """Follow until the run ends; Ctrl-C closes only this stream."""
    from workbench.commands._interrupts import interrupts

    with _client() as c:
        run = c.get_run(args.run_id, metrics=False, events=False)
        print(f"attached to {run.id} ({run.state}); Ctrl-C detaches, the run goes on",
              file=sys.stderr)
        try:
            with interrupts() as ctrl_c:
                for item in c.stream_run(run.id, since_step=args.since):
                    ctrl_c.check()
                    if args.json:
                        print(json.dumps(to_jsonable(item)), flush=True)
                        continue
                    line = format_item(item)
                    if line:
                        print(line, flush=True)
                    if item.type == "end":
                        print(f"run {run.id} {item.data.state}", file=sys.stderr)
        except KeyboardInterrupt:
            print(f"\ndetached; the run goes on (`gemma-workbench runs attach {run.id}`)",
                  file=sys.stderr)
    return 0
