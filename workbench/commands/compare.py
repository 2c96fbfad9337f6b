"""``gemma-workbench compare (RUN | --run RUN [--step N] | --adapter DIR) (--prompt P ... | --prompts FILE) [--json]``.

Base and tuned outputs side by side, with the same seed and decoding settings (one batched
computation for a LoRA run). ``--prompt`` may be given several times (every one is
answered). ``--prompts FILE``: ``.txt`` (one prompt a line), or ``.jsonl`` lines of
``{"prompt": ...}`` or ``{"messages": [...]}`` — a conversation, whose user turns are
replayed one by one while each side keeps its own history (assistant turns in the file are
references, never fed to the models). The results are saved to
``<run>/compare/<timestamp>.jsonl``. ``--adapter DIR`` compares an exported adapter instead
of a run (nothing is saved). The engine computes (started on demand; ``--in-process``: an
engine inside this process).
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
    p = sub.add_parser("compare", help="A/B: base vs tuned for the same prompts or conversations",
                       description="Base vs tuned, same seed and settings, one batched computation.")
    src = p.add_mutually_exclusive_group()
    add_run_arg(p, flag_in=src, flag_help="the same as RUN: the run whose tuned model to compare")
    src.add_argument("--adapter", metavar="DIR", help="an exported adapter folder (instead of a run)")
    p.add_argument("--model", default="", help="base model for --adapter (default: the adapter's)")
    prompts = p.add_mutually_exclusive_group(required=True)
    prompts.add_argument("--prompt", action="append", help="a user message (repeat for more prompts)")
    prompts.add_argument("--prompts", metavar="FILE",
                         help='.txt (one a line) or .jsonl ({"prompt": …} or {"messages": […]})')
    p.add_argument("--system", metavar="TEXT", help="a system message for every prompt and conversation "
                                                    "that has none")
    p.add_argument("--json", action="store_true", help="print a JSON list of results")
    p.add_argument("--no-save", action="store_true", help="do not write <run>/compare/*.jsonl")
    add_decoding_args(p)
    p.set_defaults(handler=run)


def _conversations(args: argparse.Namespace) -> list[Any]:
    from adapters_lib.sample.compare_sets import read_prompts
    from adapters_lib.sample.conversation import Conversation

    if args.prompt is not None:
        convs = [Conversation.from_prompt(p, where="--prompt") for p in args.prompt]
    else:
        convs = read_prompts(args.prompts)
    if args.system is not None:
        if args.raw:
            raise WorkbenchError("--system with --raw: raw text has no chat template", where="--system")
        for c in convs:
            if c.system is None:
                c.system = args.system
    if args.raw and any(c.prompt is None for c in convs):
        raise WorkbenchError("--raw compares plain prompts only: a conversation needs the chat template",
                             where="--raw", hint="drop --raw")
    return convs


def run(args: argparse.Namespace) -> int:
    if bool(args.run) == bool(args.adapter):
        raise WorkbenchError("a run and --adapter" if args.run else "nothing to compare",
                             where="compare", hint="name a run (RUN or --run RUN) or an exported "
                                                   "adapter (--adapter DIR), one of the two")
    convs = _conversations(args)
    settings = settings_from(args)
    if args.step is not None and not args.run:
        raise WorkbenchError("--step needs a run", where="--step",
                             hint="name the run whose checkpoint to use: RUN or --run RUN")
    records, saved = _through_engine(args, convs, settings)
    if args.json:
        print(json.dumps(records))
    else:
        _print(records)
    if saved:
        print(f"saved {saved}", file=sys.stderr)
    return 0


def _print(records: list[dict[str, Any]]) -> None:
    for n, r in enumerate(records, 1):
        if "prompt" in r:
            print(f"prompt: {r['prompt']}")
            print(f"  base : {r['base']}")
            print(f"  tuned: {r['tuned']}")
            continue
        print(f"conversation {n}:")
        users = [m["content"] for m in r["messages"] if m.get("role") == "user"]
        for i, user in enumerate(users):
            print(f"  user : {user}")
            print(f"  base : {r['base'][i]}")
            print(f"  tuned: {r['tuned'][i]}")
            if r["references"][i] is not None:
                print(f"  ref  : {r['references'][i]}")


def _through_engine(args: argparse.Namespace, convs: list[Any], settings: Any) -> tuple[list[dict], Any]:
    entries: list[dict[str, Any]] = []
    for c in convs:
        entry: dict[str, Any] = {"prompt": c.prompt} if c.prompt is not None else {"messages": c.messages}
        if c.system is not None and not (c.messages and c.messages[0].get("role") == "system"):
            entry["system"] = c.system
        entries.append(entry)
    done: Any = None
    with engine_client(args) as client:
        for item in client.compare_set(entries, run_id=run_ref(args.run) if args.run else "",
                                       adapter=local_path(args.adapter), model=model_ref(args.model),
                                       step=-1 if args.step is None else args.step,
                                       save=not args.no_save, **decoding_body(args)):
            if item.type == "done":
                done = item.data
            elif item.type == "error":
                raise WorkbenchError(item.data.message or "compare failed", where=item.data.where,
                                     hint=item.data.hint)
    if done is None:
        raise WorkbenchError("the engine closed the stream before the comparison was complete",
                             hint="see the engine log: gemma-workbench engine status")
    return list(done.results), done.saved
