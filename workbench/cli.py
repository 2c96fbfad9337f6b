"""``gemma-workbench``: the console entry point.

With no sub-command it opens the TUI. Each sub-command lives in ``workbench/commands/<name>.py``
with ``register(subparsers)``; handlers take the parsed args and return an exit code. A
``WorkbenchError`` is printed as one line (``error: where: what; hint``), exit status 2; so is a
usage mistake argparse finds, and a bad ``GEMMA_WORKBENCH_*`` variable.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn

from adapters_lib import paths
from adapters_lib.errors import WorkbenchError
from workbench import __version__

COMMANDS = ("doctor", "train", "data", "models", "sample", "compare", "export", "engine", "runs",
            "web")
# commands that compute in this process (JAX, gemma): their native start-up lines are silenced
COMPUTING = ("train", "sample", "compare", "export", "doctor")


def quiet_native_logs() -> None:
    """TensorFlow/XLA write absl lines to fd 2 at import; keep the terminal clean."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    os.environ.setdefault("ABSL_MIN_LOG_LEVEL", "3")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (``error: PROG: what; see PROG --help``), exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {self.prog}: {message}; see `{self.prog} --help`", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="gemma-workbench",
        description="Fine-tune Gemma with LoRA on JAX: a TUI plus a headless engine.",
    )
    parser.add_argument("--version", action="version", version=f"gemma-workbench {__version__}")
    parser.add_argument("--theme", help="TUI theme (e.g. workbench-dark, workbench-light)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"workbench.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"workbench.commands.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    quiet_native_logs()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        paths.check_environment()
        if args.command is None:
            from workbench.app import run_app

            return run_app(theme=args.theme)
        if args.command in COMPUTING and not getattr(args, "detach", False):
            from adapters_lib.native_logs import preimport_quietly

            preimport_quietly()
        return int(args.handler(args) or 0)
    except WorkbenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
