"""``gemma-workbench eval [RUN | --run RUN [--step N|best]] [--model M] --data FILE [--input-format F] [--json]``
and ``gemma-workbench eval RUN|--run RUN --all-checkpoints [--data FILE] [--metric M,…] [--json]``.

Loss, perplexity and the number of scored tokens of a model (or a run's checkpoint) on a
text or chat file. Chat files score the model turns only (``--loss-on all``: every token).
``--json`` prints one object with ``loss``, ``perplexity``, ``tokens`` (contract) and the
details (sequences, examples, dropped, format, max_length, model, run, step, seconds).
The computation is ``adapters_lib.evals.perplexity``; it runs in the engine (started on demand;
``--in-process``: an engine inside this process, refused while an engine runs).

``--all-checkpoints`` scores the base and every checkpoint of the run into one table (task
metrics too: ``--metrics``, default the run's ``train.eval_metrics``) on ``--data`` or, by
default, the run's own eval split, and names the best (``adapters_lib.evals.checkpoints``;
in the engine too, ``POST /v1/eval/checkpoints``).
"""

from __future__ import annotations

import argparse
import json

from adapters_lib.errors import WorkbenchError
from workbench.commands._generation_args import add_in_process_arg, add_quantize_arg, step_arg
from workbench.commands._run_arg import add_run_arg
from workbench.commands._spellings import add_old_spelling

FORMATS = ("auto", "text", "prompt_response", "alpaca", "chat", "qa")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="loss and perplexity of a model or a run on a data file",
                       description="Score a text or chat file: loss, perplexity, tokens. "
                                   "Chat files score the model turns only.")
    p.add_argument("--model", default="", help='"demo", a catalog id or a path (default: the '
                                               "run's base model, else demo)")
    add_run_arg(p, default="", flag_help="the same as RUN: score the run's checkpoint (its "
                                         "adapter on its base model)")
    p.add_argument("--step", type=step_arg, default=None, metavar="N|best",
                   help="the run's checkpoint at step N, or best (default: the latest)")
    p.add_argument("--all-checkpoints", action="store_true",
                   help="score the base and every checkpoint of --run into a table")
    p.add_argument("--metric", dest="metrics", default="", metavar="M,…",
                   help="with --all-checkpoints, the metrics to score (comma-separated): loss, "
                        "perplexity, exact_match, contains, rouge_l, numeric_match (default: the "
                        "run's train.eval_metrics)")
    add_old_spelling(p, "--metrics", new="--metric", dest="metrics")
    p.add_argument("--data", default="", metavar="FILE",
                   help="the file (or folder) to score (with --all-checkpoints: default the run's "
                        "eval split)")
    p.add_argument("--input-format", dest="format", default="auto", choices=FORMATS,
                   help="the format --data is read as (default: auto, detected from the records)")
    add_old_spelling(p, "--format", new="--input-format", dest="format", choices=FORMATS)
    p.add_argument("--loss-on", default="model", choices=("model", "all"),
                   help="chat files: score the model turns (default) or every token")
    p.add_argument("--max-length", type=int, default=None, metavar="T",
                   help="tokens per sequence (default: the run's [data] max_length, else 512)")
    p.add_argument("--batch-size", type=int, default=4, metavar="B",
                   help="sequences scored together (default: 4; lower it if memory runs out)")
    p.add_argument("--json", action="store_true", help="print the scores as one JSON object")
    add_quantize_arg(p)
    add_in_process_arg(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise WorkbenchError(f"--batch-size is {args.batch_size}", where="--batch-size",
                             hint="use a positive number of rows")
    if args.all_checkpoints or args.metrics:
        return _all_checkpoints(args)
    if not args.data:
        raise WorkbenchError("--data is needed", where="--data",
                             hint="name the file to score (or use RUN --all-checkpoints for "
                                  "the run's eval split)")
    result = _through_engine(args)
    if args.json:
        print(json.dumps(result.to_json()))
        return 0
    what = f"run {result.run} step {result.step}" if result.run else result.model
    print(f"{what} on {result.data}: loss {result.loss:.4f}, perplexity {result.perplexity:.2f}, "
          f"{result.tokens} tokens scored ({result.examples} examples, {result.format}, "
          f"{result.seconds:.1f} s)")
    if result.scored:
        print(f"  scored: {result.scored}")
    if result.dropped:
        print(f"  {result.dropped} records dropped; see `gemma-workbench data check {result.data}`")
    return 0


def _through_engine(args: argparse.Namespace):
    """The computation in the engine; its ``EvalResult``."""
    from workbench.commands._generation_args import engine_client, local_path, model_ref, run_ref

    with engine_client(args) as client:  # a model path relative to this directory goes absolute
        return client.eval(local_path(args.data), model=model_ref(args.model),
                           run_id=run_ref(args.run) if args.run else "",
                           step=-1 if args.step is None else args.step, format=args.format,
                           loss_on=args.loss_on, max_length=args.max_length or 0,
                           batch_size=args.batch_size, quantize=args.quantize)


def _all_checkpoints(args: argparse.Namespace) -> int:
    import re

    if not args.all_checkpoints:
        raise WorkbenchError("--metrics scores a run's checkpoints", where="--metrics",
                             hint="add --all-checkpoints (and the run: RUN or --run RUN)")
    if not args.run:
        raise WorkbenchError("--all-checkpoints needs a run", where="--all-checkpoints",
                             hint="name the run whose checkpoints to score: eval RUN "
                                  "--all-checkpoints (or --run RUN)")
    if args.step is not None or args.model:
        flag = "--step" if args.step is not None else "--model"
        raise WorkbenchError(f"{flag} with --all-checkpoints", where=flag,
                             hint="--all-checkpoints scores every checkpoint of the run's base")
    metrics = [m for m in re.split(r"[\s,]+", args.metrics) if m]
    from workbench.commands._generation_args import engine_client, local_path, run_ref

    with engine_client(args) as client:
        table = client.eval_checkpoints(run_ref(args.run), data=local_path(args.data) if args.data else "",
                                        metrics=metrics, batch_size=args.batch_size).to_json()
    if args.json:
        print(json.dumps(table))
        return 0
    print(render_table(table))
    return 0


def render_table(table: dict) -> str:
    names = [m for m in table["metrics"]]
    head = ["", "step", "phase", *names, "tokens"]
    rows = []
    for r in table["rows"]:
        best = r["phase"] == "tuned" and r["step"] == table["best_step"]
        rows.append(["*" if best else "", str(r["step"]), r["phase"],
                     *[f"{r[m]:.4f}" if m in r else "-" for m in names], str(r.get("tokens", "-"))])
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    n = len(table["rows"]) - 1
    lines = [f"run {table['run']} on {table['data']}: {n} checkpoint{'s' if n != 1 else ''}"
             + (f", {table['examples']} examples answered" if table.get("examples") else "")]
    lines += ["  ".join(c.ljust(w) for c, w in zip(x, widths, strict=True)).rstrip()
              for x in [head, *rows]]
    best = table["best_step"]
    lines.append(f"best by {table['metric']}: step {best}" if best is not None
                 else f"best by {table['metric']}: none (no checkpoint has a value)")
    return "\n".join(lines)
