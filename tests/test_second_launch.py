"""A second launch costs only what changed: programs kept by shape, the persistent compile
cache serving a new process, the loaded model reused, the schedule's numbers as inputs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

from fixtures_runs import train_demo

REPO = Path(__file__).resolve().parent.parent
SHORT = {"train__steps": 2, "train__eval_every": 2, "train__checkpoint_every": 2}
WITH_EM = {**SHORT, "train__eval_exact_match": 2}


@contextlib.contextmanager
def compile_events() -> Iterator[list[tuple[str, str]]]:
    """``(event, function)`` of every trace, lowering and XLA compile JAX reports meanwhile."""
    from jax import monitoring

    seen: list[tuple[str, str]] = []

    def listener(event: str, duration: float, **kw: object) -> None:
        if event.startswith("/jax/core/compile/"):
            seen.append((event.rsplit("/", 1)[1], str(kw.get("fun_name", ""))))

    monitoring.register_event_duration_secs_listener(listener)
    try:
        yield seen
    finally:
        monitoring.unregister_event_duration_listener(listener)


def test_a_run_changing_only_lr_warmup_and_steps_traces_and_compiles_nothing(tmp_path, monkeypatch):
    """Nothing is traced or compiled (the train and eval steps, the exact-match decoder), the
    weights are not made again, and the base eval at step 0 (loss, perplexity, exact match)
    is read back, not computed: the same numbers land in eval.jsonl and status.json. Other
    eval batches are scored anew."""
    from adapters_lib.evals import base_scores
    from adapters_lib.models import model_cache
    from adapters_lib.train.loop import GemmaTrainer

    monkeypatch.setenv("GEMMA_WORKBENCH_BASE_SCORES", str(tmp_path / "scores"))
    evaluated: list[int] = []
    original = GemmaTrainer.evaluate

    def counted(self):
        evaluated.append(self.reached)
        return original(self)

    monkeypatch.setattr(GemmaTrainer, "evaluate", counted)
    run1, first = train_demo(tmp_path, "first", **WITH_EM)
    assert first.state == "completed" and evaluated == [0, 2]  # the base at step 0, the tuned at 2
    hits, reused = model_cache.stats["hits"], base_scores.stats["reused"]
    evaluated.clear()
    with compile_events() as seen:
        run2, second = train_demo(tmp_path, "second", **{**WITH_EM, "train__steps": 3, "train__eval_every": 3,
                                                         "train__checkpoint_every": 3},
                               train__learning_rate=0.002, train__warmup_steps=1)
    assert second.state == "completed" and len(second.losses) == 3
    compiled = [e for e in seen if e[0] != "jaxpr_trace_duration"]
    assert compiled == [], compiled  # no lowering, no XLA compile (cached or not)
    traced = {f for e, f in seen if e == "jaxpr_trace_duration"}
    assert not traced & {"train_fn", "eval_fn", "_prefill_impl", "_step_impl"}, traced
    assert model_cache.stats["hits"] == hits + 1  # the demo's weights were not made again
    assert second.losses != first.losses  # the new lr reached the kept step: it is an input
    assert evaluated == [3] and base_scores.stats["reused"] == reused + 1  # base not scored again
    assert _base_row(run2.path) == _base_row(run1.path) and "exact_match" in _base_row(run1.path)
    assert second.exact_match_base == first.exact_match_base is not None
    evaluated.clear()
    _, third = train_demo(tmp_path, "more-eval", **WITH_EM, train__eval_batches=2)
    assert third.state == "completed" and evaluated == [0, 2]  # other eval batches: scored


def _base_row(run: Path) -> dict:
    import json

    rows = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
    return next(r for r in rows if r["phase"] == "base")


def test_a_new_process_gets_the_train_and_eval_steps_from_the_persistent_cache(tmp_path):
    """A fresh process's run writes the steps to the session's compile cache; another fresh
    process running the same shapes reads them (JAX's own cache-hit log), compiling neither.
    Both are new processes without the engine's program store: in a test worker an earlier
    test's engine may have stored the same step, and a stored program never reaches the cache."""
    child = textwrap.dedent("""
        import logging, sys
        sys.path.insert(0, sys.argv[4])
        from adapters_lib.import_shields import tf_deferred
        tf_deferred.install()
        import jax
        from adapters_lib.engine import devices
        devices.enable_compile_cache(jax)  # as the engine does at start-up
        lines = []
        class Keep(logging.Handler):
            def emit(self, record):
                lines.append(record.getMessage())
        for name in ("jax._src.compiler", "jax._src.compilation_cache"):
            logger = logging.getLogger(name)
            logger.setLevel(logging.DEBUG)
            logger.addHandler(Keep())
            logger.propagate = False
        from fixtures_runs import train_demo
        import pathlib
        _, result = train_demo(pathlib.Path(sys.argv[1]), sys.argv[2], train__steps=2,
                               train__eval_every=2, train__checkpoint_every=2,
                               train__learning_rate=float(sys.argv[3]))
        print("STATE", result.state)
        for line in lines:
            print("JAX", line)
    """)
    # the program store off: a stored program is never traced, lowered or looked up in JAX's
    # cache (tests/test_program_store.py checks that path); here the cache itself is checked
    env = {**os.environ, "PYTHONPATH": str(REPO), "GEMMA_WORKBENCH_PROGRAMS": ""}
    runs = [subprocess.run([sys.executable, "-c", child, str(tmp_path), name, lr, str(REPO / "tests")],
                           capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
            for name, lr in (("writer", "0.005"), ("reader", "0.001"))]
    assert "STATE completed" in runs[0].stdout, runs[0].stdout[-2000:] + runs[0].stderr[-3000:]
    out = runs[1]
    assert "STATE completed" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]
    jax_lines = [line for line in out.stdout.splitlines() if line.startswith("JAX ")]
    for name in ("jit_train_fn", "jit_eval_fn"):
        assert any(f"Persistent compilation cache hit for '{name}'" in line for line in jax_lines), \
            (name, jax_lines)
        assert not any("MISS" in line and f"'{name}'" in line for line in jax_lines), (name, jax_lines)

