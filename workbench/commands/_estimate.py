"""``train CONFIG --estimate [--json]``: the per-device memory of the config's train step.

The engine computes it (``api.Estimate``: the model's config from the catalog, no weights
loaded); ``--in-process`` computes it here. Text: the summary line and any mesh problem;
``--json`` (contract): one object with ``weights_bytes``, ``total_bytes``, one ``<term>_bytes``
per term of ``adapters_lib.memory.TERMS``, ``device_bytes``, ``fraction``, ``verdict``,
``device_count``, ``quantize``, ``trainable_params``, ``total_params``, ``mesh_problems``,
``ok``. Exit status 0, or 2 when a mesh problem is an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def _reply_in_process(cfg: Any) -> dict[str, Any]:
    import jax

    from adapters_lib.engine import compute

    devices = [{"id": d.id, "kind": d.device_kind} for d in jax.devices()]
    return compute.estimate(cfg, devices)


def _reply_from_engine(text: str, overrides: list[str]) -> dict[str, Any]:
    from workbench.commands._generation_args import engine_client

    with engine_client() as client:
        reply = client.estimate(config_toml=text, overrides=overrides)
    return reply.to_json()


def as_json(reply: dict[str, Any], cfg: Any) -> dict[str, Any]:
    from adapters_lib.memory import TERMS

    est = reply.get("estimate") or {}
    out: dict[str, Any] = {f"{t}_bytes": est.get(t) for t in TERMS}
    out.update(total_bytes=est.get("total"), device_bytes=reply.get("device_bytes"),
               fraction=est.get("fraction"), verdict=est.get("verdict"),
               device_count=reply.get("device_count"), quantize=cfg.model.quantize,
               trainable_params=reply.get("trainable_params"),
               total_params=reply.get("total_params"),
               mesh_problems=reply.get("mesh_problems") or [], ok=bool(reply.get("ok")))
    return out


def print_estimate(args: argparse.Namespace, cfg: Any, text: str, overrides: list[str]) -> int:
    reply = _reply_in_process(cfg) if args.in_process else _reply_from_engine(text, overrides)
    out = as_json(reply, cfg)
    if args.json:
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        quant = f" (base {cfg.model.quantize})" if cfg.model.quantize != "none" else ""
        sys.stdout.write(f"{reply.get('summary') or 'no estimate'}{quant}\n")
        for p in out["mesh_problems"]:
            hint = f"; {p['hint']}" if p.get("hint") else ""
            sys.stdout.write(f"{p['level']}: {p['message']}{hint}\n")
    return 0 if out["ok"] else 2
