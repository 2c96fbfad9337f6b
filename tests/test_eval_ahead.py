"""``eval --run`` after the engine's warm-up: its scorer was compiled ahead at the width the
run's eval file scores at (not only at ``max_length``), so the eval compiles nothing."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_eval_of_a_run_on_its_eval_file_uses_the_scorer_compiled_ahead(tmp_path):
    import json

    import jax
    from fixtures_runs import train_demo

    from adapters_lib.evals import perplexity
    from adapters_lib.memory.estimate import ce_chunk_budget
    from adapters_lib.sample.family import serving
    from adapters_lib.tuned import load_checkpoint

    evals = tmp_path / "eval.jsonl"  # two short conversations: a row far shorter than max_length
    evals.write_text("".join(json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]})
                             + "\n" for q, a in (("Is 4 even?", "Yes."), ("Is 5 even?", "No."))))
    run, result = train_demo(tmp_path, "ahead", train__steps=2, train__checkpoint_every=2, train__eval_every=2,
                             data__path=f'"{REPO / "examples" / "answer-format" / "train.jsonl"}"',
                             data__eval_path=f'"{evals}"', data__max_length=128)
    assert result.state == "completed"
    cfg, loaded, trainable, _ = load_checkpoint(run.path, None)
    widths = perplexity.eval_widths(cfg, loaded.tokenizer)
    assert widths[0] < 128 == widths[-1]  # the eval file's rows are shorter than max_length

    def now(fn):  # the compile thread's submit, run here
        f: Future = Future()
        f.set_result(fn())
        return f

    perplexity.compile_behind(loaded.model, loaded.params, trainable, cfg, now, tokenizer=loaded.tokenizer)
    spec, _ = serving(loaded.model, cfg.lora, trainable, cfg)
    score = perplexity._scorer(loaded.model, spec, ce_chunk_budget(jax.devices()[0]))
    compiled = set(score.compiled)
    traced = score.jitted._cache_size()
    got = perplexity.evaluate(run=str(run.path), data=str(evals))
    assert got.tokens > 0 and set(score.compiled) == compiled and score.jitted._cache_size() == traced
