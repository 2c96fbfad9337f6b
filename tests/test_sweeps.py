"""Grid sweeps without training: the grid, the points' overrides, every point in a
directory of its own (axolotl #3079), the results table from run directories, and the
``sweep`` command's checks (``--dry-run``: nothing is queued)."""

from __future__ import annotations

import json
import threading

import pytest

from adapters_lib.config import load_config
from adapters_lib.errors import WorkbenchError
from adapters_lib.evals import records
from adapters_lib.runs import create_run, list_runs
from adapters_lib.sweeps import grid as g
from adapters_lib.sweeps import results
from workbench.cli import main


def test_grid_args_parse_toml_values_and_keep_bracketed_commas():
    assert g.parse_grid_arg("lora.rank=4,8,16") == ("lora.rank", [4, 8, 16])
    assert g.parse_grid_arg("train.learning_rate=1e-4, 3e-4") == ("train.learning_rate", [1e-4, 3e-4])
    assert g.parse_grid_arg('lora.targets=["q","v"],"q v o"') == ("lora.targets", [["q", "v"], "q v o"])
    assert g.parse_grid_arg("train.schedule=cosine,linear") == ("train.schedule", ["cosine", "linear"])
    for bad, words in (("lora.rank", "no '='"), ("rank=4", "not section.key"), ("lora.rank=4,,8", "empty value")):
        with pytest.raises(WorkbenchError, match=words):
            g.parse_grid_arg(bad)


def test_points_are_the_product_first_key_slowest_and_flags_win_over_the_table():
    grid = g.merge_grids({"lora": {"rank": [1, 2]}, "train.steps": [5]},
                         [("train.learning_rate", [0.1, 0.2]), ("train.steps", [7])])
    points = g.expand(grid)
    assert [p.values for p in points] == [
        {"lora.rank": 1, "train.steps": 7, "train.learning_rate": 0.1},
        {"lora.rank": 1, "train.steps": 7, "train.learning_rate": 0.2},
        {"lora.rank": 2, "train.steps": 7, "train.learning_rate": 0.1},
        {"lora.rank": 2, "train.steps": 7, "train.learning_rate": 0.2},
    ]
    assert [p.index for p in points] == [1, 2, 3, 4]
    with pytest.raises(WorkbenchError, match="no grid"):
        g.expand({})
    with pytest.raises(WorkbenchError, match="points"):
        g.expand({"train.seed": list(range(g.MAX_POINTS + 1))})


def test_point_overrides_make_a_config_that_names_its_sweep_and_point():
    point = g.Point(3, {"lora.rank": 16, "train.learning_rate": 3e-4, "lora.targets": ["q", "v"]})
    grid = {"lora.rank": [4, 16], "train.learning_rate": [1e-4, 3e-4], "lora.targets": [["q", "v"]]}
    sets = g.point_overrides("sweep-x-1a2b", point, run_name="rank", grid=grid, metric="rouge_l")
    cfg = load_config(None, sets)
    assert (cfg.lora.rank, cfg.train.learning_rate, cfg.lora.targets) == (16, 3e-4, ("q", "v"))
    assert cfg.sweep.id == "sweep-x-1a2b" and cfg.sweep.point == point.values
    assert cfg.sweep.grid == grid and cfg.sweep.metric == "rouge_l" and cfg.run.name == "rank-p3"
    assert load_config(None, [f"sweep.point={g.format_value(point.values)}"]).sweep.point == point.values


def test_sweep_ids_are_unique_within_a_second():
    ids = {g.new_sweep_id("same", now=1_800_000_000) for _ in range(50)}
    assert len(ids) > 40 and all(i.startswith("sweep-") and "-same-" in i for i in ids)


def test_points_made_at_once_never_share_a_run_directory(tmp_path):
    """axolotl #3079: sweep runs overwrote each other's output dir. Eight points with the same
    name, made in the same second from eight threads, get eight directories."""
    cfg = load_config(None, ["run.name=clash"])
    made, errors = [], []

    def make(i: int) -> None:
        try:
            point = cfg.sweep.__class__(id="sw", point={"train.seed": i})
            made.append(create_run(cfg.replace(sweep=point), root=tmp_path, now=1_800_000_000))
        except Exception as e:  # noqa: BLE001 - the test reports it
            errors.append(e)

    threads = [threading.Thread(target=make, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len({r.path for r in made}) == 8
    points = sorted(load_config(r.config_path).sweep.point["train.seed"] for r in made)
    assert points == list(range(8))  # each directory holds its own point's config


def _fake_point(root, sweep_id, point, losses, state="completed", **status):
    sets = [f"sweep.id={g.format_value(sweep_id)}", f"sweep.point={g.format_value(point)}",
            'sweep.grid={"lora.rank" = [4, 8], "train.seed" = [1, 2]}', "sweep.metric=loss"]
    run = create_run(load_config(None, [*sets, *(f"{k}={v}" for k, v in point.items())]), root=root)
    records.append_row(run, 0, "base", {"loss": 3.0})
    for step, loss in losses:
        records.append_row(run, step, "tuned", {"loss": loss, "perplexity": 2.0 ** loss})
    run.write_status("running", step=losses[-1][0] if losses else 0)
    run.write_status(state, **status)
    return run


def test_results_table_names_the_best_point_by_the_metric(tmp_path):
    sid = "sweep-20260101-000000-t-abcd"
    _fake_point(tmp_path, sid, {"lora.rank": 8, "train.seed": 2}, [(5, 1.9), (10, 1.7)])
    best = _fake_point(tmp_path, sid, {"lora.rank": 4, "train.seed": 2}, [(5, 1.2), (10, 1.4)],
                       peak_bytes=123, trainable_params=4096, wall_s=9.5)
    _fake_point(tmp_path, sid, {"lora.rank": 4, "train.seed": 1}, [(5, 1.6), (10, 1.5)])
    _fake_point(tmp_path, sid, {"lora.rank": 8, "train.seed": 1}, [], state="failed")
    _fake_point(tmp_path, "sweep-other-0000", {"lora.rank": 4, "train.seed": 1}, [(5, 0.1)])
    out = results.summary(list_runs(tmp_path), "sweep-2026")  # a unique prefix
    assert out["sweep"] == sid and out["metric"] == "loss"
    assert [p["point"] for p in out["points"]] == [  # grid order
        {"lora.rank": 4, "train.seed": 1}, {"lora.rank": 4, "train.seed": 2},
        {"lora.rank": 8, "train.seed": 1}, {"lora.rank": 8, "train.seed": 2}]
    assert out["best"]["run_id"] == best.run_id  # final loss 1.4 beats 1.5 and 1.7
    entry = out["best"]
    assert entry["loss"] == 1.4 and entry["best_step"] == 5 and entry["best_value"] == 1.2
    assert (entry["peak_bytes"], entry["trainable_params"], entry["wall_s"]) == (123, 4096, 9.5)
    assert entry["metrics"] == {"loss": 1.4, "perplexity": pytest.approx(2.0 ** 1.4)}
    failed = out["points"][2]
    assert failed["state"] == "failed" and failed["loss"] is None
    assert results.summary(list_runs(tmp_path), sid, metric="perplexity")["best"]["run_id"] == best.run_id
    with pytest.raises(results.NoSuchSweep):
        results.summary(list_runs(tmp_path), "sweep-nope")
    listed = {s["sweep"]: s for s in results.list_sweeps(list_runs(tmp_path))}
    assert listed[sid]["points"] == 4 and listed[sid]["states"] == {"completed": 3, "failed": 1}


def test_sweep_dry_run_checks_every_point_before_queueing(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text('[run]\nname = "rk"\n[sweep.grid]\nlora.rank = [4, 8]\n', encoding="utf-8")
    assert main(["sweep", "run", str(cfg), "--grid", "train.learning_rate=1e-4,3e-4", "--dry-run",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["queued"] is False and out["metric"] == "loss" and out["sweep"].startswith("sweep-")
    assert [p["point"] for p in out["points"]][1] == {"lora.rank": 4, "train.learning_rate": 3e-4}
    assert main(["sweep", "run", str(cfg), "--grid", "lora.rank=4,0", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--grid lora.rank" in err and "point 2 (lora.rank=0)" in err
    cfg.write_text('[sweep.grid]\n"lora.rank" = [4, -1]\n', encoding="utf-8")
    assert main(["sweep", "run", str(cfg), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{cfg} [sweep] grid" in err and "point 2" in err
    assert main(["sweep", "run", str(cfg), "--grid", "lora.rank=4", "--metric", "rogue_l", "--dry-run"]) == 2
    assert "did you mean 'rouge_l'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def sweep_engine(engine_factory):
    """A real engine (no JAX needed: the sweep routes read run directories)."""
    return engine_factory(args=["--no-warm"])


def test_sweep_show_reads_the_table_through_the_engine(sweep_engine, monkeypatch, capsys):
    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(sweep_engine.home))
    root = sweep_engine.home / "data" / "runs"
    sid = "sweep-20260102-000000-cli-0f0f"
    low = _fake_point(root, sid, {"lora.rank": 4, "train.seed": 1}, [(5, 1.1)], peak_bytes=2_500_000)
    _fake_point(root, sid, {"lora.rank": 8, "train.seed": 1}, [(5, 1.3)])
    reply = sweep_engine.client.get_sweep("sweep-20260102")
    assert reply.sweep == sid and reply.best.run_id == low.run_id and reply.best.value("loss") == 1.1
    assert [p.point["lora.rank"] for p in reply.points] == [4, 8]

    assert main(["sweep", "show", sid, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"sweep", "metric", "best", "points"} and data["metric"] == "loss"
    for p in data["points"]:
        assert set(p) >= {"point", "run_id", "state", "loss", "best_step", "wall_s", "peak_bytes",
                          "trainable_params"}
    assert data["best"]["run_id"] == low.run_id

    assert main(["sweep", "show", sid]) == 0
    table = capsys.readouterr().out.splitlines()
    assert "ranked by loss (lower is better)" in table[0]
    assert table[2].startswith("*") and low.run_id in table[2] and "2.5 MB" in table[2]
    assert table[-1].startswith(f"best: {low.run_id} (lora.rank=4 train.seed=1)")

    assert main(["sweep", "show"]) == 0
    assert sid in capsys.readouterr().out
    assert main(["sweep", "show", "sweep-none-such"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no sweep 'sweep-none-such'" in err
    assert main(["sweep", "show", sid, "--metric", "rogue_l"]) == 2
    assert "did you mean 'rouge_l'" in capsys.readouterr().err


def test_a_point_the_engine_would_refuse_queues_no_point(sweep_engine, monkeypatch, capsys, tmp_path):
    """Point 2's base cannot be held as asked (the engine's estimate says so): the sweep stops
    before it queues point 1, not after (it left runs queued, then said which to stop)."""
    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(sweep_engine.home))
    before = {r.id for r in sweep_engine.client.list_runs()}
    cfg = tmp_path / "q.toml"
    cfg.write_text("[train]\nsteps = 2\n", encoding="utf-8")
    assert main(["sweep", "run", str(cfg), "--grid", "model.quantize=int8,gguf"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: [model] quantize: point 2 "), err
    assert "needs a GGUF base" in err and "nothing was queued" in err
    assert {r.id for r in sweep_engine.client.list_runs()} == before
