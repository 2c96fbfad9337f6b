"""Queueing a sweep's points from a client: the one-point sweep the TUI's Runs screen makes
(``w``). Light: no ML framework (the TUI imports it); ``gemma-workbench sweep`` queues its
grid the same way (``workbench.commands.sweep``)."""

from __future__ import annotations

from typing import Any


def queue_one_point(client: Any, config: dict[str, Any], values: dict[str, Any], *,
                    name: str) -> tuple[str, Any]:
    """A one-point sweep (the TUI Runs screen's key-press sweep): ``config`` (a run's config as
    a table, e.g. the parent run's) with ``values`` (``{"lora.rank": 16}``) queued as the only
    point of a new sweep; returns (the sweep id, the run's summary)."""
    from adapters_lib.sweeps import grid as grid_lib

    sweep_id = grid_lib.new_sweep_id(name)
    train, sweep = config.get("train") or {}, config.get("sweep") or {}
    metric = sweep.get("metric") or train.get("best_metric") or "loss"
    sets = grid_lib.point_overrides(sweep_id, grid_lib.Point(1, dict(values)),
                                    run_name=grid_lib.slug(name) or "sweep",
                                    grid={k: [v] for k, v in values.items()}, metric=metric)
    return sweep_id, client.create_run(config, overrides=sets, source="sweep")
