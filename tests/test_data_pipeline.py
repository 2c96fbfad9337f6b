"""The training pipeline: the batch contract, determinism and resume, eval split, packing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fixtures_data import QA, jsonl

from adapters_lib.config import DataSpec
from adapters_lib.data import attention_mask, build_pipeline


@pytest.fixture(scope="module")
def demo_pipe(codec):
    return build_pipeline(DataSpec(), codec, batch_size=8, seed=3)


def _same(a, b):
    return all(np.array_equal(a[k], b[k]) for k in a)


def test_batch_follows_the_contract(demo_pipe, codec):
    b = demo_pipe.train_batch(0)
    assert {k: (v.dtype.name, v.shape) for k, v in b.items()} == {
        "tokens": ("int32", (8, 128)), "targets": ("int32", (8, 128)), "loss_mask": ("float32", (8, 128)),
        "positions": ("int32", (8, 128)), "segment_ids": ("int32", (8, 128))}
    seg, tok, tgt, pos, mask = (b[k] for k in ("segment_ids", "tokens", "targets", "positions", "loss_mask"))
    for r in range(8):
        ids = [s for s in np.unique(seg[r]) if s]
        assert ids == list(range(1, len(ids) + 1)) and len(ids) > 1  # packed, numbered 1..n
        for s in ids:
            where = np.flatnonzero(seg[r] == s)
            assert np.array_equal(where, np.arange(where[0], where[-1] + 1))
            assert np.array_equal(pos[r, where], np.arange(len(where)))
            assert tok[r, where[0]] == codec.bos
            assert np.array_equal(tgt[r, where[:-1]], tok[r, where[1:]])  # next token, same example
            assert tgt[r, where[-1]] == 0 and mask[r, where[-1]] == 0
        assert (tok[r, seg[r] == 0] == 0).all() and (mask[r, seg[r] == 0] == 0).all()
    assert set(np.unique(mask)) == {0.0, 1.0} and (tgt[mask == 1] != 0).all()
    m = attention_mask(seg)
    assert not m[0, seg[0] == 2][:, seg[0] == 1].any()  # no attention across examples


def test_batches_are_a_pure_function_of_seed_and_step(demo_pipe, codec):
    fresh = build_pipeline(DataSpec(), codec, batch_size=8, seed=3)
    late = [fresh.train_batch(s) for s in (500, 7, 0)]  # any order, e.g. a resume at step 500
    assert _same(late[0], demo_pipe.train_batch(500))
    assert _same(late[1], demo_pipe.train_batch(7))
    assert _same(late[2], demo_pipe.train_batch(0))
    other = build_pipeline(DataSpec(), codec, batch_size=8, seed=4)
    assert not _same(other.train_batch(0), demo_pipe.train_batch(0))


def test_each_epoch_visits_every_sequence_once_in_a_new_order(demo_pipe):
    n = len(demo_pipe.train)
    e0, e1 = demo_pipe._layout(0), demo_pipe._layout(1)
    flat0, flat1 = [i for row in e0 for i in row], [i for row in e1 for i in row]
    assert sorted(flat0) == list(range(n)) == sorted(flat1)
    assert flat0 != flat1
    step = -(-len(e0) // 8)  # the first step that starts in epoch 1
    assert demo_pipe.locate(step) == (1, step * 8 - len(e0))
    assert demo_pipe.locate(step - 1)[0] == 0


def test_eval_split_is_a_seeded_fraction_disjoint_from_train(write, codec):
    p = write("train.jsonl", jsonl([{"question": f"q{i}?", "answer": str(i)} for i in range(40)]))
    spec = DataSpec(path=str(p), eval_fraction=0.25)
    a = build_pipeline(spec, codec, batch_size=4, seed=0)
    b = build_pipeline(spec, codec, batch_size=4, seed=0)
    c = build_pipeline(spec, codec, batch_size=4, seed=1)
    assert len(a.eval_examples) == 10 and a.report.split["train_examples"] == 30
    assert a.eval_examples == b.eval_examples != c.eval_examples
    assert set(a.train.example.tolist()).isdisjoint(a.eval.example.tolist())
    assert a.eval_examples[0]["source"].startswith(f"{p}:")
    batches = a.eval_batches(10)
    assert len(batches) == a.eval_batch_count >= 1 and batches[-1]["tokens"].shape == (4, 128)


def test_a_home_relative_data_path_is_read_from_home(write, codec, monkeypatch):
    p = write("home/qa.jsonl", jsonl([{"question": f"q{i}?", "answer": str(i)} for i in range(8)]))
    monkeypatch.setenv("HOME", str(p.parent))
    pipe = build_pipeline(DataSpec(path="~/qa.jsonl", eval_fraction=0.25), codec, batch_size=2, seed=0)
    assert pipe.report.split["train_examples"] == 6


@pytest.mark.parametrize("seed", [-1, 1.5, "0"])
def test_a_bad_seed_is_one_line_naming_the_seed(demo_pipe, codec, seed):
    from adapters_lib.errors import WorkbenchError

    with pytest.raises(WorkbenchError, match=r"seed .*whole number >= 0") as err:
        build_pipeline(DataSpec(), codec, batch_size=8, seed=seed)
    assert err.value.where == "[train] seed" and "\n" not in str(err.value)


def test_a_few_eval_batches_score_the_whole_split_not_its_first_tasks(write, codec):
    """A file sorted by task: two eval batches of a four-batch split hold examples of every
    task, spread over the split, the same at every call."""
    tasks = ["add", "parity", "larger", "reverse"]
    records = [{"question": f"{t} {i}?", "answer": f"{t}{i}"} for t in tasks for i in range(40)]
    p = write("sorted.jsonl", jsonl(records))
    pipe = build_pipeline(DataSpec(path=str(p), eval_fraction=0.2, packing=False), codec,
                          batch_size=8, seed=0)
    assert pipe.eval_batch_count == 4
    two = pipe.eval_batches(2)
    assert len(two) == 2 and all(b["tokens"].shape == (8, 128) for b in two)
    text = " ".join(codec.decode([int(t) for t in b["tokens"][r] if t > 0])
                    for b in two for r in range(8))
    assert all(t in text for t in tasks), text[:400]
    assert [b["tokens"].tolist() for b in pipe.eval_batches(2)] == [b["tokens"].tolist() for b in two]
    every = pipe.eval_batches(10)
    assert len(every) == 4  # asking for more than the split: all of it, in file order


def test_gsm8k_qa_pipeline_packs_densely(shared_data, codec):
    spec = DataSpec(path=str(shared_data / "gsm8k" / "test.jsonl"), max_length=512, eval_fraction=0.05)
    pipe = build_pipeline(spec, codec, batch_size=8, seed=0)
    assert pipe.report.format == "qa" and pipe.report.records == 1319
    assert len(pipe.eval_examples) == 66
    fill = np.mean([(pipe.train_batch(s)["segment_ids"] > 0).mean() for s in range(10)])
    assert fill > 0.8  # demo tokenizer: GSM8K examples are ~300 of 512 tokens, hard to pair
    unpacked = build_pipeline(dataclasses.replace(spec, packing=False), codec, batch_size=8, seed=0)
    assert (unpacked.train_batch(0)["segment_ids"].max(axis=1) == 1).all()


def test_tinyshakespeare_text_is_chunked_and_trained_on_every_token(shared_data, codec, tmp_path):
    text = (shared_data / "tinyshakespeare.txt").read_text()[:60_000]
    p = tmp_path / "shakespeare.txt"
    p.write_text(text)
    pipe = build_pipeline(DataSpec(path=str(p), max_length=128), codec, batch_size=4, seed=0)
    assert pipe.report.format == "text" and pipe.report.chunked > 0 and pipe.report.truncated == 0
    b = pipe.train_batch(0)
    inside = (b["segment_ids"] > 0) & (b["targets"] > 0)
    assert (b["loss_mask"][inside] == 1).all()
    assert pipe.eval_examples == []  # text has no answers to match


def _per_example_loss(forward, params, batch):
    """Mean next-token cross-entropy of each packed example, keyed by its tokens."""
    nll = np.asarray(forward(params, batch["tokens"], batch["positions"],
                             attention_mask(batch["segment_ids"]), batch["targets"]))
    out = {}
    for r, row in enumerate(batch["segment_ids"]):
        for s in set(row.tolist()) - {0}:
            sel = row == s
            key = tuple(batch["tokens"][r, sel].tolist())
            w = batch["loss_mask"][r, sel]
            out[key] = float((nll[r, sel] * w).sum() / w.sum())
    return out


def test_packed_batches_give_the_same_per_example_loss_as_unpacked(write, codec):
    from adapters_lib.models.demo import demo_model, demo_params

    records = QA[:6] + [{"question": "Reverse the words: " + "apple river stone " * k, "answer": "stone " * k}
                        for k in (3, 6, 9)]  # some longer than the 32-token sliding window
    p = write("train.jsonl", jsonl(records))
    spec = DataSpec(path=str(p), max_length=128, eval_fraction=0.0)
    packed = build_pipeline(spec, codec, batch_size=9, seed=0).train_batch(0)
    unpacked = build_pipeline(dataclasses.replace(spec, packing=False), codec, batch_size=9, seed=0).train_batch(0)
    assert (packed["segment_ids"].max(axis=1) > 1).any()
    import jax

    model = demo_model()

    @jax.jit
    def forward(params, tokens, positions, mask, targets):
        logits = model.apply({"params": params}, tokens, positions=positions, attention_mask=mask).logits
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jax.numpy.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]

    params = demo_params()
    a, b = _per_example_loss(forward, params, packed), _per_example_loss(forward, params, unpacked)
    assert len(a) == len(b) == 9 and a.keys() == b.keys()
    for key in a:
        assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-5)


def test_gemma_tokenizer_gives_the_same_batches_as_its_sentencepiece_model(codec):
    from adapters_lib.models.demo import demo_tokenizer

    gm_pipe = build_pipeline(DataSpec(), demo_tokenizer(), batch_size=4, seed=0)
    sp_pipe = build_pipeline(DataSpec(), codec, batch_size=4, seed=0)
    assert _same(gm_pipe.train_batch(5), sp_pipe.train_batch(5))
    assert gm_pipe.report.tokenizer.startswith("Gemma3Tokenizer")
