"""The Keras route's LayoutMap plans for a run config on a chip not at hand (a v5e-8), each with
the workbench's memory estimate: what ``train CONFIG --estimate --device v5e`` prints, per mesh.

``python -m bench.keras_plan [--config TOML] [--set KEY=VALUE ...] [--device v5e]
[--meshes 2x1,1x2,2x4,4x2,8x1,1x8] [--show 2x1,1x2] [--out FILE.md]``

A mesh ``DxT`` is ``[mesh] data = D``, ``tensor = T``, ``devices = D·T`` (the first D·T chips of
the slice). Per mesh: the Keras distribution (``keras_route.layout.plan_layout``: DataParallel,
ModelParallel with its LayoutMap rules, or the one-line reason it cannot be made), the notes
(replicated KV heads…) and the estimator's per-device bytes and verdict
(``engine.compute.estimate``, the numbers Configure's fit bar shows). Then the plans of
``--show`` in full (2 × 1 is DataParallel, no rule; 1 × 2 the smallest LayoutMap). Nothing is built and no device is used: the dimensions come from the catalog.

The estimator models the gemma route's step (the Keras route's ``fit`` keeps no other state
of note: the same frozen weights, LoRA kernels, their AdamW moments, activations, logits); where
the Keras plan replicates a weight the gemma mesh shards, the Keras figure is higher by that
weight's share, said in the notes column.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

DEFAULT_MESHES = "2x1,1x2,2x4,4x2,8x1,1x8"


def parse_meshes(text: str) -> list[tuple[int, int]]:
    from adapters_lib.errors import WorkbenchError

    meshes = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        d, _, t = item.partition("x")
        if not (d.isdigit() and t.isdigit() and int(d) > 0 and int(t) > 0):
            raise WorkbenchError(f"mesh {item!r} is not DATAxTENSOR", where="--meshes",
                                 hint="e.g. --meshes 2x1,2x4")
        meshes.append((int(d), int(t)))
    return meshes


def _gib(n: float | None) -> str:
    return "—" if n is None else f"{n / 2**30:.2f} GiB"


def plan_rows(cfg: Any, meshes: list[tuple[int, int]], device: str) -> list[dict[str, Any]]:
    """One row a mesh: the Keras plan and the estimate (see the module docstring)."""
    import dataclasses

    from adapters_lib import catalog
    from adapters_lib.engine import compute
    from adapters_lib.errors import WorkbenchError
    from adapters_lib.keras_route.layout import plan_layout
    from adapters_lib.keras_route.model import demo_dims, dims_from_arch

    dims = demo_dims() if cfg.model.source == "demo" else dims_from_arch(catalog.resolve(cfg.model.source).arch)
    rows = []
    for data, tensor in meshes:
        c = cfg.replace(mesh=dataclasses.replace(cfg.mesh, data=data, tensor=tensor, devices=data * tensor))
        row: dict[str, Any] = {"mesh": f"{data}x{tensor}", "devices": data * tensor}
        try:
            plan = plan_layout(dims, data=data, tensor=tensor, batch_size=c.train.batch_size)
            row.update(kind=plan.kind, rules=dict(plan.rules), notes=list(plan.notes), error=None)
        except WorkbenchError as e:
            row.update(kind="—", rules={}, notes=[], error=e.message)
        est = compute.estimate(c, [], device=device)
        e = est["estimate"] or {}
        row.update(total=e.get("total"), weights=e.get("weights"), activations=e.get("activations"),
                   logits=e.get("logits"), fraction=e.get("fraction"), verdict=e.get("verdict"),
                   device_bytes=est["device_bytes"], summary=est["summary"])
        rows.append(row)
    return rows


def markdown(cfg: Any, rows: list[dict[str, Any]], device: str, show: str) -> str:
    head = (f"Model `{cfg.model.source}`, batch {cfg.train.batch_size} × {cfg.data.max_length}, "
            f"LoRA r{cfg.lora.rank} on {', '.join(cfg.lora.targets)}, params {cfg.train.param_dtype}, "
            f"compute {cfg.train.compute_dtype}; chip `{device}` (estimate per device).\n\n")
    lines = ["| mesh (data × tensor) | chips | Keras distribution | per device (est.) | weights | "
             "activations + logits | verdict | notes |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        act = (r["activations"] or 0) + (r["logits"] or 0) if r["total"] is not None else None
        notes = r["error"] and f"cannot be made: {r['error']}" or "; ".join(r["notes"]) or "—"
        lines.append(f"| {r['mesh'].replace('x', ' × ')} | {r['devices']} | {r['kind']} | {_gib(r['total'])} | "
                     f"{_gib(r['weights'])} | {_gib(act)} | {r['verdict'] or '—'} | {notes} |")
    tail = ""
    for name in filter(None, show.split(",")):
        shown = next((r for r in rows if r["mesh"] == name), None)
        if shown is None:
            continue
        tail += f"\n\nThe {name.replace('x', ' × ')} plan: {shown['kind']}"
        if shown["error"]:
            tail += f" cannot be made: {shown['error']}\n"
        elif not shown["rules"]:
            tail += (" — every weight replicated on each chip, the batch split over the "
                     "`batch` axis (no LayoutMap rule: `keras.distribution.DataParallel`).\n")
        else:
            tail += ", `LayoutMap` rules (regex → axes; LoRA kernels and norms replicated):\n\n" + "\n".join(
                f"- `{rx}` → `{axes}`" for rx, axes in shown["rules"].items()) + "\n"
        tail += f"\nEstimate: {shown['summary']}"
    return head + "\n".join(lines) + tail


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.keras_plan", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="examples/seed-003-imdb.toml")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--device", default="v5e")
    p.add_argument("--meshes", default=DEFAULT_MESHES)
    p.add_argument("--show", default="2x1,1x2", help="the meshes whose plans are listed in full")
    p.add_argument("--out", help="also write the markdown here")
    a = p.parse_args(argv)
    from adapters_lib.config.model_defaults import load_with_model_defaults
    from adapters_lib.errors import WorkbenchError
    from adapters_lib.import_shields import tf_deferred

    tf_deferred.install()  # as every computing process: gemma's model code imports TF by name
    try:
        cfg = load_with_model_defaults(a.config, ['model.backend="keras"', *a.set]).config
        text = markdown(cfg, plan_rows(cfg, parse_meshes(a.meshes), a.device), a.device, a.show)
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
