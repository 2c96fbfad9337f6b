"""``gemma-workbench export RUN [--step N|best] --format adapter|gemma|hf [--out DIR] [--force]``.

``adapter``: LoRA weights in the HF PEFT layout (adapter_model.safetensors +
adapter_config.json; a Keras run: keras-hub's adapter.lora.h5); ``gemma``: merged weights as
an orbax checkpoint for ``gm.ckpts.load_params``; ``hf``: merged weights as HF safetensors +
config.json. A non-empty ``--out`` is refused unless ``--force`` is given and it holds an
earlier export of this tool (``adapters_lib.export.target``). The engine writes it (started
on demand); ``--in-process`` writes it here.
"""

from __future__ import annotations

import argparse
import json

from workbench.commands._generation_args import (
    add_in_process_arg,
    engine_client,
    local_path,
    quiet_engine_logs,
    run_ref,
    step_arg,
)


def register(sub: argparse._SubParsersAction) -> None:
    from adapters_lib.export.formats import DESCRIPTIONS, FORMATS

    p = sub.add_parser("export", help="export a run's adapter or merged weights",
                       description="Export a run's checkpoint (default: the latest).")
    p.add_argument("run", metavar="RUN", help="a run id (or prefix) or a run directory")
    p.add_argument("--step", type=step_arg, default=None, metavar="N|best",
                   help="checkpoint step, or best (train.best_metric's; default: latest)")
    p.add_argument("--format", default="adapter", choices=FORMATS,
                   help="what to write (default: adapter). "
                        + "; ".join(f"{f}: {DESCRIPTIONS[f]}" for f in FORMATS))
    p.add_argument("--out", metavar="DIR", help="output folder (default: <run>/adapter, <run>/merged, "
                                                "<run>/merged-hf)")
    p.add_argument("--force", action="store_true",
                   help="replace --out when it holds an earlier export of gemma-workbench "
                        "(anything else is never replaced)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (the folder, format, step, files) instead of text")
    add_in_process_arg(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.in_process:
        from adapters_lib.tuned import export_run

        quiet_engine_logs()
        result = export_run(args.run, args.format, step=args.step, out=args.out, force=args.force)
    else:
        with engine_client() as client:
            reply = client.export(run_ref(args.run), format=args.format, out=local_path(args.out),
                                  step=-1 if args.step is None else args.step, force=args.force)
        result = dict(reply.result or {})
    if args.json:
        print(json.dumps(result))
    else:
        print(result["out"])
    return 0
