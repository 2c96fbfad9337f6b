"""The command line speaks one dialect: a run is ``RUN`` or ``--run RUN`` everywhere, ``sweep``
owns ``sweep run`` and ``sweep show``, ``--help`` lists the commands in the order of the work,
``train --estimate`` leaves no engine behind, ``data list`` lists the data stores, and
preference and prompt-only files are named alike by ``data list`` and ``data check``. The old
spellings still work, each with one ``note:`` line.

Real CLI invocations (``workbench.cli.main``); the run and sweep commands talk to one real
engine (``--no-warm``: they need no JAX) in a home of its own.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from adapters_lib import runs
from adapters_lib.config import load_config
from workbench.cli import COMMANDS, build_parser, main

RUN_COMMANDS = [["export"], ["eval"], ["compare"], ["sample"], ["runs", "show"], ["runs", "stop"],
                ["runs", "resume"], ["runs", "attach"], ["runs", "delete"]]


def _one_line(err: str, needle: str) -> None:
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _walk(child, (*path, name))


# ----------------------------------------------------------------------- naming a run


@pytest.mark.parametrize("command", RUN_COMMANDS, ids=" ".join)
def test_every_command_that_takes_a_run_says_run_or_dash_dash_run(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([*command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "RUN or --run RUN" in out and "--run RUN" in out


def test_no_command_takes_a_run_another_way():
    """Every parser with a --run flag or a RUN positional has both (``add_run_arg``)."""
    for path, parser in _walk(build_parser()):
        flags = {s for a in parser._actions for s in a.option_strings}
        positional = [a for a in parser._actions if not a.option_strings and a.metavar == "RUN"]
        if "--run" in flags or positional:
            assert "run_dest" in parser._defaults and positional and "--run" in flags, path
            assert list(path) in RUN_COMMANDS, path


@pytest.mark.parametrize("argv", [
    ["export", "a", "--run", "b"],
    ["eval", "a", "--run", "b", "--data", "x.jsonl"],
    ["compare", "a", "--run", "b", "--prompt", "hi"],
    ["sample", "a", "--run", "b", "--prompt", "hi"],
    ["runs", "show", "a", "--run", "b"],
    ["runs", "delete", "--run", "b", "a", "--yes"],
], ids=lambda a: " ".join(a[:2]))
def test_two_different_runs_are_one_line(argv, capsys):
    assert main(argv) == 2
    _one_line(capsys.readouterr().err, "two runs given: a and --run b")


def test_a_run_and_an_adapter_or_neither_are_one_line(capsys):
    assert main(["compare", "r", "--adapter", "d", "--prompt", "hi"]) == 2
    _one_line(capsys.readouterr().err, "compare: a run and --adapter")
    assert main(["compare", "--prompt", "hi"]) == 2
    _one_line(capsys.readouterr().err, "compare: nothing to compare")
    assert main(["sample", "r", "--adapter", "d", "--prompt", "hi"]) == 2
    _one_line(capsys.readouterr().err, "sample: a run and --adapter")
    assert main(["runs", "attach"]) == 2
    _one_line(capsys.readouterr().err, "runs attach: no run given")


@pytest.fixture(scope="module")
def engine_home(engine_factory) -> Path:
    return engine_factory(args=["--no-warm"]).home


@pytest.fixture
def cli_home(engine_home, monkeypatch) -> Path:
    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(engine_home))
    return engine_home


def test_runs_actions_take_the_run_either_way(cli_home, capsys):
    run = runs.create_run(load_config(None, ["run.name=either"]), root=cli_home / "data" / "runs")
    run.set_state("running")  # a run completes by running: the lifecycle has no shortcut
    run.set_state("completed")
    assert main(["runs", "show", run.run_id, "--json"]) == 0
    positional = json.loads(capsys.readouterr().out)
    assert main(["runs", "show", "--run", run.run_id, "--json"]) == 0
    flag = json.loads(capsys.readouterr().out)
    assert positional["id"] == flag["id"] == run.run_id
    assert main(["runs", "show", run.run_id, "--run", run.run_id, "--json"]) == 0  # the same: fine
    assert json.loads(capsys.readouterr().out)["id"] == run.run_id
    assert main(["runs", "delete", "--run", run.run_id, "--yes"]) == 0
    assert capsys.readouterr().out.strip() == f"run {run.run_id} deleted"
    assert not run.path.exists()


# ----------------------------------------------------------------------- sweep


def _sweep_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "s.toml"
    cfg.write_text('[run]\nname = "rk"\n', encoding="utf-8")
    return cfg


def test_sweep_run_queues_and_sweep_config_still_works_with_a_note(tmp_path, capsys):
    cfg = _sweep_config(tmp_path)
    argv = [str(cfg), "--grid", "lora.rank=4,8", "--dry-run", "--json"]
    assert main(["sweep", "run", *argv]) == 0
    out, err = capsys.readouterr()
    assert "note:" not in err
    new = [p["point"] for p in json.loads(out)["points"]]
    assert main(["sweep", *argv]) == 0
    out, err = capsys.readouterr()
    assert [p["point"] for p in json.loads(out)["points"]] == new == [{"lora.rank": 4}, {"lora.rank": 8}]
    assert err == "note: `sweep CONFIG` is now `sweep run CONFIG` (the old spelling still works)\n"


def test_sweep_help_lists_run_and_show_and_runs_help_no_longer_lists_sweep(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    out = capsys.readouterr().out
    assert "    run " in out and "    show " in out
    with pytest.raises(SystemExit):
        main(["runs", "--help"])
    assert "sweep" not in capsys.readouterr().out


def test_sweep_show_and_its_old_spelling_runs_sweep(cli_home, capsys):
    assert main(["sweep", "show", "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert main(["runs", "sweep", "--json"]) == 0
    old_out, old_err = capsys.readouterr()
    assert old_out == out and isinstance(json.loads(out), list)
    assert old_err == "note: `runs sweep` is now `sweep show` (the old spelling still works)\n"
    assert main(["sweep", "show", "sweep-none-such"]) == 2
    _one_line(capsys.readouterr().err, "no sweep 'sweep-none-such'")


# ----------------------------------------------------------------------- help


def test_help_lists_the_commands_in_the_order_of_the_work(capsys):
    assert COMMANDS == ("models", "data", "train", "runs", "compare", "sample", "eval", "sweep",
                        "export", "prepare", "engine", "web", "doctor")
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.splitlines()
              if line.startswith("    ") and line.split()[0] in COMMANDS]
    assert listed == list(COMMANDS)
    for line in out.splitlines():
        if line.startswith("    ") and line.split()[0] in COMMANDS:
            assert len(line.split()) > 1, f"{line.strip()} has no description"
    assert "RUN or --run RUN" in " ".join(out.split())


# ----------------------------------------------------------------------- train --estimate


def test_estimate_without_an_engine_starts_none(tmp_path, monkeypatch, capsys):
    from workbench.client import EngineClient
    from workbench.engine_process import engine_files

    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(tmp_path / "home"))
    assert main(["train", "--estimate", "--json", "--set", "mesh.devices=1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["total_bytes"] > 0 and out["device_count"] == 1
    assert not engine_files()["socket"].exists()
    with EngineClient() as probe:
        assert not probe.ping()


def test_estimate_asks_a_running_engine_and_both_agree(cli_home, tmp_path, monkeypatch, capsys):
    argv = ["train", "--estimate", "--json", "--set", "mesh.devices=1", "--device", "v5e"]
    assert main(argv) == 0  # the engine of cli_home answers
    through_engine = json.loads(capsys.readouterr().out)
    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(tmp_path / "none"))
    assert main(argv) == 0  # no engine there: computed here
    here = json.loads(capsys.readouterr().out)
    assert here == through_engine and here["total_bytes"] > 0


# ----------------------------------------------------------------------- data list / check


@pytest.fixture
def data_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(home))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "tfds"))
    return home


def test_data_list_without_a_folder_lists_the_stores_not_this_folder(data_home, tmp_path,
                                                                      monkeypatch, capsys):
    here = tmp_path / "checkout"
    here.mkdir()
    (here / "constraints.txt").write_text("numpy==2\n")
    (here / "stray.jsonl").write_text('{"text": "x"}\n')
    monkeypatch.chdir(here)
    store = data_home / "data" / "data"
    store.mkdir(parents=True)
    (store / "mine.jsonl").write_text('{"text": "a"}\n{"text": "b"}\n')
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "more.jsonl").write_text('{"prompt": "p", "response": "r"}\n')
    (data_home / "config").mkdir(parents=True)
    (data_home / "config" / "settings.toml").write_text('[data]\nfolders = ["../../extra"]\n')

    assert main(["data", "list", "--json"]) == 0
    out, err = capsys.readouterr()
    names = {e["name"] for e in json.loads(out)["datasets"]}
    assert names == {str(store / "mine.jsonl"), str(extra / "more.jsonl")}
    assert err == ""  # --json: stdout alone
    assert main(["data", "list"]) == 0
    out, err = capsys.readouterr()
    assert "mine.jsonl" in out and "stray" not in out and "constraints" not in out
    assert err.startswith("looked in: HF datasets cache ") and str(store) in err and err.count("\n") == 1
    assert main(["data", "list", str(here), "--json"]) == 0  # a folder: that folder, as before
    names = {e["name"] for e in json.loads(capsys.readouterr().out)["datasets"]}
    assert names == {str(here / "constraints.txt"), str(here / "stray.jsonl")}

    (data_home / "config" / "settings.toml").write_text('[data]\nfolders = "../extra"\n')
    assert main(["data", "list"]) == 2
    _one_line(capsys.readouterr().err, "[data] folders must be a list of paths")


FILES = {  # name: (lines, the format both commands name, data check's exit status)
    "pref.jsonl": (['{"prompt": "Q", "chosen": "good", "rejected": "bad"}'] * 2, "preference", 0),
    "prompts.jsonl": (['{"prompt": "What is 2+2?", "answer": "4"}', '{"prompt": "Say hi."}'],
                      "prompts", 2),
    "chat_prompts.jsonl": (['{"messages": [{"role": "system", "content": "be brief"}, '
                            '{"role": "user", "content": "hello"}]}'] * 2, "prompts", 2),
    "gsm8k.jsonl": (['{"question": "2+2?", "answer": "4"}'] * 2, "qa", 0),  # SFT, as before
    "sft.jsonl": (['{"prompt": "p", "response": "r"}'] * 2, "prompt_response", 0),
}


def test_preference_and_prompt_files_are_named_alike_by_data_list_and_data_check(
        data_home, tmp_path, capsys):
    folder = tmp_path / "files"
    folder.mkdir()
    for name, (lines, _, _) in FILES.items():
        (folder / name).write_text("\n".join(lines) + "\n")
    assert main(["data", "list", str(folder), "--json"]) == 0
    listed = {Path(e["name"]).name: e["format"] for e in json.loads(capsys.readouterr().out)["datasets"]}
    for name, (_, fmt, code) in FILES.items():
        assert listed[name] == fmt, name
        assert main(["data", "check", str(folder / name), "--json"]) == code, name
        out, err = capsys.readouterr()
        report = json.loads(out)
        assert report["format"] == fmt, name
        if fmt == "prompts":
            _one_line(err, "prompt-only records (a prompt, no answer): nothing to train on by SFT")


def test_a_cached_dataset_is_named_by_its_columns():
    from adapters_lib.data.sources.listing import _format_of

    assert _format_of(["prompt", "chosen", "rejected"]) == "preference"
    assert _format_of(["chosen", "rejected"]) == "preference"
    assert _format_of(["prompt", "answer"]) == "prompts"
    assert _format_of(["question", "answer"]) == "qa"
    assert _format_of(["prompt", "completion"]) == "prompt_response"
    assert _format_of(["image", "label"]) == "unknown"
