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

import pytest
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


def _counting_evals(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The steps at which runs evaluate from now on (``GemmaTrainer.evaluate`` counted)."""
    from adapters_lib.train.loop import GemmaTrainer

    evaluated: list[int] = []
    original = GemmaTrainer.evaluate

    def counted(self):
        evaluated.append(self.reached)
        return original(self)

    monkeypatch.setattr(GemmaTrainer, "evaluate", counted)
    return evaluated


@pytest.fixture(scope="module")
def first_launch(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The first launch, in this process: a short demo run with exact match, its train and
    eval steps traced, lowered and compiled anew (no program kept from an earlier test) with
    the program store off, as in any process but an engine (an in-process engine may have
    turned it on in this worker): XLA compiled them, or the session's compile cache served
    them, which holds them then for a new process (the last test). Its base scores go to a
    folder of its own, where the next runs read them."""
    from adapters_lib import program_store
    from adapters_lib.train import step_programs

    root = tmp_path_factory.mktemp("first-launch")
    kept_store = program_store.folder()
    program_store.disable()
    step_programs.forget()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("GEMMA_WORKBENCH_BASE_SCORES", str(root / "scores"))
            evaluated = _counting_evals(mp)
            run, result = train_demo(root, "first", **WITH_EM)
    finally:
        if kept_store is not None:
            program_store.enable(kept_store)
    return {"root": root, "run": run, "result": result, "evaluated": evaluated}


def test_a_run_changing_only_lr_warmup_and_steps_traces_and_compiles_nothing(first_launch, monkeypatch):
    """After the first launch, nothing is traced or compiled (the train and eval steps, the
    exact-match decoder), the weights are not made again, and the base eval at step 0 (loss,
    perplexity, exact match) is read back, not computed: the same numbers land in eval.jsonl and
    status.json. Other eval batches are scored anew."""
    from adapters_lib.evals import base_scores
    from adapters_lib.models import model_cache

    tmp_path, run1, first = first_launch["root"], first_launch["run"], first_launch["result"]
    assert first.state == "completed" and first_launch["evaluated"] == [0, 2]  # the base at 0, the tuned at 2
    monkeypatch.setenv("GEMMA_WORKBENCH_BASE_SCORES", str(tmp_path / "scores"))
    evaluated = _counting_evals(monkeypatch)
    hits, reused = model_cache.stats["hits"], base_scores.stats["reused"]
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


def test_a_new_process_gets_the_train_and_eval_steps_from_the_persistent_cache(first_launch, tmp_path):
    """The first launch left its steps in the session's compile cache; a new process running
    the same shapes reads them (JAX's own cache-hit log), compiling neither. It runs without
    the engine's program store, as the first launch did: a stored program never reaches JAX's
    cache (an earlier test's engine may have stored the same step)."""
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
    out = subprocess.run([sys.executable, "-c", child, str(tmp_path), "reader", "0.001", str(REPO / "tests")],
                         capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert "STATE completed" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]
    jax_lines = [line for line in out.stdout.splitlines() if line.startswith("JAX ")]
    for name in ("jit_train_fn", "jit_eval_fn"):
        assert any(f"Persistent compilation cache hit for '{name}'" in line for line in jax_lines), \
            (name, jax_lines)
        assert not any("MISS" in line and f"'{name}'" in line for line in jax_lines), (name, jax_lines)

