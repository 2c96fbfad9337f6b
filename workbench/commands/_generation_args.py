"""Options shared by the computing commands (no heavy imports): decoding, engine or in-process.

Every command that computes (``sample``, ``compare``, ``export``, ``eval``, foreground
``train``) sends its command to an engine, which owns the devices: the user's engine (started
on demand), or with ``--in-process`` one inside this process (``engine_client``: the same
handlers behind the same API, for machines without an engine daemon). ``--in-process`` is
refused while an engine runs: on a TPU VM only one process may hold the devices, and on a GPU
a second one doubles the memory.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError


def add_decoding_args(p: argparse.ArgumentParser) -> None:
    """The decoding flags, made from the API's one record of them (``api.Decoding``: each
    field's ``flag``, ``help``, ``metavar`` and default), plus ``--raw``, ``--step``,
    ``--quantize`` and ``--in-process``."""
    from adapters_lib.engine.api import Decoding

    g = p.add_argument_group("decoding")
    for f in dataclasses.fields(Decoding):
        meta = f.metadata
        if "flag" not in meta:
            continue
        choices = meta.get("choices")
        g.add_argument(meta["flag"], dest=f.name, default=f.default, metavar=meta["metavar"],
                       type=str if choices else type(f.default), help=meta["help"],
                       **({"choices": choices} if choices else {}))
    g.add_argument("--raw", action="store_true",
                   help="send the prompt as raw text, without the Gemma chat template")
    g.add_argument("--step", type=step_arg, default=None, metavar="N|best",
                   help="checkpoint step of the run, or best (train.best_metric's; default: the latest)")
    add_quantize_arg(p)
    add_in_process_arg(p)


def add_quantize_arg(p: argparse.ArgumentParser) -> None:
    from adapters_lib.config import QUANTIZE_MODES

    p.add_argument("--quantize", default="", choices=QUANTIZE_MODES, metavar="Q",
                   help="hold the base model quantized: " + ", ".join(QUANTIZE_MODES)
                        + " (default: the run's [model] quantize, else none)")


def step_arg(text: str) -> int:
    """argparse type of ``--step``: a step number, or ``best`` (``evals.selection.BEST_STEP``)."""
    if text.strip().lower() == "best":
        from adapters_lib.evals.selection import BEST_STEP

        return BEST_STEP
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a step number or 'best'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give a checkpoint step or 'best'")
    return value


def add_in_process_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--in-process", action="store_true",
                   help="compute in an engine inside this process, not the engine service (for "
                        "machines without one; refused while an engine runs)")


def settings_from(args: argparse.Namespace) -> Any:
    """The decoding settings, checked here (a bad value is one line before anything starts)."""
    from adapters_lib.sample.settings import SamplingSettings

    return SamplingSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                            top_k=args.top_k, top_p=args.top_p, seed=args.seed)


def decoding_body(args: argparse.Namespace) -> dict[str, Any]:
    """The generation settings as the engine's request fields (``api.DECODING``)."""
    from adapters_lib.engine.api import DECODING

    values = {k: getattr(args, k) for k in DECODING if hasattr(args, k)}
    return {**values, "chat": not args.raw}


def quiet_engine_logs() -> None:
    for noisy in ("absl", "jax", "orbax", "tensorflow"):
        logging.getLogger(noisy).setLevel(logging.ERROR)


def refuse_beside_engine(command: str) -> None:
    """``--in-process`` while an engine runs: refused (it holds, or will hold, the devices)."""
    from workbench.client import EngineClient

    with EngineClient() as client:
        if not client.ping():
            return
        try:
            pid = client.status().pid
        except WorkbenchError:
            pid = None
    held = f" (pid {pid})" if pid else ""
    raise WorkbenchError(f"an engine is running{held} and holds the devices", where="--in-process",
                         hint=f"drop --in-process ({command} then runs in the engine), or stop the "
                              "engine first: gemma-workbench engine stop")


def engine_client(args: argparse.Namespace | None = None) -> Any:
    """The client of the engine this command uses: with ``--in-process`` an engine inside this
    process (closing the client ends it), else the user's engine (or ``--remote``'s), started
    when none runs."""
    if args is not None and getattr(args, "in_process", False):
        from workbench.in_process import InProcessClient

        quiet_engine_logs()
        return InProcessClient()
    from workbench.connect import connect

    return connect()


def _remote() -> bool:
    from workbench import remote

    return remote.selected() is not None


def run_ref(ref: str) -> str:
    """A run as the engine should see it: a local run folder as an absolute path, else the id
    (a remote engine's paths are its own: sent as typed)."""
    if _remote():
        return ref
    path = Path(ref).expanduser()
    if ("/" in ref or ref.startswith(".") or ref.startswith("~")) and (path / "config.toml").is_file():
        return str(path.absolute())
    return ref


_CATALOG_IDS = ("hf:", "kaggle:", "ollama:", "lmstudio:", "starter:")


def model_ref(value: str | None) -> str:
    """A ``--model`` for the engine: a path that exists here (a model folder, a .gguf),
    absolute, as ``local_path``; "demo", a catalog id or a name that is no path here, as typed."""
    from adapters_lib.models import starter  # light: no jax

    if not value or value.startswith(_CATALOG_IDS) or value in ("demo", *starter.ALIASES):
        return value or ""  # the names the catalog takes before any path of that name
    bare = value.removeprefix("local:")
    if not Path(bare).expanduser().exists():
        return value
    return value[: len(value) - len(bare)] + local_path(bare)


def local_path(value: str | None) -> str:
    """A path the user typed, absolute (the engine's working directory is not this one); for a
    remote engine, as typed (a path on its machine)."""
    if not value or _remote():
        return value or ""
    return str(Path(value).expanduser().absolute())
