"""``gemma-workbench export (RUN | --run RUN) [--step N|best] --format adapter|gemma|hf|gguf|gguf-lora
[--quant Q] [--out DIR] [--force]``.

``adapter``: LoRA weights in the HF PEFT layout (adapter_model.safetensors +
adapter_config.json; a Keras run: keras-hub's adapter.lora.h5); ``gemma``: merged weights as
an orbax checkpoint for ``gm.ckpts.load_params``; ``hf``: merged weights as HF safetensors +
config.json; ``gguf``: merged weights as one GGUF (``--quant f32|bf16|f16|q8_0|…|base``) +
an Ollama ``Modelfile``; ``gguf-lora``: the adapter as llama.cpp's LoRA GGUF + a
``Modelfile``. A GGUF export prints its files and the ``ollama create`` line. A non-empty
``--out`` is refused unless ``--force`` is given and it holds an earlier export of this tool (``adapters_lib.export.target``). The engine writes it (started
on demand; ``--in-process``: an engine inside this process).
"""

from __future__ import annotations

import argparse
import json

from workbench.commands._generation_args import (
    add_in_process_arg,
    engine_client,
    local_path,
    run_ref,
    step_arg,
)
from workbench.commands._run_arg import add_run_arg


def register(sub: argparse._SubParsersAction) -> None:
    from adapters_lib.export.formats import DESCRIPTIONS, FORMATS, GGUF_QUANTS, LORA_QUANTS

    p = sub.add_parser("export", help="export a run's adapter or merged weights",
                       description="Export a run's checkpoint (default: the latest).")
    add_run_arg(p, required=True)
    p.add_argument("--step", type=step_arg, default=None, metavar="N|best",
                   help="checkpoint step, or best (train.best_metric's; default: latest)")
    p.add_argument("--format", default="adapter", choices=FORMATS,
                   help="the output's format: what to write (default: adapter). "
                        + "; ".join(f"{f}: {DESCRIPTIONS[f]}" for f in FORMATS))
    p.add_argument("--quant", default="", metavar="Q",
                   help=f"GGUF type: gguf {'|'.join(GGUF_QUANTS)} (default q8_0; base: the base "
                        f"GGUF's tensors kept where untouched); gguf-lora {'|'.join(LORA_QUANTS)} "
                        "(default f32)")
    p.add_argument("--out", metavar="DIR", help="output folder (default: <run>/adapter, <run>/merged, "
                                                "<run>/merged-hf, <run>/gguf, <run>/gguf-lora)")
    p.add_argument("--force", action="store_true",
                   help="replace --out when it holds an earlier export of gemma-workbench "
                        "(anything else is never replaced)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (the folder, format, step, files) instead of text")
    add_in_process_arg(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from adapters_lib.export.formats import check_quant

    check_quant(args.format, args.quant)  # before an engine is started
    with engine_client(args) as client:
        reply = client.export(run_ref(args.run), format=args.format, out=local_path(args.out),
                              step=-1 if args.step is None else args.step, force=args.force,
                              quant=args.quant)
    result = dict(reply.result or {})
    if args.json:
        print(json.dumps(result))
    else:
        print(result["out"])
        for line in gguf_lines(result):
            print(line)
    return 0


def gguf_lines(result: dict) -> list[str]:
    """A GGUF export's files (size, tensor types), its Modelfile and the ``ollama create`` line."""
    if "ollama_create" not in result:
        return []
    lines = []
    for f in result.get("files", []):
        types = ", ".join(f"{k} ×{v}" for k, v in (f.get("tensor_types") or {}).items())
        lines.append(f"  {f['file']}  ({f.get('bytes', 0) / 1e6:.1f} MB; {types})")
    lines.append(f"  {result['modelfile']}")
    lines.append(f"Ollama: {result['ollama_create']}")
    return lines
