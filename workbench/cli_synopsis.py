"""The command synopsis, generated from the parser (the README's "Command line" block).

``python -m workbench.cli_synopsis`` prints it; ``--write README.md`` replaces the block
between the ``<!-- synopsis -->`` and ``<!-- /synopsis -->`` markers. tests/test_docs.py
fails when the README's block and the parser disagree, so the two cannot drift.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

BEGIN, END = "<!-- synopsis -->", "<!-- /synopsis -->"
WIDTH = 100


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The listed sub-commands: one entry per command (an alias, `runs ls`, is its command's),
    none for an old spelling kept without help (`runs sweep`)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {shown.dest: action.choices[shown.dest] for shown in action._choices_actions}
    return {}


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=10_000)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    text = re.sub(r" \[-h\]", "", " ".join(formatter.format_help().split()))
    if "run_dest" in parser._defaults:  # a run named as RUN or --run RUN: one form, in place
        text = text.replace(" [RUN]", "")
        if "--run RUN |" in text or "| --run RUN" in text:
            text = text.replace("--run RUN", "RUN | --run RUN")
        else:
            required = parser._defaults.get("run_required")
            text = text.replace("[--run RUN]", "(RUN | --run RUN)" if required else "[RUN | --run RUN]")
    return text


def _lines(parser: argparse.ArgumentParser) -> list[str]:
    children = _subparsers(parser)
    if not children:
        return [_usage(parser)]
    group = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    # a group command (runs, models): its own line when it does something without an action
    lines = [] if group.required else [
        _usage(parser).split(" {")[0].replace(" ACTION ...", "").replace(" SUBCOMMAND ...", "")]
    for child in children.values():
        lines.extend(_lines(child))
    return lines


def synopsis() -> str:
    from workbench.cli import build_parser

    parser = build_parser()
    lines = ["gemma-workbench                # the TUI", "gemma-workbench --version",
             "gemma-workbench --remote [USER@]HOST [COMMAND …]   # any command, on HOST's engine"]
    for child in _subparsers(parser).values():
        lines.extend(_lines(child))
    return "\n".join(lines) + "\n"


def readme_block(text: str) -> str:
    """The synopsis block of a README (between the markers, without the code fence)."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip().removeprefix("```sh").removesuffix("```").strip() + "\n"


def write(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    path.write_text(text[:start] + "\n```sh\n" + synopsis() + "```\n" + text[end:], encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        write(Path(sys.argv[2]))
    else:
        sys.stdout.write(synopsis())
