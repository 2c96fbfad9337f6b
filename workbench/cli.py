"""``gemma-workbench``: the console entry point.

With no sub-command it opens the TUI. Each sub-command lives in ``workbench/commands/<name>.py``
with ``register(subparsers)``; handlers take the parsed args and return an exit code. A
``WorkbenchError`` is printed as one line (``error: where: what; hint``), exit status 2; so is a
usage mistake argparse finds, a bad ``GEMMA_WORKBENCH_*`` variable, and an ``OSError`` (a file
where a folder belongs, no permission, a full disk: ``GEMMA_WORKBENCH_DEBUG=1`` re-raises it).

``--remote [user@]host`` (top level or after any sub-command; else ``GEMMA_WORKBENCH_REMOTE``,
else ``remote`` in settings.toml) uses the engine on that machine over ssh
(``workbench/remote``): the TUI and the engine's clients reach it through the forwarded
socket; the commands about that machine's own files run there (``remote_route``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any, NoReturn

from adapters_lib import paths
from adapters_lib.errors import WorkbenchError
from workbench import __version__

# in the order of the work, as `--help` lists them: pick a model and data, train, follow and
# judge the runs, sweep, export; then the tools around it
COMMANDS = ("models", "data", "train", "runs", "compare", "sample", "eval", "sweep", "export",
            "prepare", "engine", "web", "doctor")
TOP_OPTIONS_WITH_VALUE = ("--theme", "--remote", "--remote-command")
# commands that compute in this process (JAX, gemma): their native start-up lines are silenced
COMPUTING = ("train", "sample", "compare", "export", "doctor", "eval")
# under --remote: commands about the engine machine's own files and processes run there
REMOTE_RELAYED = ("engine", "doctor", "data", "models")


def quiet_native_logs() -> None:
    """TensorFlow/XLA write absl lines to fd 2 at import; keep the terminal clean."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    os.environ.setdefault("ABSL_MIN_LOG_LEVEL", "3")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (``error: PROG: what; see PROG --help``), exit 2.
    The top-level parser also takes the old spelling ``sweep CONFIG`` (``_spellings.sweep_config_spelling``)."""

    old_spellings = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self.old_spellings:
            from workbench.commands._spellings import sweep_config_spelling

            args = sweep_config_spelling(sys.argv[1:] if args is None else list(args),
                                         TOP_OPTIONS_WITH_VALUE)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        print(f"error: {self.prog}: {message}; see `{self.prog} --help`", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="gemma-workbench",
        description="Fine-tune Gemma with LoRA on JAX: a TUI plus a headless engine. Without a "
                    "command: the TUI.",
        epilog="A first run: `models` (pick one), `data check FILE`, `train CONFIG.toml`, then "
               "`compare RUN --prompt TEXT`. A command that takes a run names it as RUN or "
               "--run RUN. `COMMAND --help` for its options.",
    )
    parser.old_spellings = True
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
    _add_remote_options(parser, top=True)
    return parser


REMOTE_HELP = ("use the engine on HOST over ssh, started there if needed; '' = this machine "
               "(default: $GEMMA_WORKBENCH_REMOTE, else `remote` in settings.toml). Works after "
               "any sub-command too")
REMOTE_COMMAND_HELP = ("how to run gemma-workbench on HOST (default: gemma-workbench on its PATH, "
                       "then ~/.local/bin, ~/gemma-workbench/.venv/bin)")


def _add_remote_options(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """``--remote``/``--remote-command`` on ``parser`` and every sub-command below it (after a
    sub-command they only override: ``SUPPRESS`` keeps the top-level value otherwise)."""
    default = None if top else argparse.SUPPRESS
    names = {s for a in parser._actions for s in a.option_strings}
    if "--remote" not in names:
        # documented once, in the top-level help; a sub-command accepts them without listing them
        parser.add_argument("--remote", metavar="[USER@]HOST", default=default,
                            help=REMOTE_HELP if top else argparse.SUPPRESS)
        parser.add_argument("--remote-command", metavar="CMD", default=default,
                            help=REMOTE_COMMAND_HELP if top else argparse.SUPPRESS)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _add_remote_options(child)


def remote_route(args: argparse.Namespace) -> str:
    """Under ``--remote``: ``"tunnel"`` (a client of the remote engine, here), ``"relay"``
    (run the command there) or ``"here"`` (nothing remote about it)."""
    from adapters_lib.errors import WorkbenchError

    if getattr(args, "in_process", False):
        raise WorkbenchError("--in-process computes on this machine, --remote on the engine's",
                             where="--in-process", hint="drop one of the two")
    command = args.command
    if command in (None, "runs", "web", "sweep", "prepare"):  # web: each tab's TUI inherits the remote
        return "tunnel"
    if command in REMOTE_RELAYED:
        return "relay"
    if command == "train":
        if args.print_config and not args.upload:
            return "here"
        if args.detach or hasattr(args, "in_process"):
            return "tunnel"
        raise WorkbenchError("train --remote hands the run to the engine there",
                             where="train --remote",
                             hint="add --detach, then follow it with `gemma-workbench --remote "
                                  "HOST runs attach ID` (resume: `runs resume ID`)")
    # the computing commands go through the engine once they have --in-process; until
    # then they run on the remote machine itself
    return "tunnel" if hasattr(args, "in_process") else "relay"


def _strip_remote_options(argv: list[str]) -> list[str]:
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in ("--remote", "--remote-command"):
            skip = True
        elif not word.startswith(("--remote=", "--remote-command=")):
            out.append(word)
    return out


def _parser_of(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The deepest sub-command parser that ``argv`` names (``runs show``), else ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for i, word in enumerate(argv):
                if word in action.choices:
                    return _parser_of(action.choices[word], argv[i + 1:])
    return parser


def main(argv: list[str] | None = None) -> int:
    quiet_native_logs()
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    from workbench.commands._spellings import sweep_config_spelling

    argv = sweep_config_spelling(argv, TOP_OPTIONS_WITH_VALUE)  # the argv its errors name
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the sub-command that was given them: its --help lists what it takes
        _parser_of(parser, argv).error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        from workbench.commands._run_arg import merge_run

        merge_run(args)
        paths.check_environment()

        from workbench import remote

        spec = remote.resolve(args.remote, args.remote_command)
        route = remote_route(args) if spec is not None else "here"
        if route == "relay":
            from workbench.remote.relay import relay

            return relay(spec, _strip_remote_options(argv))
        if route == "tunnel":
            remote.select(spec, listener=remote.print_events if args.command else None)
            remote.export_choice(spec)  # processes started from here use the same engine
        if args.command is None:
            from workbench.app import run_app

            if spec is not None:  # connect before the TUI owns the terminal (ssh may ask)
                remote.connect(spec).close()
            return run_app(theme=args.theme)
        if route == "tunnel":
            return int(args.handler(args) or 0)
        if getattr(args, "in_process", False):  # refused beside an engine, before JAX loads here
            from workbench.commands._generation_args import refuse_beside_engine

            refuse_beside_engine(args.command)
        if (args.command in COMPUTING and not getattr(args, "detach", False)
                and getattr(args, "in_process", True)  # through the engine: no JAX here
                and not getattr(args, "print_config", False)):  # printing a config needs no JAX
            from adapters_lib.import_shields.tf_deferred import preimport_quietly

            preimport_quietly()
        return int(args.handler(args) or 0)
    except WorkbenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a folder that is a file, no permission, a full disk: the user's to fix
        if os.environ.get("GEMMA_WORKBENCH_DEBUG"):
            raise
        where = f"{err.filename}: " if err.filename else ""
        print(f"error: {where}{err.strerror or err}; check the path, its permissions and the free "
              "space (GEMMA_WORKBENCH_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
