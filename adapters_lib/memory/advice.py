"""What would fit instead: a launch whose estimate exceeds the device is refused before a run
exists, with the settings that the same estimator says fit (pure: no JAX).

``fit_problem(run_config, model_config, ...)`` is the engine's estimate problem (level
``error``, ``where`` ``[train] batch_size``) or None; its hint is one line of alternatives, each
with its own estimate: the largest batch that fits at this length, remat on at this batch, and
gradient accumulation keeping the batch of an optimizer step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from adapters_lib.memory import estimate as memory
from adapters_lib.memory.run_estimate import estimate_run


def _estimate(cfg: Any, config: Any, **kw: Any) -> memory.MemoryEstimate:
    return estimate_run(cfg, config, **kw)


def _with(cfg: Any, **train: Any) -> Any:
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, **train))


def alternatives(cfg: Any, config: Any, *, data_fsdp: int = 1, **kw: Any) -> list[tuple[str, memory.MemoryEstimate]]:
    """(setting, its estimate) for each change that does not exceed the device, best first:
    the largest ``batch_size`` that fits, ``remat = true``, the least ``grad_accum`` that keeps
    ``batch_size`` (with remat if it needs it). ``data_fsdp``: the mesh's data×fsdp, which every
    micro-batch must divide. ``kw``: ``estimate_run``'s keywords."""
    t = cfg.train
    out: list[tuple[str, memory.MemoryEstimate]] = []

    def fitting(candidate: Any) -> memory.MemoryEstimate | None:
        est = _estimate(candidate, config, **kw)
        return est if est.verdict in ("fits", "tight") else None

    step = data_fsdp * t.grad_accum
    for b in range(t.batch_size - step, 0, -step):
        est = fitting(_with(cfg, batch_size=b))
        if est is not None:
            out.append((f"batch_size = {b}", est))
            break
    if not t.remat:
        est = fitting(_with(cfg, remat=True))
        if est is not None:
            out.append(("remat = true", est))
    for remat in (t.remat, True) if not t.remat else (True,):
        found = None
        for a in range(t.grad_accum + 1, t.batch_size + 1):
            if t.batch_size % a or (t.batch_size // a) % data_fsdp:
                continue
            est = fitting(_with(cfg, grad_accum=a, remat=remat))
            if est is not None:
                found = (a, est)
                break
        if found:
            extra = " and remat = true" if remat and not t.remat else ""
            out.append((f"grad_accum = {found[0]}{extra} (still {t.batch_size} examples a step)", found[1]))
            break
    return out


def fit_problem(cfg: Any, config: Any, est: memory.MemoryEstimate, *, device_name: str = "",
                data_fsdp: int = 1, **kw: Any) -> dict[str, Any] | None:
    """The estimate problem of a run whose step exceeds the device (None when it does not)."""
    if est.verdict != "exceeds":
        return None
    dev = f"the {memory.fmt_bytes(est.device_bytes)} of {device_name}" if device_name else \
        f"the device's {memory.fmt_bytes(est.device_bytes)}"
    options = alternatives(cfg, config, data_fsdp=data_fsdp, device_bytes=est.device_bytes, **kw)
    if options:
        hint = "would fit: " + "; or ".join(f"[train] {s} ({memory.fmt_bytes(e.total)}, {e.verdict})"
                                            for s, e in options)
    else:
        hint = ("nothing at this length fits: shorten data.max_length, use a smaller model, "
                'quantize the base ([model] quantize = "int8") or add devices (fsdp)')
    return {"level": "error", "where": "[train] batch_size",
            "message": f"the train step needs about {memory.fmt_bytes(est.total)} per device, more than "
                       f"{dev} (estimated)",
            "hint": hint}
