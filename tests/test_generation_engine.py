"""Sample, compare and export through a real engine process, on the one tuned-model path.

One engine per module (its own home); one short demo run trained by it (10 steps,
checkpoints at 5 and 10): ~60 s on a busy 2-core machine, most of it the engine's JAX
start-up and the run's compile. The same engine plays ``engine_scenario`` for the test fake's
contract (the first test), on the programs the module's tests share.
"""

from __future__ import annotations

import pytest
from fixtures_engine import demo_run_config

from workbench.engine_wire import EngineRequestError


@pytest.fixture(scope="module")
def run_id(engine):
    run = engine.create_run(demo_run_config(steps=10, checkpoint_every=5), source="<test>")
    done = engine.wait_run(run.id, timeout=600)
    assert done.state == "completed", done
    return run.id


def _collect(items):
    texts, done = {}, None
    for item in items:
        if item.type == "token":
            side = item.data.side or "text"
            texts[side] = texts.get(side, "") + item.data.text
        elif item.type == "done":
            done = item.data
        elif item.type == "error":
            raise AssertionError(item.data)
    return texts, done


@pytest.mark.slow  # the one proof that the test fake answers like the real engine
def test_the_fake_answers_every_route_in_the_real_engines_shapes(engine, tmp_path):
    """``engine_scenario.play`` against this module's engine and against ``EngineFake``: the
    same keys and types in every answer (``tests/test_engine_contract.py`` says more). Its run
    has the module run's shapes (``demo_run_config``): the engine's train, eval and generation
    programs serve both, nothing compiles for the scenario alone. It is the module's first test:
    its run compiles the train step, so its first metrics record has ``compile_s`` (as recorded);
    the module's run then takes the programs it compiled."""
    from engine_fake import EngineFake
    from engine_scenario import compare_answers, play

    # 4 steps: eval every 2, so the first metrics record has no eval_loss (as recorded)
    run = {**demo_run_config(steps=4, checkpoint_every=2, eval_every=2), "run": {"name": "demo"}}
    real = play(engine, tmp_path / "real", runs=(run,))
    fake = play(EngineFake(), tmp_path / "fake")
    problems = compare_answers(real, fake)
    assert problems == [], "\n".join(problems[:40])


def test_compare_done_reply_has_per_side_speed_and_stop_reason(engine, run_id):
    texts, done = _collect(engine.compare("Is 7 even or odd?", run_id, max_new_tokens=6))
    assert texts["base"] == done.base and texts["tuned"] == done.tuned
    assert done.step == 10
    for side in ("base", "tuned"):
        assert done.stop_reason[side] in ("stop", "length")
        assert done.tokens[side] >= 1 and (done.tokens_per_s[side] > 0) == (done.tokens[side] > 1)
        assert (done.dtype[side], done.quantize[side]) == ("float32", "none")  # what it ran on


def test_sample_streams_the_runs_tuned_answer_with_its_stop_reason(engine, run_id):
    texts, done = _collect(engine.sample("Is 7 even or odd?", run_id=run_id, max_new_tokens=6, step=5))
    assert texts.get("text", "") == done.text and done.step == 5
    assert done.stop_reason in ("stop", "length") and (done.tokens_per_s > 0) == (done.tokens > 1)


def test_the_token_limit_is_max_new_tokens_and_its_older_name_max_tokens_still_works(engine):
    """One name across the CLI (--max-new-tokens), the API and the TUI; a client that
    sends the API's first name, ``max_tokens``, gets the same answer; both at once is a 400."""
    def sample(**limit):
        body = {"prompt": "The", "model": "demo", "chat": False, **limit}  # the base, raw text: no turn to end
        items = list(engine._stream("POST", "/sample", json_body=body))
        assert items[-1]["type"] == "done", items[-1]
        return items[-1]["data"]

    free = sample()
    assert free["tokens"] > 3  # unlimited by the test: the limit below is what stops it
    new, old = sample(max_new_tokens=3), sample(max_tokens=3)
    assert new["tokens"] == old["tokens"] == 3 and new["stop_reason"] == old["stop_reason"] == "length"
    assert new["text"] == old["text"] and free["text"].startswith(new["text"])
    with pytest.raises(EngineRequestError) as err:
        sample(max_tokens=3, max_new_tokens=4)
    assert err.value.status == 400 and "max_new_tokens" in str(err.value)


def test_export_goes_through_the_one_vocabulary_and_never_overwrites(engine, run_id, tmp_path):
    out = tmp_path / "merged"
    reply = engine.export(run_id, kind="merged", format="hf", out=str(out))
    assert reply.result["format"] == "hf" and (out / "model.safetensors").is_file()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(EngineRequestError) as err:
        engine.export(run_id, kind="adapter", out=str(tmp_path / "mine"))
    assert err.value.status == 400 and "is not empty" in str(err.value)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    with pytest.raises(EngineRequestError, match="disagree"):
        engine.export(run_id, kind="adapter", format="hf", out=str(tmp_path / "x"))


def test_a_three_turn_compare_through_the_api_answers_every_turn_on_each_side(engine, run_id):
    messages = [{"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": "Is 7 even or odd?"},
                {"role": "assistant", "content": "odd"},  # a reference: never fed
                {"role": "user", "content": "And 8?"},
                {"role": "user", "content": "What is 3 plus 4?"}]
    items = list(engine.compare(run_id=run_id, messages=messages, max_new_tokens=5))
    done = items[-1].data
    tokens = [i.data for i in items if i.type == "token"]
    assert {t.turn for t in tokens} == {0, 1, 2} and {t.side for t in tokens} == {"base", "tuned"}
    assert len(done.turns) == 3 and done.turns[0].reference == "odd"
    for t, turn in enumerate(done.turns):
        for side in ("base", "tuned"):
            streamed = "".join(c.text for c in tokens if c.turn == t and c.side == side)
            assert streamed == getattr(turn, side)
            answer = turn.sides[side]
            assert answer.stop_reason in ("stop", "length") and (answer.tokens_per_s > 0) == (answer.tokens > 1)
    assert done.base == done.turns[-1].base and done.stop_reason["tuned"] in ("stop", "length")
    # The next request sends the answers back as history: only the new turn is generated.
    history = [*messages[:2], {"role": "assistant", "base": done.turns[0].base, "tuned": done.turns[0].tuned},
               {"role": "user", "content": "And 8?"}]
    again = list(engine.compare(run_id=run_id, messages=history, max_new_tokens=5))[-1].data
    assert again.turns[0].given and not again.turns[1].given
    assert (again.turns[1].base, again.turns[1].tuned) == (done.turns[1].base, done.turns[1].tuned)


@pytest.mark.parametrize("fields, status, words", [
    ({"prompt": "a", "messages": [{"role": "user", "content": "b"}]}, 400, "prompt or messages, not both"),
    ({"messages": [{"role": "robot", "content": "b"}]}, 400, "unknown role 'robot'"),
    ({"messages": [{"role": "assistant", "content": "b"}]}, 400, "must follow a user message"),
    ({"prompt": "a", "top_p": 0.0}, 400, "top_p"),
    ({"prompt": "a", "generation_dtype": "int3"}, 400, "generation_dtype"),
    ({"prompt": "a", "adapter": "relative/adapter"}, 400, "relative path"),
    ({"prompt": "a", "run_id": "/nonexistent/run"}, 404, "not a run directory"),
])
def test_bad_compare_requests_are_4xx_before_the_stream_opens(engine, run_id, fields, status, words):
    body = {"run_id": run_id, **fields}
    with pytest.raises(EngineRequestError) as err:
        list(engine.compare(**body))
    assert err.value.status == status and words in str(err.value)


TRAIN_LIKE_THE_RUN = {"mesh.devices": 1, "data.max_length": 64, "lora.rank": 4, "train.steps": 3,
                      "train.batch_size": 4, "train.warmup_steps": 2, "train.schedule": "constant",
                      "train.eval_every": 100, "train.eval_batches": 1, "train.eval_exact_match": 0}
"""A foreground ``train`` with the shapes and schedule of the module's run (``demo_run_config``):
the engine reuses the train step it compiled for that run instead of compiling another."""


def _sets(settings: dict) -> list[str]:
    return [x for k, v in settings.items() for x in ("--set", f"{k}={v}")]


@pytest.fixture(scope="module")
def cli_home(engine_process):
    return engine_process.home


def _cli(home, *argv, **env):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "workbench", *argv], capture_output=True, text=True,
                          env={**os.environ, "GEMMA_WORKBENCH_HOME": str(home), **env}, timeout=600)


def test_compare_cli_replays_a_conversation_file_through_the_engine(cli_home, engine, run_id, tmp_path):
    import json

    f = tmp_path / "set.jsonl"
    f.write_text(json.dumps({"prompt": "Is 7 even or odd?"}) + "\n" + json.dumps({"messages": [
        {"role": "user", "content": "Is 9 even or odd?"}, {"role": "assistant", "content": "odd"},
        {"role": "user", "content": "And 10?"}]}) + "\n")
    r = _cli(cli_home, "compare", "--run", run_id, "--prompts", str(f), "--json", "--max-new-tokens", "5")
    assert r.returncode == 0, r.stderr
    plain, conv = json.loads(r.stdout)
    assert plain["prompt"] == "Is 7 even or odd?" and isinstance(plain["base"], str)
    assert len(conv["base"]) == len(conv["tuned"]) == 2 and conv["references"] == ["odd", None]
    saved = r.stderr.strip().splitlines()[-1].removeprefix("saved ")
    records = [json.loads(line) for line in open(saved)]  # saved by the engine, beside the run
    assert records[1]["messages"] == conv["messages"] and records[1]["tuned"] == conv["tuned"]
    stamp = saved.rsplit("/", 1)[-1].removesuffix(".jsonl")  # the TUI reads them through the engine
    assert engine.compares(run_id).compares[:2] == [{**r, "when": stamp} for r in records]
    r = _cli(cli_home, "compare", "--run", run_id, "--prompt", "a", "--prompt", "b", "--json",
             "--max-new-tokens", "3", "--no-save")
    assert r.returncode == 0 and [x["prompt"] for x in json.loads(r.stdout)] == ["a", "b"]


def test_no_computing_command_loads_an_ml_framework_beside_the_engine(cli_home, run_id, tmp_path):
    """sample, compare, export, eval and foreground train run in the engine: the CLI process never
    imports JAX & co (on a TPU VM it could not open the devices anyway); --in-process is
    refused while the engine runs."""
    import json
    import os
    import subprocess
    import sys

    script = f"""
import json, sys
from workbench.cli import main
codes = [
    main(["sample", "--run", {run_id!r}, "--prompt", "Is 3 even or odd?", "--max-new-tokens", "3", "--json"]),
    main(["compare", "--run", {run_id!r}, "--prompt", "Is 3 even or odd?", "--max-new-tokens", "3", "--no-save"]),
    main(["export", "--run", {run_id!r}, "--format", "adapter", "--out", {str(tmp_path / "adapter")!r}]),
    main(["train", "-q", *{_sets(TRAIN_LIKE_THE_RUN)!r}, "--set", 'run.dir="{tmp_path / "runs"}"']),
    main(["eval", "--run", {run_id!r}, "--data", {str(tmp_path / "eval.jsonl")!r}, "--max-length", "64"]),
    main(["sample", "--in-process", "--prompt", "x"]),
]
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & {{"jax", "jaxlib", "gemma", "flax", "orbax", "keras", "tensorflow"}})
print(json.dumps({{"codes": codes, "heavy": heavy}}))
"""
    _eval_file(tmp_path / "eval.jsonl")  # the scorer test_eval_through_the_engine uses: one compile
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900,
                       env={**os.environ, "GEMMA_WORKBENCH_HOME": str(cli_home)})
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["codes"] == [0, 0, 0, 0, 0, 2], r.stderr[-3000:]
    assert got["heavy"] == []
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    assert "error: --in-process: an engine is running" in r.stderr


def _eval_file(path):
    """24 of the demo's held-out chats (a scored batch's shape: the same file, one scorer)."""
    import json

    from adapters_lib.models import demo_tasks

    _, evals = demo_tasks.demo_splits()
    path.write_text("".join(json.dumps({"messages": e["messages"]}) + "\n" for e in evals[:24]))
    return path


def test_eval_through_the_engine_scores_the_runs_checkpoint(engine, run_id, tmp_path):
    f = _eval_file(tmp_path / "eval.jsonl")
    base = engine.eval(str(f), model="demo", max_length=64)
    tuned = engine.eval(str(f), run_id=run_id, step=10, max_length=64)
    assert base.tokens == tuned.tokens > 0 and tuned.step == 10 and tuned.run == run_id
    assert tuned.loss < base.loss  # the run learned the demo tasks these come from
    with pytest.raises(EngineRequestError) as err:
        engine.eval("relative.jsonl", model="demo")
    assert err.value.status == 400 and "absolute" in str(err.value)


def test_an_exported_adapter_samples_and_compares_through_the_engine(cli_home, engine, run_id, tmp_path):
    import json

    out = tmp_path / "adapter"
    r = _cli(cli_home, "export", run_id, "--format", "adapter", "--out", str(out), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["out"] == str(out), r.stderr
    r = _cli(cli_home, "sample", "--adapter", str(out), "--prompt", "Is 7 even or odd?", "--json",
             "--max-new-tokens", "5")
    assert r.returncode == 0, r.stderr
    from_adapter = json.loads(r.stdout)
    _, done = _collect(engine.sample("Is 7 even or odd?", run_id=run_id, max_new_tokens=5))
    assert from_adapter["text"] == done.text  # the adapter is the run's latest checkpoint
    r = _cli(cli_home, "compare", "--adapter", str(out), "--prompt", "Is 7 even or odd?", "--json",
             "--max-new-tokens", "5")
    assert r.returncode == 0 and "saved" not in r.stderr, r.stderr
    assert json.loads(r.stdout)[0]["tuned"] == done.text

