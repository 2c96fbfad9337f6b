"""``gemma-workbench eval --model M [--run R [--step N]] --data FILE [--format F] [--json]``.

Loss, perplexity and the number of scored tokens of a model (or a run's checkpoint) on a
text or chat file. Chat files score the model turns only (``--loss-on all``: every token).
``--json`` prints one object with ``loss``, ``perplexity``, ``tokens`` (contract) and the
details (sequences, examples, dropped, format, max_length, model, run, step, seconds).
The computation is ``adapters_lib.perplexity``; it runs in the engine (started on demand;
``--in-process``: in this process, refused while an engine runs).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from adapters_lib.errors import WorkbenchError
from workbench.commands._generation_args import add_in_process_arg

FORMATS = ("auto", "text", "prompt_response", "alpaca", "chat", "qa")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="loss and perplexity of a model or a run on a data file",
                       description="Score a text or chat file: loss, perplexity, tokens. "
                                   "Chat files score the model turns only.")
    p.add_argument("--model", default="", help='"demo", a catalog id or a path (default: the '
                                               "run's base model, else demo)")
    p.add_argument("--run", default="", metavar="RUN", help="a run id (or prefix) or directory")
    p.add_argument("--step", type=int, default=None, metavar="N",
                   help="the run's checkpoint at step N (default: the latest)")
    p.add_argument("--data", required=True, metavar="FILE", help="the file (or folder) to score")
    p.add_argument("--format", default="auto", choices=FORMATS, help="data format (default: auto)")
    p.add_argument("--loss-on", default="model", choices=("model", "all"),
                   help="chat files: score the model turns (default) or every token")
    p.add_argument("--max-length", type=int, default=None, metavar="T",
                   help="tokens per sequence (default: the run's [data] max_length, else 512)")
    p.add_argument("--batch-size", type=int, default=4, metavar="B", help="rows per batch")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_in_process_arg(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise WorkbenchError(f"--batch-size is {args.batch_size}", where="--batch-size",
                             hint="use a positive number of rows")
    if args.step is not None and args.step < 0:
        raise WorkbenchError(f"--step is {args.step}", where="--step", hint="use a checkpoint step")
    if args.in_process:
        from adapters_lib import perplexity
        from workbench.commands._generation_args import quiet_engine_logs

        quiet_engine_logs()
        result = perplexity.evaluate(model=args.model, run=args.run, step=args.step, data=args.data,
                                     fmt=args.format, max_length=args.max_length,
                                     loss_on=args.loss_on, batch_size=args.batch_size)
    else:
        result = _through_engine(args)
    if args.json:
        print(json.dumps(result.to_dict() if hasattr(result, "to_dict") else result.to_json()))
        return 0
    what = f"run {result.run} step {result.step}" if result.run else result.model
    print(f"{what} on {result.data}: loss {result.loss:.4f}, perplexity {result.perplexity:.2f}, "
          f"{result.tokens} tokens scored ({result.examples} examples, {result.format}, "
          f"{result.seconds:.1f} s)")
    if result.dropped:
        print(f"  {result.dropped} records dropped; see `gemma-workbench data check {result.data}`")
    return 0


def _through_engine(args: argparse.Namespace):
    """The same computation in the engine; a reply with the ``EvalResult`` attributes."""
    from workbench.commands._generation_args import engine_client, local_path, run_ref

    model = args.model
    if model and not model.startswith(("hf:", "kaggle:", "ollama:", "lmstudio:", "starter:")) \
            and Path(model).expanduser().exists():
        model = local_path(model)  # a model folder or .gguf named relative to this directory
    with engine_client() as client:
        return client.eval(local_path(args.data), model=model,
                           run_id=run_ref(args.run) if args.run else "",
                           step=-1 if args.step is None else args.step, format=args.format,
                           loss_on=args.loss_on, max_length=args.max_length or 0,
                           batch_size=args.batch_size)
