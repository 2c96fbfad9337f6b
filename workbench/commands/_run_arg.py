"""One way to name a run on every command that takes one: ``RUN`` or ``--run RUN``.

``add_run_arg`` gives a parser both (the positional is optional, so either spelling works);
``merge_run`` (called by ``cli.main`` before the handler) puts the one given in ``dest``,
refuses two different ones, and a missing one where the command needs it, in one line each.
"""

from __future__ import annotations

import argparse

from adapters_lib.errors import WorkbenchError

RUN_HELP = ("RUN or --run RUN: a run id (the run folder's name, printed by train), a unique "
            "prefix of one, or a run directory")
_POSITIONAL = "run_positional"


def add_run_arg(p: argparse.ArgumentParser, *, dest: str = "run", default: str | None = None,
                required: bool = False, flag_in: argparse._ActionsContainer | None = None,
                flag_help: str = "the same as RUN") -> None:
    """``RUN`` and ``--run RUN`` on ``p`` (``--run`` in ``flag_in``, e.g. a mutually exclusive
    group); ``required``: the command needs a run (``merge_run`` says so when none is given)."""
    p.add_argument(_POSITIONAL, nargs="?", default=None, metavar="RUN", help=RUN_HELP)
    (flag_in or p).add_argument("--run", dest=dest, metavar="RUN", default=default, help=flag_help)
    p.set_defaults(run_dest=dest, run_required=required, run_default=default,
                   run_command=p.prog.removeprefix("gemma-workbench "))


def merge_run(args: argparse.Namespace) -> None:
    """The run of ``args`` in its ``dest`` (see the module doc); nothing when the command
    takes no run."""
    dest = getattr(args, "run_dest", None)
    if dest is None:
        return
    command = args.run_command
    positional = getattr(args, _POSITIONAL, None)
    flag = getattr(args, dest, None)
    if positional is not None and flag not in (None, args.run_default) and flag != positional:
        raise WorkbenchError(f"two runs given: {positional} and --run {flag}", where=command,
                             hint="give one, as RUN or as --run RUN")
    if positional is not None:
        setattr(args, dest, positional)
    if args.run_required and not getattr(args, dest, None):
        raise WorkbenchError("no run given", where=command,
                             hint=f"gemma-workbench {command} RUN (or --run RUN): a run id, a "
                                  "prefix of one or a run folder; `gemma-workbench runs` lists them")
