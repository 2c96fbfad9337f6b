"""TUI test fixtures: a static engine stand-in for deterministic snapshots.

``StaticClient`` is the engine client's typed calls (``EngineCalls``) answered from fixed
data: a finished demo run with 40 steps of metrics, for the key and form tests that
assert on its exact texts. The snapshots use ``engine_fake.EngineFake`` (replies recorded
from the real engine). Flows that must prove the real thing (launch, stream, stop,
compare, overlay) use the real engine fixture instead.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from adapters_lib.config import RunConfig
from adapters_lib.engine import api
from adapters_lib.engine.compile_ahead import CPU_MESSAGE
from workbench.engine_calls import EngineCalls


async def workers_done(app) -> None:
    from textual.worker import WorkerCancelled  # textual only where a TUI test runs

    try:
        await app.workers.wait_for_complete()
    except WorkerCancelled:  # an exclusive worker replaced by a newer one (the estimate)
        pass


def still_busy(app) -> str:
    """What the app has still to do, or "": a worker pending or running, or a change of the
    Configure form waiting for its re-validation (``DEBOUNCE_S`` after the last keystroke)."""
    from textual.worker import WorkerState

    for worker in app.workers:
        if worker.state in (WorkerState.PENDING, WorkerState.RUNNING):
            return f"the worker {worker.name or worker.group}"
    if getattr(app.screen, "_debounce", None) is not None:
        return "the form's re-validation"
    return ""


async def settle(pilot, timeout: float = 60.0) -> None:
    """Until the app is quiet: every worker finished, what they posted handled, and no form
    change still waiting for its re-validation (which starts the estimate's worker). A wait
    on the app's state, not on a time: a handler that starts the next worker (a finished
    compare reloads the run's list) is seen, and waited for too; two quiet looks in a row
    (each a ``pilot.pause()``: the screen's messages processed, the process idle) end it.
    It replaced a fixed 0.4 s pause per settle (a worker, then 0.4 s, then the workers
    again), which most settles spent doing nothing."""
    app = pilot.app
    t0 = time.monotonic()
    quiet = 0
    while quiet < 2:
        await workers_done(app)
        await pilot.pause()
        if not still_busy(app):
            quiet += 1
            continue
        quiet = 0
        while busy := still_busy(app):  # cheap looks meanwhile: a pause walks every widget
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"the app never settled: {busy} after {timeout:.0f} s")
            await asyncio.sleep(0.02)


async def until(pilot, condition: Callable[[], bool], timeout: float = 300.0,
                what: str = "") -> None:
    """Pause the app until ``condition()`` holds: a wait on a state, never on a time (a
    loaded 2-core machine can take seconds to mount an app or run its first worker)."""
    t0 = time.monotonic()
    while not condition():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what or condition}")
        await pilot.pause(0.2)


def _metrics(steps: int, scale: float, seed: int) -> list[dict[str, Any]]:
    out = []
    for s in range(1, steps + 1):
        loss = 7.0 * math.exp(-s / (12 * scale)) + 1.2 + 0.05 * math.sin(s * 1.7 + seed)
        m = {"step": s, "loss": round(loss, 4), "lr": round(1e-3 * min(1, s / 5) *
             0.5 * (1 + math.cos(math.pi * s / steps)), 7), "grad_norm": round(2.0 / (1 + s / 8), 4),
             "tokens_per_s": 3000 + 40 * ((s * 7 + seed) % 11), "step_time_s": 0.35}
        if s % 10 == 0:
            m["eval_loss"] = round(loss + 0.15, 4)
        out.append(m)
    return out


def _config(rank: int, name: str) -> dict[str, Any]:
    cfg = RunConfig().to_dict()
    cfg["lora"]["rank"] = rank
    cfg["lora"]["alpha"] = 2.0 * rank
    cfg["train"]["steps"] = 40
    cfg["data"]["max_length"] = 64
    cfg["run"]["name"] = name
    return cfg


RUNS = {
    "20260101-120000-demo": ("completed", 8, 1.0),
    "20260101-130000-demo-r16": ("completed", 16, 0.8),
}


class StaticClient(EngineCalls):
    """Fixed answers, by command type, read back with each command's reply type (as the
    client reads the engine's): the client's own typed calls over ``call`` and ``stream``."""

    def call(self, cmd: api.Command, *, timeout: float | None = None) -> Any:
        answer = {api.Status: lambda c: self.status_json(), api.ListModels: lambda c: {"models": self.models_json()},
                  api.CheckData: lambda c: {"report": self.report_json()},
                  api.Estimate: lambda c: self.estimate_json(c.config),
                  api.CreateRun: lambda c: {"id": "20260101-140000-demo", "state": "queued"},
                  api.ListRuns: lambda c: {"runs": [self._summary(rid) for rid in RUNS]},
                  api.GetRun: lambda c: self._record(c.run_id, c.metrics, c.events),
                  api.StopRun: lambda c: {"id": c.run_id, "state": "stopping"},
                  api.ResumeRun: lambda c: {"id": c.run_id, "state": "stopping"},
                  api.DeleteRun: lambda c: {"id": c.run_id, "deleted": True},
                  api.Export: lambda c: {"run_id": c.run_id, "out": f"/tmp/{c.run_id}/adapter"},
                  api.ListCompares: lambda c: {"compares": self.saved_compares(c.run_id)},
                  api.CompileAhead: lambda c: {"ahead": False, "backend": "cpu", "message": CPU_MESSAGE},
                  api.ListCompileJobs: lambda c: {"ahead": False, "backend": "cpu", "message": CPU_MESSAGE},
                  }[type(cmd)]
        return cmd.reply.from_json(answer(cmd), where=f"{cmd.name} reply")

    def stream(self, cmd: api.Command) -> Iterator[api.StreamItem]:
        items = {api.StreamRun: lambda c: [("replayed", {}), ("end", {"state": RUNS[c.run_id][0]})],
                 api.Compare: lambda c: self.compare_items()}[type(cmd)](cmd)
        return iter([api.stream_item(kind, data, cmd.items) for kind, data in items])

    def status_json(self) -> dict[str, Any]:
        return {"api_version": 1, "backend": "cpu", "busy": False, "active_run": None,
                "jax": {"ready": True, "loading": False, "error": None, "modules_ready": True},
                "memory": {"host_bytes": 24 * 2**30, "engine_rss_bytes": 1536 * 2**20},
                "devices": [{"id": i, "platform": "cpu", "kind": "cpu", "process_index": 0,
                             "memory_bytes": None, "bytes_in_use": None,
                             "peak_bytes_in_use": None} for i in range(8)]}

    def models_json(self) -> list[dict[str, Any]]:
        """Entries with the keys of the engine's catalog reply (``ModelEntry.to_dict``)."""
        return [
            {"id": "demo", "family": "gemma3", "size": "custom", "variant": "pt",
             "format": "demo", "path": "", "tokenizer": None, "bytes": 0, "params": 4_068_096,
             "status": "ok", "source": "builtin",
             "reason": "built-in tiny Gemma 3 (vocab 1024); tokenizer made at first use"},
            {"id": "starter:gemma-3-270m", "family": "gemma3", "size": "270m", "variant": "pt",
             "format": "gguf", "quant": "Q4_K_M", "path": "/venv/gemma3_270m/model.gguf",
             "tokenizer": "(from the GGUF vocabulary)", "bytes": 253_115_968,
             "params": 268_098_176, "status": "ok", "reason": "", "source": "starter"},
            {"id": "hf:google/gemma-3-1b-it", "family": "gemma3", "size": "1b", "variant": "it",
             "format": "safetensors", "path": "/data/hf/models--google--gemma-3-1b-it",
             "tokenizer": None, "bytes": 1_999_811_208, "params": None, "status": "unreadable",
             "reason": "config.json is not valid JSON (line 1)", "source": "huggingface"},
        ]

    def report_json(self) -> dict[str, Any]:
        return {"ok": True, "fatal": None, "format": "chat", "records": 480, "examples": 480,
                "dropped": 0, "tokens": 30112, "truncated": 0, "mean_tokens": 62.7,
                "errors": [], "warnings": [], "error_count": 0, "warning_count": 0,
                "preview": [{"text": "<bos><start_of_turn>user\nadd 2 and 3<end_of_turn>\n"
                                     "<start_of_turn>model\n5<end_of_turn>", "tokens": 17}]}

    def estimate_json(self, config: dict[str, Any] | None) -> dict[str, Any]:
        f, t = config["mesh"]["fsdp"], config["mesh"]["tensor"]
        rank = config["lora"]["rank"]
        per = int(60 * 2**20 / max(1, f * max(t, 1))) + rank * 2**20
        problems = [] if t in (1, -1) else [
            {"level": "warning", "message": f"tensor={t} does not divide num_kv_heads=1; the KV "
             "projection is replicated on the tensor axis", "hint": "to shard it choose tensor=1"}]
        if config["train"]["batch_size"] % (config["mesh"]["data"] * f):
            problems.append({"level": "error", "message": "batch_size is not divisible by "
                             "data×fsdp", "hint": "choose a multiple"})
        if config["model"].get("quantize") == "gguf":  # the real engine's check_quantize (test_engine_api)
            problems.append({"level": "error", "where": "[model] quantize",
                             "message": 'model.quantize = "gguf" needs a GGUF base; the demo '
                                        "model is not one",
                             "hint": 'use "int8", "int4" or "nf4" for this model'})
        return {"estimate": {"weights": per // 2, "adapters": rank * 2**20, "verdict": "fits",
                             "trainable_params": 4 * 7 * rank * 512, "total_params": 3_800_000},
                "devices": [{"device": i, "kind": "cpu", "bytes": per,
                             "capacity_bytes": 2 * 2**30, "verdict": "fits"} for i in range(8)],
                "summary": f"{per / 2**20:.2f} MiB per device of 2.00 GiB (fits)",
                "trainable_params": 4 * 7 * rank * 512, "total_params": 3_800_000,
                "mesh_problems": problems, "ok": not any(p["level"] == "error" for p in problems)}

    def _summary(self, rid: str) -> dict[str, Any]:
        state, rank, scale = RUNS[rid]
        return {"id": rid, "dir": f"/runs/{rid}", "state": state, "step": 40, "total_steps": 40,
                "loss": _metrics(40, scale, rank)[-1]["loss"], "run_id": rid}

    def _record(self, rid: str, metrics: bool = True, events: bool = True) -> dict[str, Any]:
        state, rank, scale = RUNS[rid]
        return {**self._summary(rid), "config": _config(rank, rid.split("-", 2)[2]),
                "checkpoints": [20, 40],
                **({"metrics": _metrics(40, scale, rank)} if metrics else {}),
                **({"events": [{"time": "2026-01-01T12:00:00Z", "kind": "state", "state": "running"},
                           {"time": "2026-01-01T12:00:14Z", "kind": "checkpoint", "step": 40},
                           {"time": "2026-01-01T12:00:15Z", "kind": "state",
                            "state": "completed"}]} if events else {})}

    def saved_compares(self, run_id: str) -> list[dict[str, Any]]:
        """The engine's own reader over the run's folder (``_summary``'s ``dir``)."""
        from adapters_lib.sample.compare_sets import saved_compares

        return saved_compares(self._summary(run_id)["dir"])

    def compare_items(self) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        for word in ("The", " answer", " is", " 5."):
            out.append(("token", {"side": "base", "text": word.lower(), "token": 7}))
            out.append(("token", {"side": "tuned", "text": word, "token": 7}))
        out.append(("done", {"base": "the answer is 5.", "tuned": "The answer is 5.",
                             "tokens": {"base": 4, "tuned": 4}, "seconds": 0.5}))
        return out


@pytest.fixture
def static_client() -> StaticClient:
    return StaticClient()


@pytest.fixture
def anyio_backend() -> str:
    """Pilot tests are ``async``: anyio's pytest plugin runs them on asyncio."""
    return "asyncio"
