"""The docs agree with the code: every example config loads, the README's synopsis is the
parser's, every command line the README and docs/ show parses, and every flag they name
exists. Nothing here trains; the configs load as `train CONFIG --print-config` does."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from workbench.cli import build_parser, main
from workbench.cli_synopsis import readme_block, synopsis

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
EXAMPLES = sorted(p.relative_to(REPO) for p in (REPO / "examples").rglob("*.toml"))
# lines about other programs, whose flags are theirs (gcloud, tensorboard, ssh, pip, bench, …)
OTHER_PROGRAMS = re.compile(r"\b(gcloud|tensorboard|ssh|pip|pytest|python|llama[\w-]*|ollama|make|vllm|tfds|tpu_device\.sh)\b")
OTHER_FLAGS = {"--xla_force_host_platform_device_count", "--data_dir"}  # XLA, tfds build


@pytest.mark.parametrize("config", EXAMPLES, ids=str)
def test_every_example_config_loads_as_print_config_does(config, capsys):
    assert main(["train", str(REPO / config), "--print-config"]) == 0, capsys.readouterr().err
    assert "[model]" in capsys.readouterr().out


def test_the_readme_synopsis_is_the_parsers():
    block = readme_block((REPO / "README.md").read_text(encoding="utf-8"))
    assert block == synopsis(), ("the README's synopsis is stale: run "
                                 "`python -m workbench.cli_synopsis --write README.md`")


def _command_lines(text: str) -> list[str]:
    """The gemma-workbench command lines of a markdown text's code blocks (continuations
    joined, comments and environment assignments dropped; synopsis forms skipped)."""
    out, in_code = [], False
    lines = iter(text.splitlines())
    for line in lines:
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if not in_code:
            continue
        while line.rstrip().endswith("\\"):
            line = line.rstrip()[:-1] + " " + next(lines, "").strip()
        line = re.sub(r"\s+#\s.*$", "", line.strip()).removeprefix("$ ")
        words = line.split()
        while words and re.match(r"^[A-Z_]+=", words[0]):
            words.pop(0)
        if not words or Path(words[0]).name != "gemma-workbench":
            continue
        rest = " ".join(words[1:])
        if any(mark in rest for mark in ("[", "|", "…", "...", "--help")):
            continue  # a synopsis form (the synopsis test checks those) or help
        out.append(re.sub(r"<[^>]+>", "x", rest))
    return out


def test_every_command_line_in_the_docs_parses():
    parser = build_parser()
    bad = []
    for doc in DOCS:
        for line in _command_lines(doc.read_text(encoding="utf-8")):
            try:
                parser.parse_args(shlex.split(line))
            except SystemExit as done:
                if done.code == 0:  # --version prints and exits 0
                    continue
                bad.append(f"{doc.name}: gemma-workbench {line}")
    assert not bad, "command lines the parser refuses:\n" + "\n".join(bad)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    names = {s for a in parser._actions for s in a.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                names |= _options(child)
    return names


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) with backslash continuations joined."""
    out: list[tuple[int, str]] = []
    pending = ""
    for n, line in enumerate(text.splitlines(), 1):
        if pending:
            line = pending + " " + line.strip()
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1]
            continue
        pending = ""
        out.append((n, line))
    return out


def test_every_flag_the_docs_name_exists():
    known = _options(build_parser()) | OTHER_FLAGS
    bad = []
    for doc in DOCS:
        for n, line in _logical_lines(doc.read_text(encoding="utf-8")):
            first = (line.strip().removeprefix("$ ").split() or [""])[0]
            if OTHER_PROGRAMS.fullmatch(first) or (OTHER_PROGRAMS.search(line)
                                                   and "gemma-workbench" not in line):
                continue  # another program's command line: its flags are its own
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*[a-z0-9]", line):
                if flag not in known:
                    bad.append(f"{doc.name}:{n}: {flag}")
    assert not bad, "flags no command has:\n" + "\n".join(bad)
