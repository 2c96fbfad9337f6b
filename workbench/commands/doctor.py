"""``gemma-workbench doctor [--json]``: versions, JAX devices, paths, weight caches, problems.

JAX is started in this process (a CLI command, not the TUI); the import happens in the handler.
Exit status 1 when a problem of severity "error" is found, else 0.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check the install, the accelerator and the directories",
                       description="Report versions, the JAX backend and devices, the data/run/cache "
                                   "directories, and any mismatch between the hardware and the "
                                   "installed JAX, with the command that fixes it.")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def _gib(n: int | None) -> str:
    return f"{n / 2**30:.1f} GiB" if n else "-"


def render(report: dict[str, Any]) -> str:
    v = report["versions"]
    lines = ["gemma-workbench doctor", "", "versions"]
    lines += [f"  {k:<18} {val or 'not installed'}" for k, val in v.items()]
    devs = report["devices"]
    lines += ["", f"jax backend: {report['backend'] or 'none'}   devices: {len(devs)}"
              + (f"   processes: {report['process_count']}" if report["process_count"] > 1 else "")]
    kinds: dict[tuple[str, str, str], int] = {}
    for d in devs:
        key = (d["platform"], d["kind"], _gib(d["memory_bytes"]))
        kinds[key] = kinds.get(key, 0) + 1
    lines += [f"  {n}× {plat} {kind}  memory {mem}" for (plat, kind, mem), n in kinds.items()]
    hw = report["hardware"]
    seen = []
    tpu_vars = [k for k in hw["tpu_env"] if k in ("TPU_NAME", "TPU_ACCELERATOR_TYPE")]
    if hw["tpu_device_files"] or tpu_vars:
        seen.append("TPU (" + ", ".join(hw["tpu_device_files"][:4] or tpu_vars) + ")")
    if hw["nvidia_gpus"]:
        seen.append(f"{len(hw['nvidia_gpus'])}× {hw['nvidia_gpus'][0]} (driver {hw['nvidia_driver']})")
    lines.append(f"  hardware seen: {', '.join(seen) or 'no TPU, no NVIDIA GPU'}")
    if report["env"]:
        lines += [f"  {k}={val}" for k, val in report["env"].items()]
    lines += ["", "paths"] + [f"  {k:<16} {val}" for k, val in report["paths"].items()]
    lines += ["", "weight caches"]
    for name, c in report["caches"].items():
        state = f"{len(c['models'])} model(s)" if c["exists"] else "absent"
        lines.append(f"  {name:<12} {state}  {c['path']}")
        lines += [f"    {m}" for m in c["models"][:20]]
    cw = report.get("converted_weights") or {}
    if cw.get("enabled"):
        lines.append(f"  {'converted':<12} {len(cw['entries'])} model(s), {cw['bytes'] / 2**30:.2f} of "
                     f"{cw['cap_bytes'] / 2**30:.0f} GiB  {cw['path']}")
        lines += [f"    {e['source']} ({e['dtype']}, {e['bytes'] / 2**30:.2f} GiB)" for e in cw["entries"][:20]]
    else:
        lines.append(f"  {'converted':<12} off (GEMMA_WORKBENCH_WEIGHTS_CACHE_GB=0 or an empty folder)")
    lines.append("")
    if report["problems"]:
        lines.append("problems")
        for p in report["problems"]:
            lines += [f"  {p['severity']}: {p['message']}", f"    fix: {p['fix']}"]
    else:
        lines.append("no problems found")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from adapters_lib import doctor

    report = doctor.collect()
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 1 if any(p["severity"] == "error" for p in report["problems"]) else 0
