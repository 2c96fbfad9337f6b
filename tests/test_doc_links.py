"""Every relative link of the docs names a file that exists, and every anchor a heading of it.

README.md, BENCHMARKS.md, CHANGELOG.md and docs/**/*.md: each ``[text](path)``,
``[text](path#anchor)``, ``[text](#anchor)``, image and reference-style link that is not a URL
(``http:``, ``https:``, ``mailto:``, any ``scheme:``) must resolve, from the file's folder, to a
file or folder of the checkout; an anchor into a markdown file must be one of its headings'
slugs as GitHub makes them (lowercase, punctuation other than ``-`` and ``_`` dropped, spaces to
``-``, a repeated heading ``-1``, ``-2``, …) or an explicit ``id``/``name`` of it. Links inside code
(fenced blocks, inline code spans) are not links and are not read.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [*(p for p in (REPO / "README.md", REPO / "BENCHMARKS.md", REPO / "CHANGELOG.md") if p.exists()),
        *sorted((REPO / "docs").rglob("*.md"))]

FENCE = re.compile(r"^\s{0,3}(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) or ![alt](target), target optionally <...> and/or followed by a "title"
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
EXPLICIT = re.compile(r"<a\s+[^>]*(?:name|id)=\"([^\"]+)\"", re.I)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the text outside fenced code blocks."""
    out, fenced = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m:
            if fenced is None:
                fenced = m.group(1)
            elif m.group(1) == fenced:
                fenced = None
            continue
        if fenced is None:
            out.append((n, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: the rendered text (code spans' content, links'
    text, no emphasis marks or HTML), lowercased, every character that is not a letter, digit,
    space, ``-`` or ``_`` dropped, spaces to ``-``."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"(\*+|(?<!\w)_+|_+(?!\w))", "", text)
    text = "".join(c for c in text.lower() if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors a markdown file offers: its headings' slugs (repeats numbered) and explicit ids."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        out.update(EXPLICIT.findall(line))
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link in the prose (code spans left out)."""
    out = []
    for n, line in prose_lines(text):
        line = CODE_SPAN.sub("", line)
        out += [(n, m.group(1)) for m in INLINE.finditer(line)]
        out += [(n, m.group(1)) for m in REFERENCE.finditer(line)]
    return [(n, t.strip("<>")) for n, t in out]


def broken_links(doc: Path, root: Path = REPO) -> list[str]:
    """What is wrong with ``doc``'s relative links: ``file:line: target: why``."""
    bad = []
    cache: dict[Path, set[str]] = {}
    for n, target in links(doc.read_text(encoding="utf-8")):
        if not target or SCHEME.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        dest = (doc.parent / unquote(path_part)).resolve() if path_part else doc.resolve()
        where = f"{doc.relative_to(root)}:{n}: {target}"
        if not dest.exists():
            bad.append(f"{where}: no such file")
            continue
        try:
            dest.relative_to(root.resolve())
        except ValueError:
            bad.append(f"{where}: outside the repository")
            continue
        if anchor and dest.suffix == ".md":
            if dest not in cache:
                cache[dest] = anchors(dest)
            if unquote(anchor) not in cache[dest]:
                bad.append(f"{where}: no heading with that anchor in {dest.relative_to(root.resolve())}")
    return bad


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_names_a_file_and_a_heading_that_exist(doc):
    bad = broken_links(doc)
    assert not bad, "links to a missing file or section:\n" + "\n".join(bad)


def test_the_checker_finds_a_missing_file_a_missing_section_and_accepts_the_rest(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text(
        "# Setting up: `make run` (twice!)\n\n## Notes\n\n## Notes\n\n```\n# not a heading\n```\n"
        '<a name="kept"></a>\n', encoding="utf-8")
    (tmp_path / "a.md").write_text(
        "# Top\n\nok: [b](docs/b.md), [h](docs/b.md#setting-up-make-run-twice), [n](docs/b.md#notes-1),\n"
        "[self](#top), [id](docs/b.md#kept), [web](https://example.com/x.md#y), [mail](mailto:a@b),\n"
        "![img](docs/b.md) and `[code](nowhere.md)`.\n\n"
        "bad: [gone](docs/missing.md), [section](docs/b.md#not-here), [self](#nope), [dup](docs/b.md#notes-2),\n"
        "[h](docs/b.md#not-a-heading)\n\n```sh\n[fenced](nowhere.md)\n```\n\n[ref]: docs/also-missing.md\n",
        encoding="utf-8")
    bad = broken_links(tmp_path / "a.md", root=tmp_path)
    assert [b.split(": ")[1] for b in bad] == [
        "docs/missing.md", "docs/b.md#not-here", "#nope", "docs/b.md#notes-2", "docs/b.md#not-a-heading",
        "docs/also-missing.md"], bad


@pytest.mark.parametrize(("heading", "anchor"), [
    ("Cloud TPU v5e, one chip", "cloud-tpu-v5e-one-chip"),
    ("`train.programs`: one program for every rank", "trainprograms-one-program-for-every-rank"),
    ("The TUI in one minute", "the-tui-in-one-minute"),
    ("Python 3.12 (found or fetched)", "python-312-found-or-fetched"),
    ("snake_case and **bold**", "snake_case-and-bold"),
    ("A → B — C", "a--b--c"),
])
def test_slugs_are_githubs(heading, anchor):
    assert slug(heading) == anchor
