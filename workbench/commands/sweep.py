"""``gemma-workbench sweep run CONFIG --grid lora.rank=4,8,16 --grid train.learning_rate=1e-4,3e-4``
and ``gemma-workbench sweep show [SWEEP]``.

Queues one training run per point of the grid on the engine (started on demand) and prints
the sweep id on stdout (contract). The grid is the ``--grid section.key=v1,v2`` items over
the config's ``[sweep] grid`` table (a key given both ways: the flag wins); each value is
TOML, a bare word a string, commas inside ``[...]`` or quotes do not split.

Every point is checked as a whole config, then by the engine's estimate (mesh, ``[model]
quantize``), **before** any run is queued (a bad value names its point). Each run is the sweep's config plus the point's values, ``sweep.id``, ``sweep.point``
and its own ``run.name``; the engine gives each its own run directory. ``--dry-run`` prints
the points and queues nothing. ``sweep show SWEEP`` reads the results (``_sweep_table``);
``sweep CONFIG`` and ``runs sweep`` are the old spellings (``_spellings.sweep_config_spelling``, ``show_old``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError


def register(sub: argparse._SubParsersAction) -> None:
    top = sub.add_parser("sweep", help="queue a grid of training runs, and rank their results",
                         description="A sweep: one training run per point of a grid of config "
                                     "values (`sweep run`), ranked by a metric (`sweep show`).")
    actions = top.add_subparsers(dest="sweep_action", metavar="ACTION", required=True)
    p = actions.add_parser("run", help="queue one training run per point of a grid; prints the "
                                       "sweep id",
                           description="Queue a grid of runs on the engine: the config with each "
                                       "combination of the --grid values. Prints the sweep id.")
    p.add_argument("config", metavar="CONFIG.toml", help="the run config (its [sweep] table, if any, "
                                                        "adds grid keys)")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="a grid axis, e.g. --grid lora.rank=4,8,16 (repeatable)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key for every point (repeatable)")
    p.add_argument("--metric", default="", help="the metric that ranks the points (default: "
                                                "[sweep] metric, train.best_metric, else loss)")
    p.add_argument("--name", default="", help="part of the sweep id and of its runs' names")
    p.add_argument("--dry-run", action="store_true", help="print the points; queue nothing")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)
    add_show_args(actions.add_parser(
        "show", help="a sweep's results: point, final eval metrics, best step, wall time, peak "
                     "memory, trainable params (no SWEEP: the sweeps)",
        description="A sweep's results table, ranked by its metric; without SWEEP, the sweeps."))


def add_show_args(p: argparse.ArgumentParser, *, old: bool = False) -> None:
    """``sweep show``'s arguments (``old``: the ``runs sweep`` spelling, which says so)."""
    p.add_argument("sweep_id", nargs="?", default="", metavar="SWEEP",
                   help="the sweep id or a unique prefix (none: list the sweeps)")
    p.add_argument("--metric", default="", help="rank by this metric (default: the sweep's)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (the sweep, or the list of sweeps) instead of the table")
    p.set_defaults(handler=show_old if old else show)


def show(args: argparse.Namespace) -> int:
    from workbench.commands._sweep_table import render_sweep, render_sweeps
    from workbench.connect import connect

    with connect() as c:
        data = c.get_sweep(args.sweep_id, metric=args.metric) if args.sweep_id else c.list_sweeps()
    if args.json:
        from adapters_lib.jsontypes import to_jsonable

        print(json.dumps(to_jsonable(data)))
    else:
        print(render_sweep(data) if args.sweep_id else render_sweeps(data))
    return 0


def show_old(args: argparse.Namespace) -> int:
    print("note: `runs sweep` is now `sweep show` (the old spelling still works)", file=sys.stderr)
    return show(args)


def plan(args: argparse.Namespace) -> dict[str, Any]:
    """The sweep, checked: id, metric, the points with the overrides each run is queued with."""
    from adapters_lib.config import EVAL_METRICS, load_config
    from adapters_lib.config.checks import closest
    from adapters_lib.config.model_defaults import load_with_model_defaults
    from adapters_lib.sweeps import grid as grid_lib

    loaded = load_with_model_defaults(args.config, args.overrides)
    args.overrides = [*loaded.added, *args.overrides]  # a real model's defaults, as train's
    base = loaded.config
    items = [grid_lib.parse_grid_arg(g) for g in args.grid]
    grid = grid_lib.merge_grids(base.sweep.grid, items)
    if items:  # the flags' keys and values, checked as a [sweep] grid table would be
        load_config(args.config, [*args.overrides, f"sweep.grid={grid_lib.format_value(grid)}"])
    points = grid_lib.expand(grid)
    metric = args.metric or base.sweep.metric or base.train.best_metric or "loss"
    if metric not in EVAL_METRICS:
        raise WorkbenchError(f"{metric!r} is not a metric", where="--metric",
                             hint=f"{closest(metric, list(EVAL_METRICS))} (metrics are {', '.join(EVAL_METRICS)})")
    name = args.name or base.sweep.name or base.run.name or Path(args.config).stem
    sweep_id = grid_lib.new_sweep_id(name)
    remote = _remote()
    out = []
    for point in points:
        sets = grid_lib.point_overrides(sweep_id, point, run_name=grid_lib.slug(name) or "sweep",
                                        grid=grid, metric=metric)
        try:
            cfg = load_config(args.config, [*args.overrides, *sets])
        except WorkbenchError as err:
            where = err.where or ""
            key = where.removeprefix("--set ")
            if where.startswith("--set ") and key in point.values:  # the grid gave that value
                where = f"--grid {key}" if key in dict(items) else f"{args.config} [sweep] grid"
            raise WorkbenchError(f"point {point.index} ({point.label()}): {err.message}",
                                 where=where or None, hint=err.hint) from None
        if remote is None:  # paths resolved here: the engine gets absolute ones
            sets = _resolved(sets, point, cfg)
        out.append({"point": point.values, "index": point.index, "label": point.label(),
                    "overrides": sets})
    return {"sweep": sweep_id, "metric": metric, "base": base, "remote": remote is not None,
            "points": out}


def _remote() -> Any:
    try:
        from workbench import remote
    except ImportError:  # pragma: no cover - a build without the remote package
        return None
    return remote.selected()


def _resolved(sets: list[str], point: Any, cfg: Any) -> list[str]:
    """The point's values as the local config resolved them (a relative path made absolute)."""
    from adapters_lib.sweeps.grid import format_value

    out = []
    for item in sets:
        key = item.split("=", 1)[0]
        if key in point.values:
            section, _, name = key.partition(".")
            value = getattr(getattr(cfg, section), name)
            item = f"{key}={format_value(list(value) if isinstance(value, tuple) else value)}"
        out.append(item)
    return out


def run(args: argparse.Namespace) -> int:
    p = plan(args)
    if args.dry_run:
        if args.json:
            print(json.dumps({"sweep": p["sweep"], "metric": p["metric"], "queued": False,
                              "points": [{"point": x["point"], "overrides": x["overrides"]}
                                         for x in p["points"]]}))
        else:
            for x in p["points"]:
                print(f"point {x['index']}: {x['label']}")
            print(f"{len(p['points'])} points, ranked by {p['metric']} (dry run: nothing queued)",
                  file=sys.stderr)
        return 0
    from workbench.commands.train import engine_config
    from workbench.connect import connect

    # the resolved config here; under --remote the file as written (the engine resolves it)
    text, common = engine_config(args, p["base"])
    from workbench.commands._follow_run import precheck_mesh

    queued: list[dict[str, Any]] = []
    with connect() as client:
        for x in p["points"]:  # the engine's checks of every point (mesh, [model] quantize) first
            try:
                precheck_mesh(client, text, [*common, *x["overrides"]])
            except WorkbenchError as err:
                raise WorkbenchError(f"point {x['index']} ({x['label']}): {err.message}",
                                     where=err.where, hint=f"{err.hint + '; ' if err.hint else ''}"
                                     "nothing was queued") from None
        for x in p["points"]:
            try:
                summary = client.create_run(config_toml=text, overrides=[*common, *x["overrides"]],
                                            source=args.config)
            except WorkbenchError as err:
                done = ", ".join(q["run_id"] for q in queued) or "none"
                raise WorkbenchError(f"point {x['index']} ({x['label']}) was not queued: {err.message}",
                                     where=err.where, hint=f"queued before it: {done}; "
                                     f"stop them with `gemma-workbench runs stop ID`") from None
            run_id = summary.id
            queued.append({"point": x["point"], "run_id": run_id})
            if not args.json:
                print(f"point {x['index']}: {x['label']}  → run {run_id}", file=sys.stderr)
    if args.json:
        print(json.dumps({"sweep": p["sweep"], "metric": p["metric"], "queued": True,
                          "points": queued}))
    else:
        print(p["sweep"])
        print(f"{len(queued)} runs queued, ranked by {p['metric']}; results: "
              f"gemma-workbench sweep show {p['sweep']}", file=sys.stderr)
    return 0
