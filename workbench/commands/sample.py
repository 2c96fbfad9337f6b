"""``gemma-workbench sample [RUN | --run RUN [--step N] | --adapter DIR [--model M]] --prompt P [--json]``.

Streams the completion to stdout as it is generated (``--json``: one object at the end).
The engine computes it (started on demand; ``--in-process``: an engine inside this process).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from adapters_lib.errors import WorkbenchError
from workbench.commands._generation_args import (
    add_decoding_args,
    decoding_body,
    engine_client,
    local_path,
    model_ref,
    run_ref,
    settings_from,
)
from workbench.commands._run_arg import add_run_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sample", help="generate from a base model, an adapter or a run's checkpoint",
                       description="Generate a completion, streamed to stdout.")
    p.add_argument("--model", default="", help='base model: "demo", a catalog id or a path (default: demo, '
                                               "or the run's / adapter's base)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--adapter", metavar="DIR", help="an exported adapter folder")
    add_run_arg(p, flag_in=src, flag_help="the same as RUN: sample the run's checkpoint")
    p.add_argument("--prompt", required=True, help="the user message (or raw text with --raw)")
    p.add_argument("--system", metavar="TEXT", help="a system message before the prompt")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    add_decoding_args(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from adapters_lib.sample.prompts import check_prompt

    check_prompt(args.prompt)
    settings = settings_from(args)
    if args.run and args.adapter:
        raise WorkbenchError("a run and --adapter: sample one of them", where="sample",
                             hint="drop RUN (--run RUN) or --adapter")
    if args.step is not None and not args.run:
        raise WorkbenchError("--step needs a run", where="--step",
                             hint="name the run whose checkpoint to use: RUN or --run RUN")
    if args.run and args.model:
        raise WorkbenchError("--model with a run: a run has its own base model", where="--model",
                             hint="drop --model")
    if args.system is not None and args.raw:
        raise WorkbenchError("--system with --raw: raw text has no chat template", where="--system")
    prompt: Any = args.prompt
    if args.system is not None:
        prompt = [{"role": "system", "content": args.system}, {"role": "user", "content": args.prompt}]
    text, step, extra = _through_engine(args, prompt, settings)
    if args.json:
        print(json.dumps({"prompt": args.prompt, "text": text, "settings": settings.to_dict(),
                          "step": step, **extra}))
    else:
        sys.stdout.write("\n")
    return 0


def _echo(args: argparse.Namespace, piece: str) -> None:
    if not args.json and piece:
        sys.stdout.write(piece)
        sys.stdout.flush()


def _through_engine(args: argparse.Namespace, prompt: Any, settings: Any) -> tuple[str, int | None, dict]:
    fields: dict[str, Any] = {"run_id": run_ref(args.run) if args.run else "",
                              "adapter": local_path(args.adapter),
                              "model": model_ref(args.model) or ("" if args.adapter else "demo"),  # an adapter's own base
                              "step": -1 if args.step is None else args.step, **decoding_body(args)}
    if isinstance(prompt, str):
        fields["prompt"] = prompt
    else:
        fields["messages"] = prompt
    done: Any = None
    with engine_client(args) as client:
        for item in client.sample(**fields):
            if item.type == "token":
                _echo(args, item.data.text)
            elif item.type == "done":
                done = item.data
            elif item.type == "error":
                raise WorkbenchError(item.data.message or "sampling failed", where=item.data.where,
                                     hint=item.data.hint)
    if done is None:
        raise WorkbenchError("the engine closed the stream before the answer was complete",
                             hint="see the engine log: gemma-workbench engine status")
    return done.text, done.step, {"stop_reason": done.stop_reason, "tokens": done.tokens,
                                  "tokens_per_s": done.tokens_per_s, "first_token_s": done.first_token_s}
