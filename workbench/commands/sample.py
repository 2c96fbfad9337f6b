"""``gemma-workbench sample --model M [--adapter DIR | --run RUN [--step N]] --prompt P [--json]``.

Streams the completion to stdout as it is generated (``--json``: one object at the end).
The engine computes it (started on demand); ``--in-process`` computes it here, for machines
without an engine. Heavy imports happen in the in-process handler only.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from adapters_lib.errors import WorkbenchError
from workbench.commands._generation_args import (
    add_decoding_args,
    engine_client,
    local_path,
    model_ref,
    quiet_engine_logs,
    run_ref,
    settings_body,
    settings_from,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sample", help="generate from a base model, an adapter or a run's checkpoint",
                       description="Generate a completion, streamed to stdout.")
    p.add_argument("--model", default="", help='base model: "demo", a catalog id or a path (default: demo, '
                                               "or the run's / adapter's base)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--adapter", metavar="DIR", help="an exported adapter folder")
    src.add_argument("--run", metavar="RUN", help="a run id (or prefix) or a run directory")
    p.add_argument("--prompt", required=True, help="the user message (or raw text with --raw)")
    p.add_argument("--system", metavar="TEXT", help="a system message before the prompt")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    add_decoding_args(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from adapters_lib.sample.prompts import check_prompt

    check_prompt(args.prompt)
    settings = settings_from(args)
    if args.step is not None and not args.run:
        raise WorkbenchError("--step needs --run", where="--step", hint="name the run whose checkpoint to use")
    if args.run and args.model:
        raise WorkbenchError("--model with --run: a run has its own base model", where="--model",
                             hint="drop --model")
    if args.system is not None and args.raw:
        raise WorkbenchError("--system with --raw: raw text has no chat template", where="--system")
    prompt: Any = args.prompt
    if args.system is not None:
        prompt = [{"role": "system", "content": args.system}, {"role": "user", "content": args.prompt}]
    if args.in_process:
        text, step, extra = _in_process(args, prompt, settings)
    else:
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


def _in_process(args: argparse.Namespace, prompt: Any, settings: Any) -> tuple[str, int | None, dict]:
    from adapters_lib import tuned as tuned_lib

    quiet_engine_logs()
    if args.run:
        model = tuned_lib.load_run_model(args.run, args.step, quantize=args.quantize)
    elif args.adapter:
        model = tuned_lib.load_adapter_model(args.adapter, args.model, quantize=args.quantize)
    else:
        model = tuned_lib.load_base_model(args.model or "demo", quantize=args.quantize)
    side = "tuned" if model.has_tuned else "base"
    answer = model.generate({side: [prompt]}, settings, chat=not args.raw,
                            on_piece=lambda piece: _echo(args, piece.text))[side][0]
    return answer.text, model.step, {"stop_reason": answer.stop_reason, "tokens": answer.tokens,
                                     "tokens_per_s": answer.tokens_per_s,
                                     "first_token_s": round(answer.first_token_s, 3)}


def _through_engine(args: argparse.Namespace, prompt: Any, settings: Any) -> tuple[str, int | None, dict]:
    fields: dict[str, Any] = {"run_id": run_ref(args.run) if args.run else "",
                              "adapter": local_path(args.adapter),
                              "model": model_ref(args.model) or ("" if args.adapter else "demo"),  # an adapter's own base
                              "step": -1 if args.step is None else args.step, "chat": not args.raw,
                              "quantize": args.quantize,
                              **settings_body(settings)}
    if isinstance(prompt, str):
        fields["prompt"] = prompt
    else:
        fields["messages"] = prompt
    done: Any = None
    with engine_client() as client:
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
