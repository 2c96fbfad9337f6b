"""``gemma-workbench compare --run RUN [--step N] (--prompt P | --prompts FILE) [--json]``.

Base and tuned outputs side by side, both from one batched computation, with the same seed
and decoding settings. The results are also saved to ``<run>/compare/<timestamp>.jsonl``.
``--adapter DIR`` compares an exported adapter instead of a run (nothing is saved).
"""

from __future__ import annotations

import argparse
import json
import sys

from adapters_lib.errors import WorkbenchError
from workbench.commands._generation_args import add_decoding_args, quiet_engine_logs, settings_from


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="A/B: base vs tuned for the same prompts",
                       description="Base vs tuned, same seed and settings, one batched computation.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", metavar="RUN", help="a run id (or prefix) or a run directory")
    src.add_argument("--adapter", metavar="DIR", help="an exported adapter folder")
    p.add_argument("--model", default="", help="base model for --adapter (default: the adapter's)")
    prompts = p.add_mutually_exclusive_group(required=True)
    prompts.add_argument("--prompt", help="one user message")
    prompts.add_argument("--prompts", metavar="FILE", help='.txt (one a line) or .jsonl ({"prompt": …})')
    p.add_argument("--json", action="store_true", help="print a JSON list of {prompt, base, tuned}")
    p.add_argument("--no-save", action="store_true", help="do not write <run>/compare/*.jsonl")
    add_decoding_args(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from adapters_lib import sample

    if args.prompt is not None:
        prompts = [sample.check_prompt(args.prompt)]
    else:
        prompts = sample.read_prompts(args.prompts)
    settings = settings_from(args)
    if args.step is not None and not args.run:
        raise WorkbenchError("--step needs --run", where="--step")
    quiet_engine_logs()
    tuned = sample.load_run(args.run, args.step) if args.run else sample.load_adapter_dir(args.adapter, args.model)
    results = tuned.compare(prompts, settings, chat=not args.raw)
    saved = None
    if tuned.run_path is not None and not args.no_save:
        saved = sample.save_compare(tuned.run_path, results)
    if args.json:
        print(json.dumps(results))
        return 0
    for r in results:
        print(f"prompt: {r['prompt']}")
        print(f"  base : {r['base']}")
        print(f"  tuned: {r['tuned']}")
    if saved:
        print(f"saved {saved}", file=sys.stderr)
    return 0
