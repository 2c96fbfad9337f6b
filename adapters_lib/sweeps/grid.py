"""A sweep's grid: ``--grid key=v1,v2`` items and ``[sweep] grid`` → points → run overrides.

A point is one value for each grid key (``{"lora.rank": 8, "train.learning_rate": 3e-4}``);
the points are the grid's cartesian product, the first key varying slowest (as written).
Each point becomes one run, queued with the sweep's config plus ``--set`` overrides: the
point's values, ``sweep.id``, ``sweep.point`` and a ``run.name`` of its own
(``<name>-p<N>``). Every run gets its own directory from the run registry (made with an
exclusive ``mkdir``, never reused), so no two points ever share an output directory.

Pure Python; no engine, no JAX.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import secrets
import time
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from adapters_lib.config.sweep import grid_items
from adapters_lib.errors import WorkbenchError

MAX_POINTS = 256
"""More points than this is a typo (each point is a whole training run)."""


@dataclass(frozen=True)
class Point:
    index: int
    """1-based, in grid order."""
    values: dict[str, Any]

    def label(self) -> str:
        return " ".join(f"{k}={format_value(v)}" for k, v in self.values.items())


def split_values(text: str) -> list[str]:
    """``"4,8,16"`` → ["4", "8", "16"]; commas inside brackets or quotes do not split."""
    parts, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
            cur.append(ch)
        elif ch in "[{":
            depth += 1
            cur.append(ch)
        elif ch in "]}":
            depth -= 1
            cur.append(ch)
        elif ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur).strip())
    return parts


def parse_value(text: str) -> Any:
    """A TOML value; a bare word is a string (as ``--set`` reads values)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_grid_arg(item: str) -> tuple[str, list[Any]]:
    """``"lora.rank=4,8,16"`` → ("lora.rank", [4, 8, 16])."""
    if "=" not in item:
        raise WorkbenchError(f"--grid {item!r} has no '='", where="--grid",
                             hint="write --grid section.key=v1,v2 (e.g. --grid lora.rank=4,8,16)")
    key, _, text = item.partition("=")
    key = key.strip()
    if key.count(".") != 1 or not all(key.split(".")):
        raise WorkbenchError(f"--grid {key!r} is not section.key", where="--grid",
                             hint="e.g. --grid lora.rank=4,8,16 or --grid train.learning_rate=1e-4,3e-4")
    values = [parse_value(v) for v in split_values(text)]
    if any(v == "" for v in values):
        raise WorkbenchError(f"--grid {item!r} has an empty value", where="--grid",
                             hint="separate values with single commas: --grid lora.rank=4,8")
    return key, values


def merge_grids(table: dict[str, Any], items: Iterable[tuple[str, list[Any]]]) -> dict[str, list[Any]]:
    """``[sweep] grid`` with the ``--grid`` items on top (a key given both ways: the flag wins)."""
    grid = {k: list(v) if isinstance(v, list) else v for k, v in grid_items(table)}
    for key, values in items:
        grid[key] = values
    return grid


def expand(grid: dict[str, list[Any]]) -> list[Point]:
    """Every point of the grid (see the module doc)."""
    if not grid:
        raise WorkbenchError("the sweep has no grid", where="sweep",
                             hint="add --grid section.key=v1,v2 or a [sweep] grid table")
    count = math.prod(len(v) for v in grid.values())
    if count > MAX_POINTS:
        raise WorkbenchError(f"the grid has {count} points (at most {MAX_POINTS})", where="--grid",
                             hint="sweep fewer values; each point is a whole training run")
    keys = list(grid)
    return [Point(i, dict(zip(keys, combo, strict=True)))
            for i, combo in enumerate(itertools.product(*(grid[k] for k in keys)), 1)]


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text.strip()).strip("-.")[:32]


def new_sweep_id(name: str = "", now: float | None = None) -> str:
    """``sweep-YYYYmmdd-HHMMSS-<name>-<4 hex>``: unique without a registry."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now if now is not None else time.time()))
    tag = slug(name)
    return f"sweep-{stamp}-{tag + '-' if tag else ''}{secrets.token_hex(2)}"


def format_value(value: Any) -> str:
    """A value as TOML inline text (one line: ``--set`` and inline tables take it)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {format_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def point_overrides(sweep_id: str, point: Point, *, run_name: str, grid: dict[str, list[Any]],
                    metric: str) -> list[str]:
    """The ``--set`` items that make the sweep's config this point's run: the point's values,
    and the sweep it belongs to (id, point, the whole grid, the ranking metric)."""
    items = [f"{key}={format_value(value)}" for key, value in point.values.items()]
    items += [f"sweep.id={format_value(sweep_id)}",
              f"sweep.point={format_value(point.values)}",
              f"sweep.grid={format_value(grid)}",
              f"sweep.metric={format_value(metric)}",
              f"run.name={format_value(f'{run_name}-p{point.index}')}"]
    return items
