"""``gemma-workbench train`` from the command line: failures end with one line saying why."""

from __future__ import annotations

import pytest
from fixtures_runs import demo_overrides

from adapters_lib.runs import RunDir, list_runs
from workbench.cli import main


def _sets(items: list[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        out += ["--set", item]
    return out


def _last_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def test_a_mesh_that_does_not_fit_the_devices_fails_in_one_line(tmp_path, capsys):
    code = main(["train", "-q"] + _sets(demo_overrides(mesh__devices=0, mesh__data=3, mesh__tensor=2,
                                                       run__dir=f'"{tmp_path}"')))
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    line = _last_line(err)
    assert line.startswith("error: [mesh]") and "3×1×2 = 6, but there are 8 devices" in line
    assert list_runs(tmp_path) == []  # refused before a run directory is made


def test_a_batch_the_mesh_cannot_split_fails_in_one_line(tmp_path, capsys):
    code = main(["train", "-q"] + _sets(demo_overrides(mesh__devices=0, mesh__data=8, mesh__tensor=1,
                                                       train__batch_size=4, run__dir=f'"{tmp_path}"')))
    line = _last_line(capsys.readouterr().err)
    assert code == 2
    assert line.startswith("error: [mesh]") and "batch_size=4 is not divisible by data×fsdp" in line


def test_a_bad_target_name_fails_in_one_line(capsys):
    code = main(["train", "--set", 'lora.targets=["q", "gatee"]'])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "unknown LoRA target 'gatee'" in err and "did you mean 'gate'" in err


def test_a_nan_producing_learning_rate_fails_in_one_line_and_marks_the_run(tmp_path, capsys):
    code = main(["train"] + _sets(demo_overrides(train__learning_rate="1e30", train__steps=6,
                                                 train__schedule="constant", train__eval_every=100,
                                                 run__dir=f'"{tmp_path}"')))
    captured = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in captured.err
    line = _last_line(captured.err)
    assert line.startswith("error: [train] learning_rate: loss became")
    assert "at step 2; lower train.learning_rate (now 1e+30)" in line
    run = RunDir(captured.out.strip().splitlines()[0])  # the run dir is printed first
    assert run.path.parent == tmp_path
    status = run.status()
    assert status["state"] == "failed" and "loss became" in status["message"]
    assert [m["step"] for m in run.metrics()] == [1]


@pytest.mark.slow
def test_the_demo_config_trains_on_8_devices_and_beats_the_base_exact_match(capsys):
    """The issue's check: examples/demo.toml on a data=2 × tensor=4 mesh, LoRA rank 8."""
    from pathlib import Path

    demo = Path(__file__).resolve().parent.parent / "examples" / "demo.toml"
    code = main(["train", str(demo)])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    run = RunDir(captured.out.strip().splitlines()[0])
    cfg = run.config()
    assert (cfg.mesh.data, cfg.mesh.tensor, cfg.lora.rank) == (2, 4, 8)
    status = run.status()
    assert status["state"] == "completed"
    losses = [m["loss"] for m in run.metrics()]
    assert sum(losses[-3:]) / 3 < losses[0] - 0.5  # the first line is step 1, the base model
    assert status["exact_match_tuned"] > status["exact_match_base"]
