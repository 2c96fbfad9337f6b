"""The task metrics as functions of text, the eval plan, eval.jsonl rows, and the
best-step selection / early stop (item 2). Pure: no model, no JAX."""

from __future__ import annotations

import json
import random

import pytest

from adapters_lib.config import load_config
from adapters_lib.errors import WorkbenchError
from adapters_lib.evals import metrics as m
from adapters_lib.evals import records
from adapters_lib.evals.plan import plan_for
from adapters_lib.evals.selection import Selection, best_step
from adapters_lib.runs import RunDir


def test_metric_names_and_directions_are_the_contract():
    assert tuple(m.METRICS) == ("loss", "perplexity", "exact_match", "contains", "rouge_l",
                                "numeric_match")
    assert [n for n, spec in m.METRICS.items() if not spec.higher_is_better] == ["loss", "perplexity"]
    assert m.improves("loss", 1.0, 2.0) and not m.improves("loss", 2.0, 1.0)
    assert m.improves("rouge_l", 0.6, 0.5) and not m.improves("rouge_l", 0.5, 0.6)
    assert not m.improves("rouge_l", 0.52, 0.5, min_delta=0.05)
    assert not m.improves("loss", float("nan"), 2.0)


def test_exact_match_and_contains_fold_case_space_and_full_stop():
    assert m.exact_match("  Paris. ", "paris") == 1.0
    assert m.exact_match("Paris is it", "paris") == 0.0
    assert m.contains("I think it is Paris.", "paris") == 1.0
    assert m.contains("I think it is Rome.", "paris") == 0.0
    assert m.contains("anything", "") == 0.0  # an empty reference is never "contained"


def test_rouge_l_comes_from_rouge_score_and_reads_unicode_words():
    from rouge_score import rouge_scorer

    pred, ref = "the cat sat on the mat today", "the cat is on the mat"
    lib = rouge_scorer.RougeScorer(["rougeL"]).score(ref, pred)["rougeL"].fmeasure
    assert m.rouge_l(pred, ref) == pytest.approx(lib)
    assert 0.0 < m.rouge_l(pred, ref) < 1.0
    assert m.rouge_l("Привет, мир", "привет мир") == 1.0  # rouge-score's default would give 0
    assert m.rouge_l("completely different", "nothing shared") == 0.0


def test_numeric_match_reads_gsm8k_answers(shared_data):
    rows = [json.loads(line) for line in
            (shared_data / "gsm8k" / "test.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) > 1000
    rng = random.Random(0)
    for row in rows:
        answer = row["answer"]
        final = answer.rsplit("####", 1)[1].strip().replace(",", "")
        assert m.read_number(answer) == m.read_number(final), answer
        # a model answer that only ends with the number, no #### marker
        assert m.numeric_match(f"So the answer is {final}.", answer) == 1.0
        # the reasoning's intermediate numbers never count: the #### number does
        wrong = str(int(float(final)) + rng.randint(1, 9))
        assert m.numeric_match(f"{answer.split('####')[0]}#### {wrong}", answer) == 0.0


@pytest.mark.parametrize("pred, ref, hit", [
    ("#### 1,000", "#### 1000", 1.0),
    ("The total is $18.00", "#### 18", 1.0),
    ("It is -5 degrees", "#### -5", 1.0),
    ("3.5", "#### 3.50", 1.0),
    ("no number here", "#### 7", 0.0),
    ("#### 7", "no number in the reference", 0.0),
    ("8 apples, then 9", "#### 8", 0.0),  # the last number is the answer
])
def test_numeric_match_cases(pred, ref, hit):
    assert m.numeric_match(pred, ref) == hit


def test_scores_are_means_over_answers():
    got = m.score_answers(["exact_match", "contains", "loss"], ["a", "b c", "d"], ["a", "b", "x"])
    assert got == {"exact_match": pytest.approx(1 / 3), "contains": pytest.approx(2 / 3)}
    assert m.score_answers(["exact_match"], [], []) == {}


def test_max_new_tokens_rule():
    assert m.max_new_tokens([3, 10, 4]) == 10 + m.MAX_NEW_TOKENS_MARGIN
    assert m.max_new_tokens([1000]) == m.MAX_NEW_TOKENS_CAP
    assert m.max_new_tokens([3], configured=5) == 5


def test_eval_plan_from_config():
    demo = plan_for(load_config(None))
    assert demo.metrics == ("loss", "perplexity", "exact_match") and demo.examples > 0
    other = plan_for(load_config(None, ["data.path=/nonexistent.jsonl"]))
    assert other.metrics == ("loss", "perplexity") and other.examples == 0
    chosen = plan_for(load_config(None, ['train.eval_metrics=["rouge_l"]', "train.best_metric=numeric_match",
                                         "train.eval_examples=5"]))
    assert chosen.metrics == ("rouge_l", "numeric_match") and chosen.examples == 5
    assert chosen.select == "numeric_match" and chosen.generated == ("rouge_l", "numeric_match")
    patient = plan_for(load_config(None, ["train.early_stop_patience=2", 'train.eval_metrics=["rouge_l"]']))
    assert patient.select == "loss" and "loss" in patient.metrics and patient.patience == 2


@pytest.mark.parametrize("override, message", [
    ('train.eval_metrics=["exact_matc"]', "did you mean 'exact_match'"),
    ("train.eval_metrics=loss,loss", "names a metric twice"),
    ("train.best_metric=eval_loss", "did you mean 'loss'"),
    ("train.early_stop_patience=-1", "early_stop_patience is -1"),
    ("train.eval_examples=0", "eval_examples is 0"),
    ("train.eval_max_new_tokens=100000", "eval_max_new_tokens is 100000"),
    ("sweep.metric=rouge", "did you mean 'rouge_l'"),
    ('sweep.grid={"lora.rnk" = [4]}', "did you mean 'rank'"),
    ('sweep.grid={"lora.rank" = 4}', "non-empty list"),
    ('sweep.grid={"lora.rank" = [4.5]}', "must be an integer"),
    ('sweep.grid={"lora.rank" = [4, 4]}', "names a value twice"),
    ('sweep.grid={"sweep.metric" = ["loss"]}', "cannot sweep its own"),
    ('sweep.grid={"trian.steps" = [4]}', "did you mean 'train'"),
])
def test_eval_and_sweep_keys_are_checked_in_words(override, message):
    with pytest.raises(WorkbenchError) as err:
        load_config(None, [override])
    assert message in str(err.value)
    assert err.value.where.startswith("--set")


def test_eval_keys_in_a_file_cite_the_line(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[train]\nsteps = 4\neval_metrics = ["loss", "rogue_l"]\n', encoding="utf-8")
    with pytest.raises(WorkbenchError) as err:
        load_config(cfg)
    assert err.value.where == f"{cfg}:3 [train] eval_metrics"
    assert "did you mean 'rouge_l'" in str(err.value)


def test_sweep_table_written_as_toml_tables_is_flattened_and_round_trips(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[sweep.grid]\nlora.rank = [4, 8]\n"train.learning_rate" = [1e-4, 3e-4]\n',
                   encoding="utf-8")
    loaded = load_config(cfg)
    assert loaded.sweep.grid == {"lora.rank": [4, 8], "train.learning_rate": [1e-4, 3e-4]}
    again = tmp_path / "again.toml"
    again.write_text(loaded.to_toml(), encoding="utf-8")
    assert load_config(again) == loaded


def test_eval_rows_and_truncation(tmp_path):
    run = RunDir(tmp_path)
    records.append_row(run, 0, "base", {"loss": 2.0, "rouge_l": 0.1, "bad": float("nan")})
    for step, loss in ((10, 1.5), (20, 1.2), (30, 1.4)):
        records.append_row(run, step, "tuned", {"loss": loss, "rouge_l": 0.1 * step / 10})
    rows = records.read_rows(run)
    assert rows[0] == {"step": 0, "phase": "base", "loss": 2.0, "rouge_l": 0.1}  # nan left out
    assert records.final_values(rows) == {"loss": 1.4, "rouge_l": pytest.approx(0.3)}
    records.truncate_after(run, 20)
    assert [(r["step"], r["phase"]) for r in records.read_rows(run)] == [(0, "base"), (10, "tuned"),
                                                                         (20, "tuned")]
    with pytest.raises(ValueError):
        records.make_row(1, "final", {})


def test_selection_and_early_stop():
    sel = Selection("loss", patience=2, min_delta=0.01)
    assert sel.update(10, 2.0) and not sel.should_stop
    assert sel.update(20, 1.5)
    assert not sel.update(30, 1.495)  # within min_delta: no improvement
    assert not sel.should_stop
    assert not sel.update(40, 1.6) and sel.should_stop
    assert sel.to_status() == {"best_metric": "loss", "best_step": 20, "best_value": 1.5,
                               "evals_since_best": 2}
    rows = [{"step": s, "phase": "tuned", "rouge_l": v} for s, v in ((10, 0.2), (20, 0.5), (30, 0.4))]
    replayed = Selection.replay(rows + [{"step": 0, "phase": "base", "rouge_l": 0.9}], "rouge_l", upto=20)
    assert (replayed.best_step, replayed.since_best) == (20, 0)  # base is never a candidate


def test_best_step_picks_among_checkpoints_by_the_run_metric(tmp_path):
    from adapters_lib.runs import create_run

    cfg = load_config(None, ["train.best_metric=rouge_l", f"run.dir={tmp_path}"])
    run = create_run(cfg, root=tmp_path)
    for step in (10, 20, 30):  # complete checkpoint folders (runs.checkpoints' rule)
        (run.checkpoints_dir / str(step) / "params").mkdir(parents=True)
        (run.checkpoints_dir / str(step) / "meta").mkdir()
        (run.checkpoints_dir / str(step) / "meta" / "meta.json").write_text('{"finite": true}')
    for step, v in ((10, 0.2), (15, 0.9), (20, 0.6), (30, 0.5)):  # step 15 has no checkpoint
        records.append_row(run, step, "tuned", {"rouge_l": v, "loss": 1.0 / step})
    assert best_step(run) == (20, "rouge_l", 0.6)
    assert best_step(run, "loss")[0] == 30
    run.write_status("running", best_metric="rouge_l", best_step=10, best_value=0.2)
    assert best_step(run)[0] == 10  # what the run recorded, while that checkpoint exists


def test_a_saved_compare_set_scores_with_the_same_metrics():
    """gen's scoring seam (``sample.compare_sets.score``) with these metrics: every referenced
    turn of a multi-turn record, per side."""
    from adapters_lib.sample import compare_sets

    records = [
        {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "#### 4"},
                      {"role": "user", "content": "and 3+3?"}, {"role": "assistant", "content": "#### 6"}],
         "base": ["5", "it is 6"], "tuned": ["4", "6."], "references": ["#### 4", "#### 6"]},
        {"prompt": "capital of France?", "base": "Rome", "tuned": "Paris", "reference": "Paris"},
    ]
    got = compare_sets.score(records, m.scorers(["numeric_match", "exact_match", "loss"]))
    assert got["base"] == {"n": 3, "numeric_match": pytest.approx(1 / 3), "exact_match": 0.0}
    assert got["tuned"] == {"n": 3, "numeric_match": pytest.approx(2 / 3), "exact_match": pytest.approx(1 / 3)}


def test_the_answered_examples_span_a_split_sorted_by_task():
    """The demo eval split is sorted by task (20 of each): 12 examples answered must cover
    all six tasks, not the first (parity) only."""
    from adapters_lib.evals.task import answerable, spread
    from adapters_lib.models.demo_tasks import TASKS, demo_splits

    evals = answerable(demo_splits()[1])
    assert [ex["task"] for ex in evals[:12]] == ["parity"] * 12  # how the split is laid out
    chosen = spread(evals, 12)
    assert len(chosen) == 12 and {ex["task"] for ex in chosen} == set(TASKS)
    assert chosen == sorted(chosen, key=evals.index)  # in file order, no repeats
    assert len({id(ex) for ex in chosen}) == 12
    assert spread(evals, 10_000) == evals and spread(evals, 0) == []
