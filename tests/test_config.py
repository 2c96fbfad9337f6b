"""The run config contract: TOML in, validated specs out, mistakes in one line with file:line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from adapters_lib.config import (
    LORA_TARGETS,
    RunConfig,
    config_from_dict,
    load_config,
    parse_override,
)
from adapters_lib.errors import WorkbenchError


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "run.toml"
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return p


def test_no_file_gives_the_demo_defaults():
    cfg = load_config(None)
    assert cfg == RunConfig()
    assert cfg.model.source == "demo" and cfg.data.path == "demo"
    assert cfg.lora.targets == LORA_TARGETS


def test_every_contract_key_loads_from_toml(tmp_path):
    path = _write(tmp_path, """
        [model]
        source = "demo"
        [data]
        path = "demo"
        format = "chat"
        max_length = 96
        eval_fraction = 0.1
        [lora]
        enabled = true
        rank = 4
        alpha = 8
        targets = ["q", "v"]
        dtype = "bfloat16"
        [mesh]
        data = 2
        fsdp = 1
        tensor = -1
        [train]
        steps = 30
        batch_size = 4
        grad_accum = 2
        learning_rate = 3e-4
        schedule = "linear"
        warmup_steps = 3
        weight_decay = 0.01
        clip_norm = 0.5
        seed = 7
        eval_every = 10
        checkpoint_every = 15
        remat = true
        param_dtype = "float32"
        compute_dtype = "bfloat16"
        [run]
        name = "mine"
        dir = "/tmp/elsewhere"
    """)
    cfg = load_config(path)
    assert cfg.data.max_length == 96 and cfg.data.format == "chat"
    assert cfg.lora.targets == ("q", "v") and cfg.lora.scale == 2.0 and cfg.lora.dtype == "bfloat16"
    assert cfg.mesh.shape == (2, 1, -1)
    assert cfg.train.learning_rate == 3e-4 and cfg.train.schedule == "linear" and cfg.train.remat
    assert cfg.train.grad_accum == 2 and cfg.train.compute_dtype == "bfloat16"
    assert cfg.run.name == "mine" and cfg.run.dir == "/tmp/elsewhere"


def test_targets_all_expands_to_every_target():
    cfg = config_from_dict({"lora": {"targets": "all"}})
    assert cfg.lora.targets == LORA_TARGETS


def test_set_overrides_win_over_the_file_and_parse_toml_values(tmp_path):
    path = _write(tmp_path, """
        [train]
        steps = 30
        learning_rate = 1e-3
    """)
    cfg = load_config(path, ["train.steps=5", "lora.targets=[\"q\", \"o\"]", "run.name=quick",
                             "train.remat=true", "data.eval_fraction=0.2"])
    assert cfg.train.steps == 5 and cfg.train.learning_rate == 1e-3
    assert cfg.lora.targets == ("q", "o")
    assert cfg.run.name == "quick"  # a bare word is a string
    assert cfg.train.remat is True and cfg.data.eval_fraction == 0.2


def test_parse_override_splits_section_key_and_value():
    assert parse_override("train.steps=20") == ("train", "steps", 20)
    assert parse_override("model.source = /w/gemma") == ("model", "source", "/w/gemma")
    with pytest.raises(WorkbenchError, match="no '='"):
        parse_override("train.steps")
    with pytest.raises(WorkbenchError, match="not section.key"):
        parse_override("steps=3")


def test_unknown_key_names_the_file_line_and_the_closest_valid_key(tmp_path):
    path = _write(tmp_path, """
        [train]
        steps = 10
        learnig_rate = 1e-3
    """)
    with pytest.raises(WorkbenchError) as err:
        load_config(path)
    text = str(err.value)
    assert f"{path}:4" in text
    assert "train.learnig_rate" in text and "'learning_rate'" in text
    assert "\n" not in text


def test_unknown_section_names_the_closest_section(tmp_path):
    path = _write(tmp_path, """
        [trian]
        steps = 10
    """)
    with pytest.raises(WorkbenchError) as err:
        load_config(path)
    assert f"{path}:2" in str(err.value) and "'train'" in str(err.value)


def test_unknown_key_in_a_set_override_is_reported_as_the_override():
    with pytest.raises(WorkbenchError) as err:
        load_config(None, ["lora.rnak=4"])
    assert "--set lora.rnak" in str(err.value) and "'rank'" in str(err.value)


@pytest.mark.parametrize("override, needle", [
    ("train.steps=\"ten\"", "train.steps must be an integer"),
    ("train.learning_rate=0", "train.learning_rate is 0"),
    ("train.schedule=cosin", "did you mean 'cosine'"),
    ("lora.targets=[\"q\", \"gat\"]", "unknown LoRA target 'gat'"),
    ("lora.rank=0", "lora.rank is 0"),
    ("mesh.tensor=0", "mesh.tensor is 0"),
    ("data.eval_fraction=1.5", "data.eval_fraction is 1.5"),
    ("train.compute_dtype=float16", "train.compute_dtype is 'float16'"),
])
def test_bad_values_fail_with_the_key_and_what_to_do(override, needle):
    with pytest.raises(WorkbenchError) as err:
        load_config(None, [override])
    assert needle in str(err.value)
    assert err.value.hint or " must be " in err.value.message  # says what to do
    assert err.value.where  # and where: the --set item


def test_bad_value_in_a_file_cites_its_line(tmp_path):
    path = _write(tmp_path, """
        [lora]
        rank = 8
        targets = ["q", "vv"]
    """)
    with pytest.raises(WorkbenchError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}:4 [lora] targets: unknown LoRA target 'vv'")


def test_toml_syntax_error_cites_its_line(tmp_path):
    path = _write(tmp_path, """
        [train]
        steps = = 3
    """)
    with pytest.raises(WorkbenchError, match=rf"{path}:3"):
        load_config(path)


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(WorkbenchError, match="not found"):
        load_config(tmp_path / "nope.toml")


def test_resolved_config_round_trips_through_toml(tmp_path):
    cfg = load_config(None, ["train.steps=12", "lora.targets=[\"q\",\"down\"]", "data.field_map={prompt = \"q\"}",
                             "run.name=with \"quotes\""])
    path = tmp_path / "again.toml"
    path.write_text(cfg.to_toml(), encoding="utf-8")
    assert load_config(path) == cfg


def test_print_config_prints_the_resolved_config_that_loads_back(tmp_path, capsys):
    from workbench.cli import main

    src = _write(tmp_path, """
        [train]
        steps = 9
    """)
    assert main(["train", str(src), "--set", "lora.rank=4", "--print-config"]) == 0
    out = capsys.readouterr().out
    printed = tmp_path / "printed.toml"
    printed.write_text(out, encoding="utf-8")
    cfg = load_config(printed)
    assert cfg == load_config(src, ["lora.rank=4"])
    assert cfg.train.steps == 9 and cfg.lora.rank == 4
    assert "[mesh]" in out and "eval_exact_match" in out


def test_cli_reports_a_config_mistake_in_one_line(tmp_path, capsys):
    from workbench.cli import main

    src = _write(tmp_path, """
        [lora]
        targets = ["q", "gate", "upp"]
    """)
    assert main(["train", str(src)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith(f"error: {src}:3 [lora] targets: unknown LoRA target 'upp'")
    assert "'up'" in err
