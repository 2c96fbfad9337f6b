"""The ``[sweep]`` section's checks: each grid key a real ``section.key``, each value list of the
key's type, the ranking metric known; ``grid_items`` flattens a grid written as TOML tables.
Used by ``adapters_lib.config`` (and ``sweeps.grid``)."""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import fields
from typing import Any, get_type_hints

from adapters_lib.config.checks import Where, check_line_text, closest
from adapters_lib.errors import WorkbenchError
from adapters_lib.jsontypes import coerce

SWEEP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def grid_items(grid: dict[str, Any]) -> list[tuple[str, Any]]:
    """``[sweep] grid`` as ("section.key", values) pairs, in the order written.

    A grid written as TOML tables (``[sweep.grid.lora] rank = [4, 8]`` or ``lora.rank = [4, 8]``
    without quotes) arrives nested: one level is flattened here.
    """
    items: list[tuple[str, Any]] = []
    for key, value in grid.items():
        if isinstance(value, dict) and "." not in key:
            items.extend((f"{key}.{sub}", v) for sub, v in value.items())
        else:
            items.append((key, value))
    return items


def check_sweep(cfg: Any, where: Where, sections: dict[str, type], *,
                eval_metrics: tuple[str, ...]) -> Any:
    """``[sweep]``: each grid key a real ``section.key``, each value list non-empty and of the
    key's type, the ranking metric known. Returns ``cfg`` with the grid flattened."""
    sw = cfg.sweep

    def fail(key: str, message: str, hint: str | None = None) -> None:
        raise WorkbenchError(message, where=where("sweep", key), hint=hint)

    for key in ("id", "name", "metric"):
        check_line_text(getattr(sw, key), key=f"sweep.{key}", where=where("sweep", key))
    if sw.id and not SWEEP_ID.match(sw.id):
        fail("id", f"sweep.id {sw.id!r} is not an id", "the workbench sets it; leave it empty")
    if sw.metric and sw.metric not in eval_metrics:
        fail("metric", f"sweep.metric is {sw.metric!r}",
             f"{closest(sw.metric, list(eval_metrics))} (metrics are {', '.join(eval_metrics)})")
    flat: dict[str, Any] = {}
    for dotted, values in grid_items(sw.grid):
        section, _, key = dotted.partition(".")
        if section not in sections or section == "sweep":
            others = [s for s in sections if s != "sweep"]
            near = difflib.get_close_matches(section, others, n=1, cutoff=0.5)
            fail("grid", f"sweep.grid key {dotted!r} is not section.key",
                 "a sweep cannot sweep its own [sweep] keys" if section == "sweep"
                 else f"did you mean {near[0]!r}?" if near else f"sections are {', '.join(others)}")
        valid = [f.name for f in fields(sections[section])]
        if key not in valid:
            fail("grid", f"sweep.grid key {dotted!r}: unknown key {section}.{key}", closest(key, valid))
        if not isinstance(values, list) or not values:
            fail("grid", f"sweep.grid {dotted!r} must be a non-empty list of values",
                 f'e.g. "{dotted}" = [4, 8]' if not isinstance(values, list) else "give at least one value")
        hint_type = get_type_hints(sections[section])[key]
        checked = []
        for v in values:
            if (section, key) == ("lora", "targets") and isinstance(v, str):
                v = v.split() if v.strip() != "all" else ["all"]
            checked.append(coerce(v, hint_type, key=f"sweep.grid {dotted!r} value",
                                  where=where("sweep", "grid")))
        if len({repr(v) for v in checked}) != len(checked):
            fail("grid", f"sweep.grid {dotted!r} names a value twice", "name each value once")
        if dotted in flat:
            fail("grid", f"sweep.grid names {dotted!r} twice", "name each key once")
        flat[dotted] = [list(v) if isinstance(v, tuple) else v for v in values]
    for dotted in sw.point:
        section, _, key = dotted.partition(".")
        if section not in sections or key not in [f.name for f in fields(sections[section])]:
            fail("point", f"sweep.point key {dotted!r} is not section.key",
                 "the workbench sets it; leave it empty")
    return dataclasses.replace(cfg, sweep=dataclasses.replace(sw, grid=flat)) if flat != sw.grid else cfg
