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
    """Two conversations, rows of one batch as the two prompts above (the same programs at the
    first turn); two tokens an answer keep every turn's history in the 64-token prompt bucket."""
    from adapters_lib.sample import Conversation

    settings = _settings(max_new_tokens=2)
    messages = [{"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": "Is 5 even or odd?"},
                {"role": "assistant", "content": "odd"},  # a reference: never fed to a model
                {"role": "user", "content": "And 6?"},
                {"role": "user", "content": "Reverse: apple river"}]
    other = [{"role": "user", "content": "Is 7 even or odd?"}, {"role": "user", "content": "And 8?"},
             {"role": "user", "content": "And 9?"}]
    convs = model.converse([Conversation.from_messages(messages), Conversation.from_messages(other)], settings)
    record, record_other = (c.record() for c in convs)
    assert len(record["base"]) == len(record["tuned"]) == len(record_other["tuned"]) == 3
    assert record["references"] == ["odd", None, None]
    assert record["messages"] == messages and record_other["messages"] == other
    # Replaying each side alone, feeding it its own answers, gives the same turns.
    users = [[m["content"] for m in conv if m["role"] == "user"] for conv in (messages, other)]
    for side, adapters in (("base", None), ("tuned", model.adapters)):
        histories = [[messages[0]], []]
        for t in range(3):
            for history, user in zip(histories, users, strict=True):
                history.append({"role": "user", "content": user[t]})
            alone = model.sampler.generate_grid([list(h) for h in histories], [adapters], settings)[0]
            assert [a["text"] for a in alone] == [record[side][t], record_other[side][t]], (side, t)
            for history, a in zip(histories, alone, strict=True):
                history.append({"role": "assistant", "content": a["text"]})
    assert record["base"] != record["tuned"]  # the histories differ, so per-side prompts were used
    for turn in (turn for conv in convs for turn in conv.turns):
        for side in ("base", "tuned"):
            answer = turn.answers[side]
            assert answer.stop_reason in ("stop", "length") and answer.tokens >= 1
            assert (answer.tokens_per_s > 0) == (answer.tokens > 1)  # one token: no decode rate


def test_answered_turns_are_history_and_only_the_new_turn_is_generated(model):
    """Two conversations a batch and two tokens an answer, as the test above: its programs."""
    from adapters_lib.sample import Conversation

    settings = _settings(max_new_tokens=2)
    asks = ["Is 7 even or odd?", "Is 5 even or odd?"]
    firsts = [c.record() for c in model.converse(
        [Conversation.from_messages([{"role": "user", "content": ask}]) for ask in asks], settings)]
    follows = [[{"role": "user", "content": ask},
                {"role": "assistant", "base": first["base"][0], "tuned": first["tuned"][0]},
                {"role": "user", "content": "And 8?"}] for ask, first in zip(asks, firsts, strict=True)]
    convs = model.converse([Conversation.from_messages(follow) for follow in follows], settings)
    wholes = model.converse([Conversation.from_messages([follow[0], follow[2]]) for follow in follows], settings)
    for conv, whole, first in zip(convs, wholes, firsts, strict=True):
        assert conv.turns[0].given and conv.record()["base"][0] == first["base"][0]
        assert conv.record()["base"][1] == whole.record()["base"][1]
        assert conv.record()["tuned"][1] == whole.record()["tuned"][1]


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
