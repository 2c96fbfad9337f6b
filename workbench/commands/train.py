"""``gemma-workbench train [CONFIG.toml] [--set key=value …] [--print-config] [--detach]``.

Without ``CONFIG`` the demo defaults are used. The engine trains the run (started on
demand); in the foreground (the default) this command prints the run directory on stdout,
then follows the run like ``runs attach`` (progress lines on stderr) until it ends. Ctrl-C
asks whether to stop the run (it checkpoints first) or detach (it goes on); without a
terminal, Ctrl-C detaches and says how to stop it. ``--detach`` prints the run id at once.
``--resume RUN`` continues a stopped, failed or interrupted run from its last checkpoint.
``--in-process`` trains in an engine inside this process (machines without an engine service;
refused while one runs), where Ctrl-C stops the run.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError
from workbench.commands._generation_args import add_in_process_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train", help="fine-tune a model (LoRA or full) from a TOML run config",
        description="Train from a run config (see docs/config.md). Without CONFIG the demo "
                    "defaults are used: a tiny Gemma model on built-in tasks, in minutes on a CPU.")
    p.add_argument("config", nargs="?", metavar="CONFIG.toml", help="the run config (default: demo)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set train.steps=20 (repeatable)")
    p.add_argument("--print-config", action="store_true",
                   help="print the fully resolved config as TOML and exit")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--foreground", action="store_true",
                      help="follow the run here until it ends (the default)")
    mode.add_argument("--detach", action="store_true",
                      help="queue the run on the engine service and return at once with its id")
    mode.add_argument("--resume", metavar="RUN",
                      help="resume a stopped/failed/interrupted run (id, id prefix or path)")
    p.add_argument("--estimate", action="store_true",
                   help="print the per-device memory estimate of the config's train step and "
                        "exit (nothing trains; [model] quantize is counted; the running engine "
                        "computes it, else this process: no engine is started)")
    p.add_argument("--device", metavar="CHIP",
                   help="with --estimate: for this accelerator instead of the engine's devices "
                        "(v5e, v6e, v4, v5p, h100, a100, l4, ...; [mesh] devices of them)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true",
                   help="stdout is one JSON object: the run's summary (id, dir, state, step, "
                        "losses) at its end, at once with --detach; with --estimate, the estimate")
    p.add_argument("--upload", metavar="DATAFILE",
                   help="with --remote: copy this local dataset into the remote engine's data "
                        "dir first and train on it (sets data.path)")
    add_in_process_arg(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from adapters_lib.config.model_defaults import REAL, load_with_model_defaults

    if getattr(args, "upload", None):
        args.overrides = [*args.overrides, _upload(args.upload)]

    if args.resume:
        if args.config or args.overrides or args.print_config:
            raise WorkbenchError("--resume takes no CONFIG, --set or --print-config",
                                 where="train --resume", hint="a run resumes with its own config")
        from workbench.commands._follow_run import resume_and_follow

        return resume_and_follow(args.resume, quiet=args.quiet, as_json=args.json,
                                 in_process=args.in_process)
    loaded = load_with_model_defaults(args.config, args.overrides)
    cfg = loaded.config
    if args.print_config:
        sys.stdout.write(with_origins(cfg.to_toml(), loaded.origins))
        return 0
    args.note = ""
    if loaded.added:  # sent with the file to a remote engine (engine_config), as --set items are
        args.overrides = [*loaded.added, *args.overrides]
        args.note = (f"{REAL.origin}s for what the config leaves out: " + ", ".join(loaded.added)
                     + " (--print-config shows every value's origin)")
    if args.device and not args.estimate:
        raise WorkbenchError("--device names the chip an estimate is for", where="train --device",
                             hint=f"add --estimate: gemma-workbench train {args.config or ''} --estimate "
                                  f"--device {args.device}".replace("  ", " "))
    if args.estimate:
        from workbench.commands._estimate import print_estimate

        return print_estimate(args, cfg, *engine_config(args, cfg))
    if args.detach:
        if args.in_process:
            raise WorkbenchError("--detach hands the run to the engine service; --in-process trains "
                                 "in this process", where="--detach", hint="drop one of the two")
        return _detach(args, cfg)
    from workbench.commands._follow_run import train_and_follow

    text, overrides = engine_config(args, cfg)
    return train_and_follow(text, overrides, source=args.config or "<demo defaults>",
                            quiet=args.quiet, mesh=cfg.mesh, as_json=args.json,
                            in_process=args.in_process, note=args.note)


def with_origins(toml: str, origins: dict[str, str]) -> str:
    """``--print-config``'s TOML with each value's origin as a comment (``# from FILE``,
    ``# --set``, ``# real-model default``, …); it still loads as the config."""
    out, section = [], ""
    for line in toml.splitlines():
        header = re.fullmatch(r"\[([A-Za-z_.]+)\]", line)
        if header:
            section = header.group(1)
        key = re.match(r"([A-Za-z_]+) = ", line)
        origin = origins.get(f"{section}.{key.group(1)}") if key else None
        out.append(f"{line}  # {origin}" if origin else line)
    return "\n".join(out) + "\n"


def _upload(path: str) -> str:
    """``--upload``: copy the dataset to the remote engine; the override pointing at it."""
    from workbench import remote
    from workbench.remote.relay import data_path_override, upload

    spec = remote.selected()
    if spec is None:
        raise WorkbenchError("--upload copies a dataset to a remote engine", where="--upload",
                             hint="add --remote HOST; on this machine use --set data.path=FILE")
    return data_path_override(upload(spec, path))


def engine_config(args: argparse.Namespace, cfg: Any) -> tuple[str, list[str]]:
    """The config TOML and overrides to send to the engine (``create_run``).

    Here: the resolved config (its paths absolute on this machine; the engine's working
    directory is not ours). With ``--remote``: the file as written and the ``--set`` items,
    since a remote config's paths are the engine machine's and it resolves them."""
    from workbench import remote

    if remote.selected() is not None:
        text = Path(args.config).read_text(encoding="utf-8") if args.config else ""
        return text, list(args.overrides)
    return cfg.to_toml(), []


def _detach(args: argparse.Namespace, cfg: Any) -> int:
    """Hand the run to the engine service (started on demand); print its id."""
    from workbench.commands._follow_run import precheck_mesh
    from workbench.commands._generation_args import engine_client

    text, overrides = engine_config(args, cfg)
    with engine_client() as client:
        precheck_mesh(client, text, overrides, cfg.mesh)
        run = client.create_run(config_toml=text, overrides=overrides,
                                source=args.config or "<demo defaults>")
    run_id = run.id
    if args.json:
        import json

        print(json.dumps(run.to_json()))
    else:
        print(run_id)
    print(f"follow with: gemma-workbench runs attach {run_id}", file=sys.stderr)
    if args.note and not args.quiet:
        print(args.note, file=sys.stderr)
    return 0
