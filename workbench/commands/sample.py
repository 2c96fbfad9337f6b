"""``gemma-workbench sample --model M [--adapter DIR | --run RUN [--step N]] --prompt P [--json]``.

Streams the completion to stdout as it is generated (``--json``: one object at the end).
The model runs in this process; heavy imports happen in the handler only.
"""

from __future__ import annotations

import argparse
import json
import sys

from adapters_lib.errors import WorkbenchError
from workbench.commands._generation_args import add_decoding_args, quiet_engine_logs, settings_from


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sample", help="generate from a base model, an adapter or a run's checkpoint",
                       description="Generate a completion, streamed to stdout.")
    p.add_argument("--model", default="", help='base model: "demo", a catalog id or a path (default: demo, '
                                               "or the run's / adapter's base)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--adapter", metavar="DIR", help="an exported adapter folder")
    src.add_argument("--run", metavar="RUN", help="a run id (or prefix) or a run directory")
    p.add_argument("--prompt", required=True, help="the user message (or raw text with --raw)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    add_decoding_args(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from adapters_lib import sample

    sample.check_prompt(args.prompt)
    settings = settings_from(args)
    if args.step is not None and not args.run:
        raise WorkbenchError("--step needs --run", where="--step", hint="name the run whose checkpoint to use")
    quiet_engine_logs()
    if args.run:
        if args.model:
            raise WorkbenchError("--model with --run: a run has its own base model", where="--model",
                                 hint="drop --model")
        tuned = sample.load_run(args.run, args.step)
        pieces = tuned.sample(args.prompt, settings, chat=not args.raw)
    elif args.adapter:
        tuned = sample.load_adapter_dir(args.adapter, args.model)
        pieces = tuned.sample(args.prompt, settings, chat=not args.raw)
    else:
        from adapters_lib.config import ModelSpec
        from adapters_lib.models.loader import load_model

        loaded = load_model(ModelSpec(source=args.model or "demo"))
        tuned = None
        pieces = sample.Sampler.from_loaded(loaded).stream(args.prompt, None, settings, chat=not args.raw)
    text = []
    for piece in pieces:
        text.append(piece)
        if not args.json:
            sys.stdout.write(piece)
            sys.stdout.flush()
    if args.json:
        out = {"prompt": args.prompt, "text": "".join(text), "settings": settings.to_dict(),
               "step": tuned.step if tuned else None}
        print(json.dumps(out))
    else:
        sys.stdout.write("\n")
    return 0
