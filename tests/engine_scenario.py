"""One pass over every route of the engine API, the same for the real engine and the fake.

``play(client, workdir)`` sends a fixed series of requests (status, catalog, data check,
estimates, a run from queued to completed, its stream, sample, compare, export, a queued run
stopped and deleted, refusals) and returns every answer as JSON data, keyed by name.
``tests/record_engine_replies.py`` plays it against a real engine and writes the answers to
``tests/recorded/engine_replies.json`` (what ``tests/engine_fake.py`` serves);
``tests/test_generation_engine.py`` plays it against that module's real engine (its programs
shared with the module's run) and against the fake, and compares the shapes of the answers (keys
and types: ``compare_answers``); ``tests/test_engine_contract.py`` reads the fake alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapters_lib.jsontypes import to_jsonable
from workbench.engine_wire import EngineRequestError

PROMPT = "add 2 and 3"


def run_config(steps: int, rank: int = 8, name: str = "demo") -> dict[str, Any]:
    """A demo LoRA run that trains fast on CPU (1 device, max_length 64)."""
    every = max(1, steps // 2)
    return {"run": {"name": name}, "data": {"max_length": 64},
            "lora": {"rank": rank, "alpha": 2.0 * rank}, "mesh": {"devices": 1},
            "train": {"steps": steps, "batch_size": 4, "log_every": 1,
                      "checkpoint_every": every, "eval_every": every, "eval_batches": 1,
                      "eval_exact_match": 0, "warmup_steps": min(2, steps)}}


def write_inputs(workdir: Path) -> dict[str, Path]:
    """A chat file with one broken line, and a folder holding an unreadable model."""
    workdir.mkdir(parents=True, exist_ok=True)
    good = {"messages": [{"role": "user", "content": PROMPT},
                         {"role": "assistant", "content": "5"}]}
    chat = workdir / "chat.jsonl"
    chat.write_text(json.dumps(good) + "\n{broken\n" + json.dumps(good) + "\n", encoding="utf-8")
    broken = workdir / "weights" / "gemma-3-broken"
    broken.mkdir(parents=True, exist_ok=True)
    (broken / "config.json").write_text('{"model_type": "gemma3_text", "num_hidden_',
                                        encoding="utf-8")
    (broken / "model.safetensors").write_bytes(b"\0" * 64)
    return {"chat": chat, "weights": workdir / "weights"}


def refusal(call: Callable[[], Any]) -> dict[str, Any]:
    """The engine's refusal of ``call`` as its error body."""
    try:
        call()
    except EngineRequestError as e:
        return {"error": {"message": e.message, "where": e.where, "hint": e.hint,
                          "status": e.status}}
    raise AssertionError("the engine accepted a request it should refuse")


def play(client: Any, workdir: Path, *, runs: tuple[dict[str, Any], ...] | None = None,
         timeout: float = 900.0) -> dict[str, Any]:
    """Every route once (see the module doc); the answers as JSON data."""
    inputs = write_inputs(workdir)
    runs = runs or (run_config(4),)
    out: dict[str, Any] = {}
    out["status"] = client.status(wait=True)
    out["models"] = client.models(folders=[str(inputs["weights"])])
    out["data_check"] = client.data_check(str(inputs["chat"]))
    out["estimate"] = client.estimate(runs[0])
    out["estimate_warning"] = client.estimate(runs[0], overrides=["mesh.devices=4",
                                                                  "mesh.tensor=4"])
    created = [client.create_run(cfg) for cfg in runs]
    for run in created:
        client.wait_run(run.id, timeout=timeout)
    first = created[0].id
    out["runs"] = {run.id: {"detail": client.get_run(run.id),
                            "stream": list(client.stream_run(run.id))}
                   for run in created}
    out["list_runs"] = client.list_runs()
    out["sample"] = list(client.sample(PROMPT, run_id=first, max_new_tokens=8))
    out["sample_base"] = list(client.sample(PROMPT, model="demo", max_new_tokens=8))
    out["compare"] = list(client.compare(PROMPT, first, max_new_tokens=8))
    out["export"] = client.export(first, out=str(workdir / "export"))
    queued = client.create_run({**runs[0], "run": {"name": "stopped"}})  # the programs of the first
    out["created"] = [*created, queued]
    out["stop_run"] = client.stop_run(queued.id)
    client.wait_run(queued.id, timeout=timeout)  # it may have started: it stops at a step
    out["delete_run"] = client.delete_run(queued.id)
    out["errors"] = {
        "no_such_run": refusal(lambda: client.get_run("no-such-run")),
        "bad_config": refusal(lambda: client.create_run(config_toml="[train]\nsteps = 0\n",
                                                        source="run.toml")),
        "unknown_key": refusal(lambda: client.create_run({"trian": {}})),
        "completed_resume": refusal(lambda: client.resume_run(first)),
        "not_running": refusal(lambda: client.stop_run(first)),
    }
    out["status_later"] = client.status()  # after runs: gemma imported (modules_ready)
    return to_jsonable(out)


def compare_answers(real: dict[str, Any], fake: dict[str, Any]) -> list[str]:
    """Where two ``play`` results disagree in shape (``differences``), route by route."""
    out = [f"{k}: only in the real engine's answers" for k in real.keys() - fake.keys()]
    out += [f"{k}: only in the fake's answers" for k in fake.keys() - real.keys()]
    for key in real.keys() & fake.keys():
        a, b = real[key], fake[key]
        if key == "runs":  # keyed by run id: compare one run with one run
            a, b = next(iter(a.values())), next(iter(b.values()))
        if key == "data_check":  # file_formats is keyed by the file's path: compare values
            a, b = ({**x, "file_formats": list((x.get("file_formats") or {}).values())}
                    for x in (a, b))
        out += differences(shape(a), shape(b), key)
    return out


def shape(value: Any) -> Any:
    """The shape of JSON data: objects by key, lists by their first item, scalars by type."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "str"
    return None  # null: matches anything


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where the shapes ``a`` and ``b`` disagree (null and empty lists match anything)."""
    if a is None or b is None or a == [] or b == []:
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}.{k}: only in the first" for k in a.keys() - b.keys()]
        out += [f"{where}.{k}: only in the second" for k in b.keys() - a.keys()]
        for k in a.keys() & b.keys():
            out += differences(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        return differences(a[0], b[0], f"{where}[0]")
    return [] if a == b else [f"{where}: {a} vs {b}"]
