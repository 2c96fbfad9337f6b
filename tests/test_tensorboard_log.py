"""TensorBoard event files of a run, read back with TensorBoard's own reader."""

from __future__ import annotations

import sys
import types

import pytest

from adapters_lib.config import load_config
from adapters_lib.evals import records
from adapters_lib.runs import create_run
from adapters_lib.tensorboard_log import RunEvents, write_run_events

# TensorBoard's reader on its TF-free file layer (the //tensorboard/compat:no_tensorflow switch):
# the same event parsing, without importing TensorFlow (~20 s on a loaded 2-core machine).
sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _read(path) -> event_accumulator.EventAccumulator:
    acc = event_accumulator.EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def _scalars(acc, tag) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_events_hold_every_metric_the_config_and_the_eval_rows(tmp_path):
    events = RunEvents(tmp_path)
    for step in range(1, 6):
        events.metrics({"step": step, "loss": 5.0 - step / 2, "lr": 1e-3 * step, "tokens_per_s": None,
                        **({"eval_loss": 4.0 - step / 10} if step % 2 == 0 else {})})
    events.eval_row({"step": 0, "phase": "base", "loss": 4.5, "rouge_l": 0.125})
    events.eval_row({"step": 4, "phase": "tuned", "loss": 3.6, "rouge_l": 0.5})
    events.config('[train]\nsteps = 5\n')
    events.close()
    acc = _read(tmp_path)
    assert set(acc.Tags()["scalars"]) == {"loss", "lr", "eval_loss", "base/loss", "base/rouge_l",
                                         "tuned/loss", "tuned/rouge_l"}
    assert _scalars(acc, "loss") == [(s, pytest.approx(5.0 - s / 2)) for s in range(1, 6)]
    assert _scalars(acc, "eval_loss") == [(2, pytest.approx(3.8)), (4, pytest.approx(3.6))]
    assert _scalars(acc, "tuned/rouge_l") == [(4, 0.5)]
    text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "steps = 5" in text


def test_a_resumed_run_supersedes_the_steps_it_reruns(tmp_path, monkeypatch):
    from adapters_lib import tensorboard_log

    monkeypatch.setattr(tensorboard_log, "_WRITERS", iter(range(9, 100)))  # a process's 9th and 10th
    first = RunEvents(tmp_path)
    for step in range(1, 9):
        first.metrics({"step": step, "loss": float(step)})
    first.close()
    resumed = RunEvents(tmp_path, purge_step=5)  # resumed from the checkpoint of step 4
    for step in range(5, 9):
        resumed.metrics({"step": step, "loss": 100.0 + step})
    resumed.close()
    assert _scalars(_read(tmp_path), "loss") == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 105.0),
                                                  (6, 106.0), (7, 107.0), (8, 108.0)]


def test_a_sweep_run_written_afterwards_has_its_point_as_hparams(tmp_path):
    cfg = load_config(None, ['sweep.id="sweep-a-0000"', 'sweep.point={"lora.rank" = 4, '
                             '"lora.targets" = ["q", "v"]}'])
    run = create_run(cfg, root=tmp_path)
    for step, loss in ((1, 3.0), (2, 2.5), (3, 2.25)):
        run.append_metrics({"step": step, "loss": loss, "grad_norm": 1.0})
    records.append_row(run, 3, "tuned", {"loss": 2.0, "perplexity": 7.39})
    write_run_events(run.path)
    acc = _read(run.path)
    assert _scalars(acc, "loss") == [(s, m["loss"]) for s, m in
                                     ((m["step"], m) for m in run.metrics())]
    assert _scalars(acc, "tuned/perplexity") == [(3, pytest.approx(7.39))]
    hp = _read(run.path / "hparams")
    assert _scalars(hp, "hparam/loss") == [(0, 2.0)]
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = hp.summary_metadata["_hparams_/session_start_info"].plugin_data.content
    info = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    assert info.hparams["lora.rank"].number_value == 4
    assert info.hparams["lora.targets"].string_value == "q v"
