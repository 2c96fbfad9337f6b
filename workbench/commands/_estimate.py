"""``train CONFIG --estimate [--json]``: the per-device memory of the config's train step.

The running engine computes it (``api.Estimate``: the model's config from the catalog, no
weights loaded), or ``--remote``'s; when no engine runs, this process computes it with the
same function (``engine.compute.estimate``) and starts none, so nothing is left running
(``--in-process``: an engine inside this process, as before). Text: the summary line and any mesh problem;
``--json`` (contract): one object with ``weights_bytes``, ``total_bytes``, one ``<term>_bytes``
per term of ``adapters_lib.memory.TERMS``, ``device_bytes``, ``fraction``, ``verdict``,
``device_count``, ``quantize``, ``trainable_params``, ``total_params``, ``mesh_problems``,
``ok``. Exit status 0, or 2 when a problem (mesh, ``[model] quantize``, a step that exceeds the
device's memory) is an error. ``--device v5e``: for that chip instead of the engine's devices
(``adapters_lib.memory.device``: planning a launch on a machine not at hand).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def as_json(reply: Any, cfg: Any) -> dict[str, Any]:
    """The ``--json`` object (contract) of an ``api.EstimateReply``."""
    from adapters_lib.memory.estimate import TERMS

    est = reply.estimate or {}
    out: dict[str, Any] = {f"{t}_bytes": est.get(t) for t in TERMS}
    out.update(total_bytes=est.get("total"), device_bytes=reply.device_bytes,
               fraction=est.get("fraction"), verdict=est.get("verdict"),
               device_count=reply.device_count, quantize=cfg.model.quantize,
               trainable_params=reply.trainable_params, total_params=reply.total_params,
               mesh_problems=[p.to_json() for p in reply.mesh_problems], ok=reply.ok)
    return out


def estimate_reply(args: argparse.Namespace, cfg: Any, text: str, overrides: list[str]) -> Any:
    """The ``api.EstimateReply``: from the engine that runs (see the module doc), else here."""
    from workbench import remote
    from workbench.commands._generation_args import engine_client

    if not args.in_process and remote.selected() is None:
        from workbench.client import EngineClient

        with EngineClient() as probe:
            running = probe.ping()
        if not running:
            return computed_here(cfg, args.device or "")
    with engine_client(args) as client:
        return client.estimate(config_toml=text, overrides=overrides, device=args.device or "")


def computed_here(cfg: Any, device: str) -> Any:
    """The estimate in this process, on its own devices (JAX imported quietly), no engine."""
    from adapters_lib.import_shields.tf_deferred import preimport_quietly

    preimport_quietly()
    import jax

    from adapters_lib.engine import api, compute
    from adapters_lib.engine.devices import device_info

    devices = [device_info(d) for d in jax.devices()]
    return api.EstimateReply.from_json(compute.estimate(cfg, devices, device))


def print_estimate(args: argparse.Namespace, cfg: Any, text: str, overrides: list[str]) -> int:
    reply = estimate_reply(args, cfg, text, overrides)
    out = as_json(reply, cfg)
    if args.json:
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        quant = f" (base {cfg.model.quantize})" if cfg.model.quantize != "none" else ""
        sys.stdout.write(f"{reply.summary or 'no estimate'}{quant}\n")
        for p in reply.mesh_problems:
            hint = f"; {p.hint}" if p.hint else ""
            where = f"{p.where}: " if p.where else ""
            sys.stdout.write(f"{p.level}: {where}{p.message}{hint}\n")
    return 0 if reply.ok else 2
