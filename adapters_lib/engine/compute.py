"""The engine's pure-compute requests: catalog, data check, memory/mesh estimate.

No weights are loaded and nothing is compiled; they run in request threads (after the
engine's heavy imports, see ``runtime``).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import threading
from pathlib import Path
from typing import Any

from adapters_lib.config import RunConfig
from adapters_lib.engine import api
from adapters_lib.engine.errors import EngineError
from adapters_lib.errors import WorkbenchError

HINTS = {
    "incomplete": "a file is missing: download the model again, or point at the full folder",
    "unreadable": "check that the files are readable and not truncated",
    "unsupported": "only Gemma 2, 3, 3n and 4 text models can be trained here",
}


_CATALOG_LOCK = threading.Lock()
"""One catalog scan at a time: a second caller waits for the first, then reads its caches
(the catalog caches what it read per file; the engine scans once at start-up)."""


def models(folders: tuple[str, ...] = ()) -> api.ModelList:
    """Every model the catalog finds (the demo, caches, configured and given folders)."""
    from adapters_lib import catalog

    with _CATALOG_LOCK:
        found = catalog.list_models([Path(f).expanduser() for f in folders])
    return api.ModelList(models=[model_info(m) for m in found])


def model_info(entry: Any) -> api.ModelInfo:
    """A catalog entry as the API's model entry: its problems in words, its architecture."""
    data = as_json(entry)
    ok = data.get("status", "ok") == "ok"
    problems = [] if ok else [str(data.get("reason") or data.get("status") or "unusable")]
    if data.get("tokenizer_mismatch"):
        problems.append(str(data["tokenizer_mismatch"]))
    data.setdefault("problems", problems)
    data.setdefault("hint", "" if ok else HINTS.get(str(data.get("status")), "see docs/models.md"))
    arch = getattr(entry, "arch", None)
    if arch is not None and dataclasses.is_dataclass(arch):
        from adapters_lib.models import families

        data["arch"] = {f.name: as_json(getattr(arch, f.name))
                        for f in dataclasses.fields(arch) if f.name != "attention"}
        data["arch"]["lora_per_rank"] = families.lora_per_rank(arch)  # Configure's live count
    data.setdefault("checkpoint", str(getattr(entry, "checkpoint", "") or ""))
    return api.ModelInfo.from_json(data)


def data_check(cfg: RunConfig, path: str, fmt: str, limit: int = 0) -> api.DataCheckReply:
    """The data area's report for ``path`` with the run config's [data] settings."""
    from adapters_lib.data import check_file

    d = cfg.data
    path = path or d.path
    if not path or path == "demo":
        raise EngineError("data check needs a file or folder path", where="data check request",
                          hint='send "path" (the demo data needs no check)')
    fmt = fmt if fmt != "auto" else d.format
    kwargs: dict[str, Any] = {}
    if limit and "limit" in inspect.signature(check_file).parameters:
        kwargs["limit"] = limit
    report = check_file(path, format=fmt, tokenizer=tokenizer_path(cfg),
                        max_length=d.max_length, loss_on=d.loss_on, truncation=d.truncation,
                        field_map=d.field_map or None, labels=d.labels or None, **kwargs)
    return api.DataCheckReply.from_json({"report": as_json(report)})


def tokenizer_path(cfg: RunConfig) -> str | None:
    """The tokenizer the run would use, without loading weights (None: the demo's)."""
    if cfg.model.tokenizer:
        return cfg.model.tokenizer
    if cfg.model.source == "demo":
        return None
    from adapters_lib import catalog

    return catalog.resolve(cfg.model.source).tokenizer


def model_config(cfg: RunConfig, entry: Any) -> Any:
    """The model's ``TransformerConfig`` from its catalog entry (no weights loaded)."""
    if cfg.model.source == "demo":
        from adapters_lib.models import demo

        return demo.demo_transformer_config()
    if entry.arch is None:
        raise EngineError(f"cannot read the architecture of {cfg.model.source!r}"
                          + (f": {entry.reason}" if entry.reason else ""),
                          where="[model] source", hint="check `gemma-workbench models`")
    return entry.arch.transformer_config()


def quantize_problems(cfg: RunConfig, entry: Any) -> list[dict[str, Any]]:
    """``[model] quantize`` that the load would refuse (``weights.check_quantize``), as an
    estimate problem: Configure and ``train --estimate`` say it before a launch."""
    if cfg.model.backend != "gemma" or cfg.model.quantize == "none":
        return []
    from adapters_lib.models.weights import check_quantize

    try:
        check_quantize(entry, cfg.model.quantize, cfg.model.quantize_tile_size,
                       cfg.model.quantize_embedding)
    except WorkbenchError as e:
        return [{"level": "error", "message": e.message, "hint": e.hint or "",
                 "where": e.where or ""}]
    return []


def estimate(cfg: RunConfig, devices: list[dict[str, Any]], device: str = "") -> dict[str, Any]:
    """Memory per device, mesh problems in words, trainable params (``devices``: status rows).

    ``device``: plan for a chip by name (``memory.device.find_chip``: ``v5e``, ``h100``) instead
    of this engine's devices; ``[mesh] devices`` of them (default: the mesh's product, else 1).
    A step whose estimate exceeds the device is an error problem, with what would fit instead
    (``memory.advice``)."""
    import jax

    from adapters_lib import catalog, mesh
    from adapters_lib.memory import advice as memory_advice
    from adapters_lib.memory import device as device_memory
    from adapters_lib.memory import estimate as memory
    from adapters_lib.memory import run_estimate
    from adapters_lib.memory.estimate import ce_chunk_budget

    entry = catalog.resolve(cfg.model.source)  # once: the config and the quantize check read it
    config = model_config(cfg, entry)
    if device:
        chip = device_memory.find_chip(device)
        if chip is None:
            raise EngineError(f"unknown device {device!r}", where="--device",
                              hint=f"name one of {', '.join(device_memory.names())}")
        planned = cfg.mesh.devices or (math.prod(cfg.mesh.shape) if -1 not in cfg.mesh.shape else 1)
        devices = [{"id": i, "kind": chip.name} for i in range(planned)]
        device_bytes, platform, device_name = chip.usable_bytes, chip.platform, chip.name
        ce_bytes = memory.ce_chunk_budget_for(platform, device_bytes)
    else:
        first = jax.devices()[0]
        device_bytes, platform = device_memory.device_memory_bytes(first), first.platform
        chip = device_memory.chip_for_device(first)
        device_name = chip.name if chip else (getattr(first, "device_kind", "") or platform)
        ce_bytes = ce_chunk_budget(first)
    available = len(devices)
    count = cfg.mesh.devices or available
    problems: list[dict[str, Any]] = []
    if count > available:
        problems.append({"level": "error", "message": f"mesh.devices is {count} but there "
                         f"are {available} devices", "hint": f"use at most {available}"})
        count = available
    problems += [p.to_dict() for p in mesh.validate(
        cfg.mesh, config, cfg.train.batch_size, cfg.data.max_length, count,
        grad_accum=cfg.train.grad_accum)]
    problems += quantize_problems(cfg, entry)
    kw = {"device_count": count, "ce_chunk_bytes": ce_bytes, "platform": platform}
    try:
        est = run_estimate.estimate_run(cfg, config, device_bytes=device_bytes, **kw)
    except WorkbenchError as e:  # a mesh that cannot be resolved: the problems say why
        if not any(p["level"] == "error" for p in problems):
            problems.append({"level": "error", "message": e.message, "hint": e.hint or ""})
        est = None
    if est is not None and not any(p["level"] == "error" for p in problems):
        data, fsdp, _ = mesh.resolve(cfg.mesh, count).shape
        too_big = memory_advice.fit_problem(cfg, config, est, device_name=device_name,
                                            data_fsdp=data * fsdp, **kw)
        if too_big:
            problems.append(too_big)
    rows = [{"device": d["id"], "kind": d["kind"], "bytes": est.total,
             "capacity_bytes": device_bytes or None, "verdict": est.verdict}
            for d in devices[:count]] if est else []
    summary = est.summary() if est else None
    if summary and device:
        summary = f"{summary} [planned for {device_name}]"
    return {
        "estimate": est.to_dict() if est else None,
        "devices": rows,
        "summary": summary,
        "trainable_params": est.trainable_params if est else None,
        "total_params": est.total_params if est else None,
        "mesh_problems": problems,
        "ok": not any(p["level"] == "error" for p in problems),
        "device_count": count,
        "device_bytes": device_bytes,
    }


def as_json(value: Any) -> Any:
    """A dataclass / object / container from another area → JSON-able data."""
    if hasattr(value, "to_dict") and callable(value.to_dict) and not isinstance(value, type):
        return as_json(value.to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: as_json(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not f.name.startswith("_")}
    if isinstance(value, dict):
        return {str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [as_json(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy arrays and scalars
        return value.tolist()
    return str(value)
