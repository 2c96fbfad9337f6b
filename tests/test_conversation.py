"""Multi-turn A/B: each side keeps its own history; per-side prompts still decode in one grid."""

from __future__ import annotations

import json

import pytest

from adapters_lib.errors import WorkbenchError


def _settings(**kw):
    from adapters_lib.sample import SamplingSettings

    return SamplingSettings(**{"max_new_tokens": 8, **kw})


@pytest.fixture(scope="module")
def model(demo_lora):
    from adapters_lib.tuned.gemma import GemmaTuned

    loaded, spec, adapters = demo_lora
    return GemmaTuned(loaded, lora=spec, adapters=adapters, source="demo")


def test_per_variant_prompts_give_what_each_side_gives_alone(model):
    """Sampled (the greedy case is the three-turn test below): the same key per row on both
    sides, so each side equals itself alone."""
    s = model.sampler
    settings = _settings(temperature=1.0, top_p=0.9, seed=4)
    base_prompts = ["Is 5 even or odd?", "Reverse the words: apple river stone"]
    tuned_prompts = ["Say the first word: piano river stone", "Is 12 even or odd? Answer in one word."]
    grid = s.generate_grid([], [None, model.adapters], settings, variant_prompts=[base_prompts, tuned_prompts])
    base_alone = s.generate_grid(base_prompts, [None], settings)[0]
    tuned_alone = s.generate_grid(tuned_prompts, [model.adapters], settings)[0]
    assert [c["text"] for c in grid[0]] == [c["text"] for c in base_alone]
    assert [c["text"] for c in grid[1]] == [c["text"] for c in tuned_alone]
    assert all(c["stop_reason"] in ("stop", "length") for row in grid for c in row)


def test_a_three_turn_conversation_keeps_each_sides_own_history(model):
    from adapters_lib.sample import Conversation

    settings = _settings()
    messages = [{"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": "Is 5 even or odd?"},
                {"role": "assistant", "content": "odd"},  # a reference: never fed to a model
                {"role": "user", "content": "And 6?"},
                {"role": "user", "content": "Reverse the words: apple river stone"}]
    [conv] = model.converse([Conversation.from_messages(messages)], settings)
    record = conv.record()
    assert len(record["base"]) == len(record["tuned"]) == 3
    assert record["references"] == ["odd", None, None]
    assert record["messages"] == messages
    # Replaying each side alone, feeding it its own answers, gives the same turns.
    for side, adapters in (("base", None), ("tuned", model.adapters)):
        history = [messages[0]]
        for t, user in enumerate(["Is 5 even or odd?", "And 6?", "Reverse the words: apple river stone"]):
            history.append({"role": "user", "content": user})
            alone = model.sampler.generate_grid([list(history)], [adapters], settings)[0][0]["text"]
            assert alone == record[side][t], (side, t)
            history.append({"role": "assistant", "content": alone})
    assert record["base"] != record["tuned"]  # the histories differ, so per-side prompts were used
    for turn in conv.turns:
        for side in ("base", "tuned"):
            answer = turn.answers[side]
            assert answer.stop_reason in ("stop", "length") and answer.tokens >= 1
            assert (answer.tokens_per_s > 0) == (answer.tokens > 1)  # one token: no decode rate


def test_answered_turns_are_history_and_only_the_new_turn_is_generated(model):
    from adapters_lib.sample import Conversation

    settings = _settings()
    first = model.converse([Conversation.from_messages([{"role": "user", "content": "Is 7 even or odd?"}])],
                           settings)[0].record()
    follow = [{"role": "user", "content": "Is 7 even or odd?"},
              {"role": "assistant", "base": first["base"][0], "tuned": first["tuned"][0]},
              {"role": "user", "content": "And 8?"}]
    [conv] = model.converse([Conversation.from_messages(follow)], settings)
    assert conv.turns[0].given and conv.record()["base"][0] == first["base"][0]
    whole = model.converse([Conversation.from_messages([follow[0], follow[2]])], settings)[0].record()
    assert conv.record()["base"][1] == whole["base"][1]
    assert conv.record()["tuned"][1] == whole["tuned"][1]


@pytest.mark.parametrize("messages, match", [
    ([], "non-empty list"),
    ([{"role": "assistant", "content": "hi"}], "must follow a user message"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
      {"role": "assistant", "content": "c"}], "must follow a user message"),
    ([{"role": "user", "content": "  "}], "non-empty text"),
    ([{"role": "user", "content": "a"}, {"role": "system", "content": "s"}], "only the first message"),
    ([{"role": "robot", "content": "a"}], "unknown role 'robot'"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "base": "x"}], "each side"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "base": "x", "tuned": "y"}], "nothing to generate"),
    ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
      {"role": "assistant", "base": "x", "tuned": "y"}, {"role": "user", "content": "c"}], "must come before"),
])
def test_bad_conversations_are_one_line_errors(messages, match):
    from adapters_lib.sample import Conversation

    with pytest.raises(WorkbenchError, match=match):
        Conversation.from_messages(messages, where="f.jsonl:3")


def test_prompt_files_mix_prompts_and_conversations_and_name_bad_lines(tmp_path):
    from adapters_lib.sample import read_prompts

    f = tmp_path / "set.jsonl"
    f.write_text(json.dumps({"prompt": "Is 5 even or odd?"}) + "\n\n" + json.dumps(
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "ref"},
                      {"role": "user", "content": "b"}]}) + "\n")
    plain, conv = read_prompts(f)
    assert plain.prompt == "Is 5 even or odd?" and plain.prompt_for("tuned", 0) == "Is 5 even or odd?"
    assert [t.user for t in conv.turns] == ["a", "b"] and conv.turns[0].reference == "ref"
    f.write_text(json.dumps({"prompt": "ok"}) + "\n" + json.dumps({"messages": [{"role": "user"}]}) + "\n")
    with pytest.raises(WorkbenchError) as err:
        read_prompts(f)
    assert f"{f}:2" in str(err.value)


def test_a_saved_compare_set_scores_against_its_references():
    from adapters_lib.sample import score

    records = [{"messages": [], "base": ["odd", "x"], "tuned": ["odd", "even"], "references": ["odd", "even"]},
               {"prompt": "p", "base": "a", "tuned": "b"}]  # no reference: not scored
    got = score(records, {"exact": lambda a, r: float(a == r), "length": lambda a, r: float(len(a))})
    assert got["base"] == {"n": 2, "exact": 0.5, "length": 2.0}
    assert got["tuned"]["exact"] == 1.0 and got["tuned"]["n"] == 2


def test_raw_prompts_are_the_gm_tokenizers_ids_and_evaluation_tokenizes_like_sampling(demo_loaded):
    from adapters_lib import evaluate
    from adapters_lib.sample import prompts

    tok = demo_loaded.tokenizer
    text = "Once upon a time\nthere was  a river."
    assert prompts.raw_ids(tok, text) == [int(i) for i in tok.encode(text, add_bos=True)]
    assert evaluate.prompt_ids is prompts.prompt_ids  # one prompt tokenizer
