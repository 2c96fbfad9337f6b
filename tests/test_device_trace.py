"""``engine.device_trace``: the runs ``GEMMA_WORKBENCH_TRACE_RUNS`` names are traced, and the
summary beside each says which thread made each long call (a compile job by its label)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from adapters_lib.engine import device_trace


@pytest.mark.parametrize(("text", "runs"), [("", set()), ("2", {2}), ("2, 3,", {2, 3}), ("0", set()),
                                            ("two", set()), ("-1,2", set())])
def test_the_runs_named(text, runs, caplog):
    with caplog.at_level(logging.WARNING):
        assert device_trace.chosen(text) == runs
    assert bool(caplog.records) == (text not in ("", "2", "2, 3,"))  # a bad value says so


def test_a_chosen_run_is_traced_and_its_long_calls_named_by_thread(tmp_path, monkeypatch):
    import jax
    import jax.numpy as jnp

    monkeypatch.setattr(device_trace, "_count", 0)
    monkeypatch.setenv(device_trace.ENV, "2")
    with device_trace.maybe_trace(tmp_path):  # run 1: not chosen
        pass
    assert not (tmp_path / "run-1").exists()

    def compile_job() -> None:
        with jax.profiler.TraceAnnotation("compile job train_step (neighbour lengths)"):
            time.sleep(0.15)  # a call that waits, as one in the runtime would

    with device_trace.maybe_trace(tmp_path):  # run 2
        jax.jit(lambda x: jnp.tanh(x @ x))(jnp.ones((64, 64))).block_until_ready()
        other = threading.Thread(target=compile_job)
        other.start()
        other.join()
    summary = (tmp_path / "run-2" / "summary.txt").read_text()
    named = dict(line.strip().split(": ", 1) for line in summary.splitlines() if line.startswith("   thread "))
    ours = ["compile job train_step (neighbour lengths)", "run 2 (the device thread)"]
    assert set(ours) <= set(named.values()), named  # (a compile thread of another test may show too)
    job_tid = next(k.split()[1] for k, v in named.items() if v == ours[0])
    waits = [line for line in summary.splitlines() if f"[{job_tid}]: compile job" in line]
    assert waits and float(waits[0].split()[1]) >= 140  # its 0.15 s, in ms, on its own thread


def test_a_trace_that_cannot_start_leaves_the_run_alone(tmp_path, monkeypatch, caplog):
    """Another trace running (a user's own ``jax.profiler``): the run goes on untraced."""
    import jax

    monkeypatch.setattr(device_trace, "_count", 0)
    monkeypatch.setenv(device_trace.ENV, "1")
    jax.profiler.start_trace(str(tmp_path / "theirs"))
    try:
        ran = False
        with caplog.at_level(logging.WARNING), device_trace.maybe_trace(tmp_path / "ours"):
            ran = True
    finally:
        jax.profiler.stop_trace()
    assert ran and "device trace of run 1 not started" in caplog.text
    assert not (tmp_path / "ours" / "run-1" / "summary.txt").exists()
