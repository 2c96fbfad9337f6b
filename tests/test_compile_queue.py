"""The one compile queue (``compile_queue``): labelled jobs with states, listeners, a newer request
dropping an older one's queued jobs; and compiling ahead (``plan.compile_ahead``) leaves a run's
first steps nothing to compile in the foreground (``forbid_compile``)."""

from __future__ import annotations

import functools
import threading
import time

import pytest
from forbid_compile import ForegroundCompile, forbid_compiles

from adapters_lib.train import compile_queue, step_programs


def _until(condition, timeout: float = 30.0) -> None:
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.01)


def test_a_newer_request_drops_the_older_ones_queued_jobs_and_the_listener_sees_every_state():
    q = compile_queue.CompileQueue()  # a queue of its own: the engine's may be busy
    seen: list[tuple[str, str]] = []
    stop = q.listen(lambda job: seen.append((job["what"], job["state"])))
    gate = threading.Event()
    first = q.request("next run", "rank 8")
    with q.for_request(first):
        under_way = q.submit(gate.wait, 30, what="train step")
        waiting = q.submit(time.sleep, 0, what="eval step")
    _until(under_way.running)
    second = q.request("next run", "rank 16")  # Configure's edit: the older queued job goes
    assert first.superseded and not second.superseded
    assert waiting.cancelled() and not under_way.cancelled()  # under way: it finishes and is kept
    with q.for_request(first):  # a late submit of the superseded request is dropped at once
        assert q.submit(time.sleep, 0, what="late").cancelled()
    with q.for_request(second):
        q.adopt(under_way, "train step")  # needed again: listed under the newer request
        fresh = q.submit(time.sleep, 0, what="eval step")
    gate.set()
    assert under_way.result(30) is True and fresh.result(30) is None
    _until(lambda: [j["state"] for j in q.jobs() if j["what"] == "eval step"][-1] == "ready")
    stop()
    assert ("train step", "queued") in seen and ("train step", "compiling") in seen
    assert ("train step", "ready") in seen and ("eval step", "dropped") in seen
    jobs = {(j["what"], j["request"]): j for j in q.jobs()}
    assert jobs[("train step", second.id)]["state"] == "ready"  # adopted
    assert jobs[("train step", second.id)]["seconds"] >= 0
    assert jobs[("eval step", first.id)]["state"] == "dropped"
    assert jobs[("eval step", first.id)]["seconds"] is None  # never started
    assert jobs[("eval step", second.id)]["about"] == "rank 16"
    assert set(jobs[("eval step", second.id)]) >= {"id", "what", "about", "purpose", "request", "where",
                                                   "state", "queued_at", "started_at", "ended_at",
                                                   "seconds", "error"}


def test_a_hold_keeps_the_warm_ups_jobs_back_and_lets_the_runs_own_go_first():
    """A run's set-up holds the Compare warm-up's jobs (purpose "compare"): the run's own
    jobs queued after them start first; released, the held ones run, oldest first."""
    q = compile_queue.CompileQueue()
    order: list[str] = []
    release = q.hold(("compare",), "a run sets up")
    warm = [q.submit(order.append, f"sampler {i}", what="sampler", purpose="compare") for i in range(2)]
    dropped = q.submit(order.append, "dropped", what="sampler", purpose="compare")
    assert dropped.cancel()  # a held job can still be dropped
    own = q.submit(order.append, "eval step", what="eval step")
    assert own.result(30) is None
    time.sleep(0.2)
    assert order == ["eval step"] and not any(f.done() for f in warm)
    release()
    release()  # idempotent
    for f in warm:
        f.result(30)
    assert order == ["eval step", "sampler 0", "sampler 1"]
    assert [j["state"] for j in q.jobs() if j["what"] == "sampler"] == ["ready", "ready", "dropped"]


def test_a_guess_starts_only_when_no_other_job_waits():
    """The neighbouring lengths' jobs (``LOW``) queued first start after the jobs queued later
    for a run or a request: a guess never delays a program someone asked for."""
    q = compile_queue.CompileQueue()
    order: list[str] = []
    release = q.hold(compile_queue.ALL, "the test: everything queued first")
    guesses = [q.submit(order.append, f"guess {i}", what="train step", purpose=compile_queue.LOW[0]) for i in range(2)]
    asked = [q.submit(order.append, "next run", what="train step", purpose="next run"),
             q.submit(order.append, "eval step", what="eval step")]
    release()
    for f in [*guesses, *asked]:
        f.result(30)
    assert order == ["next run", "eval step", "guess 0", "guess 1"]
    from adapters_lib.engine import compile_ahead

    assert compile_ahead.NEIGHBOURS in compile_queue.LOW  # the engine's guesses are such jobs


def test_a_gate_keeps_the_guesses_back_while_a_run_waits_to_start(tmp_path):
    """The engine's gate (``AheadCompiler.gate_guesses``: no run in its queue): a guess queued
    while a run waits starts once the device thread took that run; other jobs never wait."""
    from types import SimpleNamespace

    from adapters_lib import runs
    from adapters_lib.config import RunConfig
    from adapters_lib.engine.compile_ahead import AheadCompiler
    from adapters_lib.engine.run_queue import RunQueue
    from adapters_lib.engine.scheduler import Scheduler

    q = compile_queue.CompileQueue()
    run_queue = RunQueue(runs.Registry(tmp_path / "runs"))
    scheduler = Scheduler(train=lambda item: None, on_failure=lambda item, e: None, runs=run_queue)
    ahead = AheadCompiler(SimpleNamespace(scheduler=scheduler))  # not started: the run stays queued
    old, step_programs._BEHIND = step_programs._BEHIND, q
    try:
        ahead.gate_guesses()
        run_queue.create(RunConfig())  # a run waits to start
        order: list[str] = []
        guess = q.submit(order.append, "guess", what="train step", purpose=compile_queue.LOW[0])
        asked = q.submit(order.append, "eval step", what="eval step")
        asked.result(30)
        time.sleep(3 * compile_queue.GATE_POLL_S)
        assert order == ["eval step"] and not guess.done()
        assert run_queue.take_next() is not None  # the device thread took it: the gate opens
        guess.result(30)
        assert order == ["eval step", "guess"]
        ahead.close()
        run_queue.create(RunConfig())
        q.submit(order.append, "guess 2", what="train step", purpose=compile_queue.LOW[0]).result(30)
    finally:
        step_programs._BEHIND = old


def test_the_gate_keeps_the_guesses_back_while_a_clients_device_job_waits_or_runs(tmp_path):
    """A Compare or an eval on the device thread (a client's job, not the engine's internal
    ones): a guess queued meanwhile starts once it ended."""
    import threading
    from types import SimpleNamespace

    from adapters_lib import runs
    from adapters_lib.engine.compile_ahead import AheadCompiler
    from adapters_lib.engine.run_queue import RunQueue
    from adapters_lib.engine.scheduler import Scheduler

    q = compile_queue.CompileQueue()
    run_queue = RunQueue(runs.Registry(tmp_path / "runs"))
    scheduler = Scheduler(train=lambda item: None, on_failure=lambda item, e: None, runs=run_queue)
    scheduler.start()
    ahead = AheadCompiler(SimpleNamespace(scheduler=scheduler))
    old, step_programs._BEHIND = step_programs._BEHIND, q
    try:
        ahead.gate_guesses()
        gone, started = threading.Event(), threading.Event()
        internal = scheduler.submit(lambda: gone.wait(30), "heartbeat", internal=True)
        order: list[str] = []
        q.submit(order.append, "guess 1", what="train step", purpose=compile_queue.LOW[0]).result(30)
        assert order == ["guess 1"]  # the engine's own jobs hold nothing back
        gone.set()
        internal.result(30)
        gone.clear()
        compare = scheduler.submit(lambda: (started.set(), gone.wait(30)), "compare")
        assert started.wait(30) and not scheduler.nothing_waits()
        guess = q.submit(order.append, "guess 2", what="train step", purpose=compile_queue.LOW[0])
        time.sleep(3 * compile_queue.GATE_POLL_S)
        assert order == ["guess 1"] and not guess.done()
        gone.set()
        compare.result(30)
        guess.result(30)
        assert order == ["guess 1", "guess 2"] and scheduler.nothing_waits()
    finally:
        ahead.close()
        step_programs._BEHIND = old
        scheduler.closing.set()
        scheduler.wake()


def test_a_guess_asked_for_is_no_longer_one():
    """A queued guess that a request adopts (Configure asks for the program the guess queued)
    starts ahead of the other guesses, and a newer guess does not drop it."""
    q = compile_queue.CompileQueue()
    order: list[str] = []
    release = q.hold(compile_queue.ALL, "the test: everything queued first")
    guess = q.request(compile_queue.LOW[0], "after a run")
    with q.for_request(guess):
        wanted = q.submit(order.append, "guess 256", what="train step")
        other = q.submit(order.append, "guess 64", what="train step")
    asked = q.submit(order.append, "eval step", what="eval step")
    edit = q.request("next run", "Configure: max_length 256")
    with q.for_request(edit):
        q.adopt(wanted, "train step")
    q.request(compile_queue.LOW[0], "after the next run")  # drops the older guesses' queued jobs
    release()
    asked.result(30), wanted.result(30)
    assert other.cancelled() and order == ["guess 256", "eval step"]
    [job] = [j for j in q.jobs() if j["request"] == edit.id]
    assert job["purpose"] == "next run" and job["state"] == "ready"


def test_a_hold_of_every_purpose_keeps_both_lanes_back_until_released():
    """A warm start holds ``ALL`` until its step 1: the run's own jobs and the Compare's wait;
    ``wait_free`` (the Compare's queuing thread) waits too."""
    q = compile_queue.CompileQueue()
    order: list[str] = []
    release = q.hold(compile_queue.ALL, "a warm start's first step")
    own = q.submit(order.append, "train step", what="train step")
    cmp = q.submit(order.append, "sampler", what="sampler", purpose="compare")
    assert not q.wait_free("compare", timeout=0.2)
    assert order == [] and not own.done() and not cmp.done()
    release()
    own.result(30), cmp.result(30)
    assert sorted(order) == ["sampler", "train step"] and q.wait_free("compare", timeout=1)


def test_the_compares_jobs_never_wait_behind_a_train_steps_compile():
    """The Compare's jobs have a thread of their own: a sampler compiles while a train step's
    compile (~90 s on a TPU) is under way, and the train step's does not wait for them."""
    q = compile_queue.CompileQueue()
    gate = threading.Event()
    train = q.submit(gate.wait, 30, what="train step", purpose="next run")
    _until(train.running)
    sampler = q.submit(lambda: "compiled", what="sampler", purpose="compare")
    assert sampler.result(30) == "compiled" and not train.done()
    gate.set()
    assert train.result(30) is True


def test_a_failed_compile_is_a_failed_job_and_the_plain_submit_still_works():
    q = step_programs._behind()
    future = q.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        future.result(30)
    job = next(j for j in reversed(q.jobs()) if j["id"] and j["state"] == "failed")
    assert "ZeroDivisionError" in job["error"] and job["what"] == "compile"
    assert q.submit(sum, [1, 2]).result(30) == 3


def test_the_guard_catches_a_foreground_compile():
    import jax
    import jax.numpy as jnp

    fn = jax.jit(lambda x: x * 3 + 1)
    with pytest.raises(ForegroundCompile), forbid_compiles():
        fn(jnp.arange(7.0))
    fn(jnp.arange(7.0))
    with forbid_compiles():  # compiled now: nothing to compile
        fn(jnp.arange(7.0))


@pytest.fixture
def compile_behind_on_cpu(monkeypatch):
    """The accelerator's behaviour on the CPU (``Steps.compile_behind``, as tests/test_step.py
    forces it): the run's widest loss positions first, narrower programs behind."""
    from adapters_lib.train import step

    monkeypatch.setattr(step, "build_steps", functools.partial(step.build_steps, compile_behind=True))
    step_programs.forget()
    yield
    step_programs.forget()


def test_after_compile_ahead_the_runs_first_steps_and_eval_compile_nothing_in_the_foreground(
        compile_behind_on_cpu):
    import jax
    from fixtures_runs import demo_overrides

    from adapters_lib.config import load_config
    from adapters_lib.train.plan import compile_ahead, plan_run

    cfg = load_config(None, demo_overrides(train__steps=4, train__batch_size=4, lora__rank=4))
    q = step_programs._behind()
    req = q.request("next run", "the test's config")
    with q.for_request(req):
        futures = compile_ahead(cfg, force=True)
    assert futures, "nothing was queued"
    for f in futures:
        f.result(300)
    mine = [j for j in q.jobs() if j["request"] == req.id]
    assert {j["what"] for j in mine} >= {"train step", "eval step"}
    assert all(j["state"] == "ready" and j["where"] == "behind" for j in mine), mine
    order = [j["what"] for j in sorted(mine, key=lambda j: j["id"])]
    assert order.index("eval step") < order.index("train step"), order  # the short compiles first

    plan = plan_run(cfg)  # the run's set-up: the kept programs
    steps = plan.steps
    state = steps.init_state(plan.trainable)
    evals = [steps.put_batch(b) for b in plan.pipeline.eval_batches(cfg.train.eval_batches)]
    with forbid_compiles():
        for step in range(cfg.train.steps):
            state, metrics = steps.train_step(state, steps.put_batch(plan.pipeline.train_batch(step)))
        outs = [steps.eval_step(state.params, b) for b in evals]
        jax.device_get((metrics, outs))
    assert float(metrics["loss"]) > 0


def test_a_program_with_no_room_releases_the_others_and_runs():
    """A step's program that the device cannot load beside the engine's other programs (the
    1B's family program on the v5e after earlier runs' programs and Compare's models) frees
    what holds the room, the cheapest to have again first, with a full collection, and tries
    after each stage: the registered releasers' models, then the other programs' executables
    (the family's serves every next tweak: kept while the models free enough); still no room,
    the device's error is the step's."""
    import gc

    import jax
    import jax.numpy as jnp

    def step(a, b, c, batch, slots):
        return a + batch["x"].sum() * slots

    jitted = jax.jit(step, static_argnums=(4,))
    mine = step_programs.StepProgram(jitted, "train_step", None)
    other = step_programs.StepProgram(jax.jit(step, static_argnums=(4,)), "eval_step", None)
    batch = {"x": jnp.ones((2, 3))}
    args = (jnp.float32(1), None, None, batch, 2)
    other_sig = other.signature(batch, 2)
    executable = other.jitted.lower(*args).compile()
    other.compiled[other_sig] = executable
    sig = mine.signature(batch, 2)
    real = jitted.lower(*args).compile()
    failures: list[Exception] = []

    def no_room(n: int) -> None:
        failures.extend([jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: E0101: Error loading program "
                                                    "'jit_train_fn'")] * n)

    def loads(*dynamic):
        if failures:
            raise failures.pop()
        return real(*dynamic)

    mine.compiled[sig] = loads
    freed: list[str] = []
    step_programs.RELEASERS.append(lambda: freed.append("models") or 2)
    collections = gc.get_stats()[2]["collections"]
    try:
        no_room(1)
        assert float(mine(*args)) == 13.0
        assert freed == ["models"] and other.compiled == {other_sig: executable}  # the models were enough
        assert gc.get_stats()[2]["collections"] > collections  # their buffers collected before the try
        no_room(2)
        assert float(mine(*args)) == 13.0 and not other.compiled  # then the others went
        assert freed == ["models"] * 2
        no_room(3)
        with pytest.raises(jax.errors.JaxRuntimeError, match="RESOURCE_EXHAUSTED"):
            mine(*args)  # every stage, and still no room: the device's error
    finally:
        step_programs.RELEASERS.clear()
