"""A 2×2 grid sweep through a real engine: ``sweep`` queues four demo runs, each
in its own directory naming its sweep and point; ``sweep show ID`` ranks them by the metric.

Slow (~3–7 min on a busy 2-core machine: an engine start and four short demo runs); it is
the one test of the whole path (CLI → engine queue → trainer hooks → results table).
"""

from __future__ import annotations

import json
import sys
import types

import pytest

from adapters_lib.config import load_config
from workbench.cli import main

pytestmark = pytest.mark.slow

sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

CONFIG = """\
[data]
max_length = 64
[mesh]
devices = 1
[train]
steps = 4
batch_size = 4
warmup_steps = 1
eval_every = 2
eval_batches = 1
checkpoint_every = 2
programs = "family"
rank_bucket = 8
eval_exact_match = 0
eval_metrics = ["loss", "rouge_l"]
eval_examples = 4
eval_max_new_tokens = 4
[run]
name = "grid"
[sweep]
metric = "loss"
"""
"""``train.programs = "family"`` (what a TPU takes by default, ``lora.family``): the grid's ranks
2 and 4 (and the one-point sweep's 8) share one train step, eval step and sampler, padded to
rank 8, where the exact programs (a CPU's default) compile each rank's own: ~10 s of CPU on 2
cores. Every point still trains and is recorded at its own rank (``trainable_params``)."""


def test_a_2x2_sweep_ranks_its_points_and_no_two_share_a_directory(engine_factory, tmp_path,
                                                                   monkeypatch, capsys):
    engine = engine_factory()
    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(engine.home))
    config = tmp_path / "sweep.toml"
    config.write_text(CONFIG, encoding="utf-8")
    assert main(["sweep", "run", str(config), "--grid", "lora.rank=2,4",
                 "--grid", "train.learning_rate=1e-3,5e-3"]) == 0
    out, err = capsys.readouterr()
    sweep_id = out.strip()
    assert sweep_id.startswith("sweep-") and "\n" not in sweep_id and "4 runs queued" in err

    queued = engine.client.get_sweep(sweep_id)

    # the TUI's key-press sweep (Runs, w) is a one-point sweep of the run under the cursor;
    # queued behind the grid's points, it is stopped before it starts: its record is the point
    from workbench.sweep_launch import queue_one_point

    parent = engine.client.get_run(queued.points[0].run_id, metrics=False, events=False)
    one_id, summary = queue_one_point(engine.client, dict(parent.config), {"lora.rank": 8},
                                      name="grid-r8")
    assert engine.client.stop_run(summary.id).state == "stopped"
    one = engine.client.get_sweep(one_id)
    assert [(p.run_id, p.point) for p in one.points] == [(summary.id, {"lora.rank": 8})]
    assert load_config(f"{one.points[0].dir}/config.toml").lora.rank == 8

    for p in queued.points:
        done = engine.client.wait_run(p.run_id, timeout=900)
        assert done.state == "completed", (done, engine.log_text()[-3000:])

    assert main(["sweep", "show", sweep_id, "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["sweep"] == sweep_id and table["metric"] == "loss"
    points = table["points"]
    assert [p["point"] for p in points] == [
        {"lora.rank": r, "train.learning_rate": lr} for r in (2, 4) for lr in (1e-3, 5e-3)]
    for p in points:
        assert p["state"] == "completed" and isinstance(p["loss"], float)
        assert p["best_step"] in (2, 4) and p["wall_s"] > 0 and p["peak_bytes"] > 0
        assert set(p["metrics"]) == {"loss", "rouge_l"}
    best = min(points, key=lambda p: p["loss"])
    assert table["best"]["run_id"] == best["run_id"]
    by_point = {(p["point"]["lora.rank"], p["point"]["train.learning_rate"]): p for p in points}
    assert by_point[(4, 1e-3)]["trainable_params"] == 2 * by_point[(2, 1e-3)]["trainable_params"]

    # axolotl #3079: every point trained in a directory of its own, which names its point
    dirs = {p["dir"] for p in points}
    assert len(dirs) == 4
    for p in points:
        cfg = load_config(f"{p['dir']}/config.toml")
        assert cfg.sweep.id == sweep_id and cfg.sweep.point == p["point"]
        assert (cfg.lora.rank, cfg.train.learning_rate) == (p["point"]["lora.rank"],
                                                           p["point"]["train.learning_rate"])
        rows = [json.loads(line) for line in open(f"{p['dir']}/eval.jsonl", encoding="utf-8")]
        assert [(r["step"], r["phase"]) for r in rows] == [(0, "base"), (2, "tuned"), (4, "tuned")]
        hp = event_accumulator.EventAccumulator(f"{p['dir']}/hparams")
        hp.Reload()
        assert [e.value for e in hp.Scalars("hparam/loss")] == [pytest.approx(p["loss"])]

    # the same engine scores the best point's checkpoints (eval --all-checkpoints, POST /v1/eval/checkpoints)
    assert main(["eval", "--run", best["run_id"], "--all-checkpoints", "--metric", "loss", "--json"]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert [(r["step"], r["phase"]) for r in scored["rows"]] == [(0, "base"), (2, "tuned"), (4, "tuned")]
    assert scored["run"] == best["run_id"] and scored["best_step"] in (2, 4)

    assert main(["sweep", "show", sweep_id[:-2]]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[2].startswith("*") and best["run_id"] in text[2]
    assert text[-1].startswith(f"best: {best['run_id']}")

