"""``gemma-workbench runs``: list, show, stop, resume, attach to and delete training runs.

All through the engine (started on demand): ``runs [--json]``, ``runs show ID``,
``runs stop ID``, ``runs resume ID``, ``runs attach ID`` (follows the metrics here until the
run ends; Ctrl-C detaches — the run goes on), ``runs delete ID``. An id may be abbreviated
to a unique prefix or suffix.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runs", help="list and manage training runs (through the engine)",
                       description="Training runs live in the engine; they go on when the "
                                   "terminal closes. Without an action: list them.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=run_list)
    actions = p.add_subparsers(dest="runs_action", metavar="ACTION")
    for name, help_text, handler in (
        ("show", "a run's state, config, last metrics, checkpoints", run_show),
        ("stop", "stop a run at its next step (checkpointed, resumable)", run_stop),
        ("resume", "resume a stopped, failed or interrupted run from its last checkpoint",
         run_resume),
        ("attach", "follow a run's metrics here (Ctrl-C detaches; the run goes on)", run_attach),
        ("delete", "delete a run directory (not while it trains)", run_delete),
    ):
        a = actions.add_parser(name, help=help_text)
        a.add_argument("run_id", metavar="ID")
        a.add_argument("--json", action="store_true", help="print JSON")
        a.set_defaults(handler=handler)
        if name == "attach":
            a.add_argument("--since", type=int, default=0, metavar="STEP",
                           help="replay metrics after STEP (default: all)")


def _client():
    from workbench.client import connect

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
        print(json.dumps(runs))
        return 0
    if not runs:
        print("no runs yet (start one with `gemma-workbench train CONFIG.toml --detach`)")
        return 0
    width = max(len(r["id"]) for r in runs)
    print(f"{'ID':<{width}}  {'STATE':<11}  {'STEP':>11}  UPDATED")
    for r in runs:
        step = f"{r.get('step', 0)}/{r.get('total_steps', 0)}"
        print(f"{r['id']:<{width}}  {r['state']:<11}  {step:>11}  {_when(r.get('updated'))}")
    return 0


def render_run(r: dict[str, Any]) -> str:
    lines = [f"run {r['id']}: {r['state']}  step {r.get('step', 0)}/{r.get('total_steps', 0)}",
             f"  dir          {r['dir']}"]
    if r.get("message"):
        lines.append(f"  message      {r['message']}")
    cfg = r.get("config") or {}
    if cfg:
        model, lora, train = cfg.get("model", {}), cfg.get("lora", {}), cfg.get("train", {})
        lines.append(f"  model        {model.get('source')}  data {cfg.get('data', {}).get('path')}")
        lines.append(f"  lora         {'rank ' + str(lora.get('rank')) if lora.get('enabled') else 'off (full fine-tune)'}"
                     f"  lr {train.get('learning_rate')}  batch {train.get('batch_size')}")
    metrics = r.get("metrics") or []
    if metrics:
        last = metrics[-1]
        lines.append(f"  last metrics step {last.get('step')}: loss {_fmt(last.get('loss'))}  "
                     f"lr {_fmt(last.get('lr'), '.2e')}  grad_norm {_fmt(last.get('grad_norm'), '.3f')}"
                     f"  {_fmt(last.get('tokens_per_s'), '.0f')} tok/s")
        evals = [m for m in metrics if "eval_loss" in m]
        if evals:
            lines.append(f"  eval_loss    {_fmt(evals[-1]['eval_loss'])} (step {evals[-1]['step']})")
    lines.append(f"  checkpoints  {', '.join(map(str, r.get('checkpoints') or [])) or 'none'}")
    return "\n".join(lines)


def run_show(args: argparse.Namespace) -> int:
    with _client() as c:
        r = c.get_run(args.run_id)
    print(json.dumps(r) if args.json else render_run(r))
    return 0


def _action(args: argparse.Namespace, method: str, verb: str) -> int:
    with _client() as c:
        r = getattr(c, method)(args.run_id)
    if args.json:
        print(json.dumps(r))
    elif method == "delete_run":
        print(f"run {r['id']} deleted")
    else:
        print(f"run {r['id']}: {r['state']} ({verb})")
    return 0


def run_stop(args: argparse.Namespace) -> int:
    return _action(args, "stop_run", "it checkpoints and stops at its next step")


def run_resume(args: argparse.Namespace) -> int:
    return _action(args, "resume_run", "queued to continue from its last checkpoint")


def run_delete(args: argparse.Namespace) -> int:
    return _action(args, "delete_run", "deleted")


def format_item(item: dict[str, Any]) -> str | None:
    kind, data = item["type"], item["data"]
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
        return f"[state] {data.get('state')} at step {data.get('step', 0)}" + (
            f" — {data['message']}" if data.get("message") else "")
    if kind == "error":
        return f"[error] {data.get('message')}"
    return None


def run_attach(args: argparse.Namespace) -> int:
    """Follow until the run ends; Ctrl-C closes only this stream."""
    with _client() as c:
        run = c.get_run(args.run_id, metrics=False, events=False)
        print(f"attached to {run['id']} ({run['state']}); Ctrl-C detaches, the run goes on",
              file=sys.stderr)
        try:
            for item in c.stream_run(run["id"], since_step=args.since):
                if args.json:
                    print(json.dumps(item), flush=True)
                    continue
                line = format_item(item)
                if line:
                    print(line, flush=True)
                if item["type"] == "end":
                    print(f"run {run['id']} {item['data'].get('state')}", file=sys.stderr)
        except KeyboardInterrupt:
            print(f"\ndetached; the run goes on (`gemma-workbench runs attach {run['id']}`)",
                  file=sys.stderr)
    return 0
