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


def test_train_gives_a_real_model_its_defaults_where_the_config_is_silent_and_says_whence(tmp_path, capsys):
    """The CLI applies the model's defaults as Configure does (``model_defaults``): a real
    model without lr/rank/steps gets a real model's, a key the file or --set names keeps its
    value, the demo keeps its own; --print-config says each value's origin and loads back."""
    from adapters_lib.config.model_defaults import REAL
    from workbench.cli import main

    src = _write(tmp_path, """
        [model]
        source = "starter:gemma-3-270m"
        [lora]
        rank = 4
    """)
    assert main(["train", str(src), "--set", "train.steps=9", "--print-config"]) == 0
    out = capsys.readouterr().out
    printed = tmp_path / "printed.toml"
    printed.write_text(out, encoding="utf-8")
    cfg = load_config(printed)
    assert (cfg.lora.rank, cfg.train.steps) == (4, 9)  # named: kept
    assert (cfg.train.learning_rate, cfg.lora.alpha, cfg.train.compute_dtype) == (2e-4, 32.0, "bfloat16")
    assert cfg.train.batch_size == REAL.values["train.batch_size"] != RunConfig().train.batch_size
    lines = {line.split(" = ")[0]: line for line in out.splitlines() if " = " in line}
    assert lines["rank"].endswith(f"# from {src}") and lines["steps"].endswith("# --set")
    assert lines["learning_rate"] == "learning_rate = 0.0002  # real-model default"
    assert lines["clip_norm"].endswith("# built-in default")

    assert main(["train", "--set", "train.steps=9", "--print-config"]) == 0  # the demo: its own
    demo = capsys.readouterr().out
    assert "learning_rate = 0.001  # demo default" in demo and "rank = 8  # demo default" in demo


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


# --------------------------------------------------------------------------- input, paths


@pytest.mark.parametrize("override, needle", [
    ("train.learning_rate=nan", "train.learning_rate is nan; it must be a finite number"),
    ("lora.alpha=inf", "lora.alpha is inf"),
    ("train.clip_norm=nan", "train.clip_norm is nan"),
    ("train.weight_decay=-inf", "train.weight_decay is -inf"),
    ("data.eval_fraction=nan", "data.eval_fraction is nan"),
    ("train.seed=-1", "train.seed is -1; use an integer from 0 to 4294967295"),
    ("train.seed=4294967296", "train.seed is 4294967296"),
    ("train.eval_exact_match=-2", "train.eval_exact_match is -2"),
    ("train.eval_batches=0", "train.eval_batches is 0"),
    ("train.steps=3000000000", "train.steps is 3000000000; use at most 2147483647"),
    ("train.steps=99999999999999999999999", "more than 64 bits"),
    ("train.steps=10.0", "write it without a decimal point"),
    ("data.max_length=9999999999", "data.max_length is 9999999999"),
    ("model.source=' demo'", "model.source ' demo' starts or ends with a space; did you mean 'demo'?"),
    ("data.path='notes.jsonl '", "starts or ends with a space"),
    ('run.name="a\\u0007b"', "run.name holds a control character"),
    ('lora.targets=["q", "q"]', "names a target twice"),
    ("data.path=''", "data.path is empty"),
])
def test_non_finite_and_out_of_range_values_are_refused_at_parse_time(override, needle):
    with pytest.raises(WorkbenchError) as err:
        load_config(None, [override])
    assert needle in str(err.value)
    assert str(err.value).startswith("--set " + override.split("=")[0])


def test_a_non_finite_value_in_a_file_cites_its_line_and_key(tmp_path):
    path = _write(tmp_path, """
        [train]
        steps = 3
        learning_rate = nan
    """)
    with pytest.raises(WorkbenchError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}:4 [train] learning_rate: train.learning_rate is nan")


def test_relative_paths_resolve_against_the_config_files_folder(tmp_path, monkeypatch):
    folder = tmp_path / "project" / "configs"
    folder.mkdir(parents=True)
    (folder / "weights").mkdir()
    path = folder / "run.toml"
    path.write_text(textwrap.dedent("""
        [model]
        source = "weights"
        tokenizer = "../tok/tokenizer.model"
        [data]
        path = "data/train.jsonl"
        eval_path = "~/eval.jsonl"
        [run]
        dir = "./runs"
    """), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the working directory plays no part
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = load_config(path)
    assert cfg.model.source == str(folder / "weights")
    assert cfg.model.tokenizer == str(tmp_path / "project" / "tok" / "tokenizer.model")
    assert cfg.data.path == str(folder / "data" / "train.jsonl")
    assert cfg.data.eval_path == str(tmp_path / "home" / "eval.jsonl")
    assert cfg.run.dir == str(folder / "runs")
    # the same file named by a relative path from another folder: same config
    monkeypatch.chdir(tmp_path)
    assert load_config(Path("project/configs/run.toml")) == cfg
    # what a run records (config.toml) is absolute, so it loads back the same from anywhere
    again = tmp_path / "elsewhere" / "config.toml"
    again.write_text(cfg.to_toml(), encoding="utf-8")
    assert load_config(again) == cfg


def test_set_paths_resolve_against_the_current_directory(tmp_path, monkeypatch):
    path = _write(tmp_path, """
        [data]
        path = "in-file.jsonl"
    """)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    cfg = load_config(path, ["data.eval_path=ev.jsonl"])
    assert cfg.data.path == str(tmp_path / "in-file.jsonl")
    assert cfg.data.eval_path == str(cwd / "ev.jsonl")


def test_catalog_ids_and_the_demo_are_not_paths(tmp_path):
    path = _write(tmp_path, """
        [model]
        source = "gemma-3-270m"
        [data]
        path = "demo"
    """)
    cfg = load_config(path)
    assert cfg.model.source == "gemma-3-270m" and cfg.data.path == "demo"
    (tmp_path / "gemma-3-270m").mkdir()  # a folder of that name beside the config: the path wins
    assert load_config(path).model.source == str(tmp_path / "gemma-3-270m")
    cfg = config_from_dict({"model": {"source": "local:~/w"}}, base_dir=tmp_path)
    assert cfg.model.source == "local:" + str(Path("~/w").expanduser())


def test_a_relative_path_without_a_known_folder_is_refused(tmp_path):
    """The engine parses configs sent by clients: its own directory means nothing to them."""
    with pytest.raises(WorkbenchError) as err:
        config_from_dict({"data": {"path": "train.jsonl"}}, source="create_run request")
    assert "data.path 'train.jsonl' is a relative path" in str(err.value)
    assert str(err.value).startswith("create_run request [data] path")
    absolute = config_from_dict({"data": {"path": str(tmp_path / "t.jsonl")}})
    assert absolute.data.path == str(tmp_path / "t.jsonl")


def _random_text(rng, *, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, n)))


AWKWARD = "abc XYZ_-./\\\"'=#[]{}é漢\U0001f600\u00a0\u2028"


def _random_config(rng, tmp_path: Path) -> dict:
    """A config drawn at random from the space of valid values (awkward strings included)."""
    cfg: dict = {"model": {}, "data": {}, "lora": {}, "mesh": {}, "train": {}, "run": {}}
    if rng.random() < 0.5:
        cfg["model"]["tokenizer"] = str(tmp_path / _random_text(rng, alphabet="abc é漢_-", n=8).strip() or "t")
    cfg["data"]["path"] = rng.choice(["demo", str(tmp_path / "d ata" / "x.jsonl")])
    cfg["data"]["format"] = rng.choice(["auto", "text", "prompt_response", "alpaca", "chat", "qa"])
    cfg["data"]["max_length"] = rng.randint(8, 1 << 20)
    cfg["data"]["eval_fraction"] = rng.choice([0.0, 0.5, rng.random() * 0.99, 1e-300])
    cfg["data"]["packing"] = rng.random() < 0.5
    cfg["data"]["field_map"] = {
        _random_text(rng, alphabet=AWKWARD, n=6).strip() or "k": _random_text(rng, alphabet=AWKWARD, n=6).strip() or "v"
        for _ in range(rng.randint(0, 3))}
    k = rng.randint(1, len(LORA_TARGETS))
    cfg["lora"] = {"enabled": rng.random() < 0.8, "rank": rng.randint(1, 1 << 16),
                   "alpha": rng.choice([1e-12, 0.5, 16.0, 1e300, float(rng.randint(1, 10**6))]),
                   "targets": rng.sample(LORA_TARGETS, k), "dtype": "float32"}
    axis = rng.choice(["data", "fsdp", "tensor"])
    cfg["mesh"] = {a: (-1 if a == axis else rng.randint(1, 64)) for a in ("data", "fsdp", "tensor")}
    cfg["mesh"]["devices"] = rng.randint(0, 4096)
    cfg["train"] = {"steps": rng.randint(1, 2**31 - 1), "seed": rng.randint(0, 2**32 - 1),
                    "learning_rate": rng.choice([1e-300, 3e-4, 1e30, rng.random() + 1e-9]),
                    "warmup_steps": rng.randint(0, 10**6), "clip_norm": rng.random() * 10,
                    "weight_decay": rng.choice([0.0, 0.01, 1e-320]),
                    "schedule": rng.choice(["constant", "linear", "cosine"]),
                    "eval_exact_match": rng.randint(-1, 1000), "remat": rng.random() < 0.5}
    cfg["run"] = {"name": _random_text(rng, alphabet=AWKWARD, n=20).strip() or "n",
                  "dir": str(tmp_path / _random_text(rng, alphabet="ab é漢[]#=\"'", n=10).strip())}
    return cfg


def test_every_accepted_config_round_trips_through_its_toml(tmp_path):
    """Property: for random valid configs, to_toml() → load_config gives the same config."""
    import random

    rng = random.Random(17)
    checked = 0
    for _ in range(300):
        raw = _random_config(rng, tmp_path)
        try:
            cfg = config_from_dict(raw, base_dir=tmp_path)
        except WorkbenchError:  # a random draw may be refused (e.g. a name made of spaces): fine
            continue
        text = cfg.to_toml()
        path = tmp_path / "again.toml"
        path.write_text(text, encoding="utf-8")
        assert load_config(path) == cfg, text
        checked += 1
    assert checked > 250  # the draws are mostly valid: the property was really exercised
