"""Memory fit before launch: the chip table, the refusal of a step that exceeds the device, and
the alternatives it offers (each estimated to fit)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from adapters_lib import memory
from adapters_lib.config import config_from_dict
from adapters_lib.memory import advice as memory_advice
from adapters_lib.memory import device as device_memory


@pytest.mark.parametrize("name, chip", [
    ("v5e", "TPU v5e"), ("TPU v5 lite", "TPU v5e"), ("tpu-v5e", "TPU v5e"), ("v6e", "TPU v6e"),
    ("TPU v6 lite", "TPU v6e"), ("TPU v4", "TPU v4"), ("v5p", "TPU v5p"), ("h100", "NVIDIA H100"),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100"), ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB"),
])
def test_a_chip_is_found_by_its_short_name_or_the_device_kind_jax_reports(name, chip):
    assert device_memory.find_chip(name).name == chip


def test_the_v5e_holds_what_jax_reported_on_the_chip_and_gpus_jax_s_share():
    assert device_memory.find_chip("v5e").usable_bytes == 16_909_336_064  # "exceeds 15.75G"
    assert memory.fmt_bytes(device_memory.find_chip("v5e").usable_bytes) == "15.75 GiB"
    h100 = device_memory.find_chip("h100")
    assert h100.usable_bytes == int(0.75 * 80 * 2**30)
    stated = device_memory.find_chip("Tesla V100-SXM2-32GB")  # memory in its name
    assert stated.hbm_bytes == 32 * 2**30
    assert device_memory.find_chip("v9z") is None and device_memory.find_chip("cpu") is None


class _DeviceWithoutStats:
    """A device whose backend reports no memory_stats (as some TPU runtimes and remote clients)."""

    platform = "tpu"
    device_kind = "TPU v5 lite"

    def memory_stats(self):
        return None


def test_device_memory_falls_back_to_the_table_where_the_backend_gives_no_limit():
    assert device_memory.device_memory_bytes(_DeviceWithoutStats()) == 16_909_336_064


def _cfg(batch=8, seq=2048, remat=False, accum=1):
    return config_from_dict({
        "mesh": {"data": 1, "fsdp": 1, "tensor": 1, "devices": 1},
        "lora": {"rank": 16, "alpha": 32.0, "targets": ["all"], "dtype": "float32"},
        "train": {"batch_size": batch, "remat": remat, "grad_accum": accum,
                  "compute_dtype": "bfloat16", "param_dtype": "bfloat16"},
        "data": {"max_length": seq}})


def _v5e_kw():
    chip = device_memory.find_chip("v5e")
    return {"device_count": 1, "platform": "tpu",
            "ce_chunk_bytes": memory.ce_chunk_budget_for("tpu", chip.usable_bytes)}, chip


def test_gemma3_1b_batch_8_by_2048_is_refused_on_a_v5e_with_alternatives_that_fit():
    from gemma import gm

    config = gm.nn.Gemma3_1B.config
    kw, chip = _v5e_kw()
    cfg = _cfg()
    est = memory.estimate_run(cfg, config, device_bytes=chip.usable_bytes, **kw)
    assert est.verdict == "exceeds"  # XLA on the chip: "HLO temporaries 25.56G exceeds 15.75G"
    problem = memory_advice.fit_problem(cfg, config, est, device_name=chip.name, **kw)
    assert problem["level"] == "error" and problem["where"] == "[train] batch_size"
    assert "15.75 GiB of TPU v5e" in problem["message"]
    settings = re.findall(r"\[train\] (\w+) = (\w+)", problem["hint"])
    assert {k for k, _ in settings} >= {"batch_size", "remat"}, problem["hint"]
    for key, value in settings:  # each alternative, estimated again on its own, fits
        value = value == "true" if value in ("true", "false") else int(value)
        changed = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, **{key: value}))
        if key == "grad_accum" and "remat = true" in problem["hint"].split(f"grad_accum = {value}")[1][:20]:
            changed = dataclasses.replace(changed, train=dataclasses.replace(changed.train, remat=True))
        again = memory.estimate_run(changed, config, device_bytes=chip.usable_bytes, **kw)
        assert again.verdict in ("fits", "tight"), (key, value, again.summary())
        assert changed.train.batch_size <= 8


def test_a_step_that_fits_has_no_problem_and_nothing_fits_says_what_else_to_do():
    from gemma import gm

    kw, chip = _v5e_kw()
    small = _cfg(batch=1, seq=512, remat=True)
    est = memory.estimate_run(small, gm.nn.Gemma3_1B.config, device_bytes=chip.usable_bytes, **kw)
    assert est.verdict == "fits"
    assert memory_advice.fit_problem(small, gm.nn.Gemma3_1B.config, est, **kw) is None
    huge = _cfg(batch=1, seq=32768, remat=True)
    config = gm.nn.Gemma3_27B.config
    est = memory.estimate_run(huge, config, device_bytes=chip.usable_bytes, **kw)
    problem = memory_advice.fit_problem(huge, config, est, device_name=chip.name, **kw)
    assert problem and problem["hint"].startswith("nothing at this length fits")


def test_the_engine_estimate_plans_for_a_named_chip_and_refuses_what_exceeds_it():
    from fixtures_engine import demo_run_config

    from adapters_lib.engine import compute
    from adapters_lib.engine.errors import EngineError

    cfg = config_from_dict(demo_run_config())
    here = [{"id": 0, "kind": "cpu"}]
    planned = compute.estimate(cfg, here, "v5e")
    assert planned["ok"] and planned["device_bytes"] == 16_909_336_064
    assert planned["devices"][0]["kind"] == "TPU v5e" and "planned for TPU v5e" in planned["summary"]
    big = config_from_dict(demo_run_config(), overrides=["train.batch_size=64", "data.max_length=8192"])
    refused = compute.estimate(big, here, "v5e")
    assert not refused["ok"]
    problem = next(p for p in refused["mesh_problems"] if p["level"] == "error")
    assert problem["where"] == "[train] batch_size" and "would fit" in problem["hint"]
    with pytest.raises(EngineError, match="unknown device 'v9z'"):
        compute.estimate(cfg, here, "v9z")
