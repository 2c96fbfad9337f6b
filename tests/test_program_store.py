"""The program store: compiled programs kept on disk by what they compute, so that a new
engine neither traces nor lowers the train and eval steps, the prefill and the decode that
an earlier one compiled."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHORT = {"train__steps": 2, "train__eval_every": 2, "train__checkpoint_every": 2}


def _child(code: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run ``code`` in a fresh Python (the repo and tests importable); its stdout."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, timeout=600, cwd=cwd)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out.stdout


TRAIN_CHILD = """
    import sys, pathlib
    sys.path.insert(0, {tests!r})
    from adapters_lib.import_shields import tf_deferred
    tf_deferred.install()
    import jax
    from jax import monitoring
    from adapters_lib import program_store
    program_store.enable({store!r})
    traced = set()
    monitoring.register_event_duration_secs_listener(
        lambda e, d, **kw: traced.add(str(kw.get("fun_name", ""))) if e.endswith("jaxpr_trace_duration") else None)
    from fixtures_runs import train_demo
    _, result = train_demo(pathlib.Path({root!r}), {name!r}, train__steps=2, train__eval_every=2,
                           train__checkpoint_every=2, train__learning_rate={lr})
    print("STATE", result.state)
    print("LOSSES", [round(result.losses[k], 5) for k in sorted(result.losses)])
    print("TRACED", sorted(traced))
    print("STATS", program_store.stats)
"""


def _lines(out: str, tag: str) -> str:
    return next(line[len(tag) + 1:] for line in out.splitlines() if line.startswith(tag + " "))


def test_a_new_process_traces_and_lowers_neither_step_that_an_earlier_one_stored(tmp_path):
    """The first process compiles and stores the train and eval steps; a second one running the
    same shapes with another learning rate reads both back: neither is traced, the lr reaches
    the step (it is an input) and the first loss, from the same weights, is the same."""
    store = str(tmp_path / "programs")
    first = _child(TRAIN_CHILD.format(tests=str(REPO / "tests"), store=store, root=str(tmp_path),
                                      name="writer", lr=0.001), tmp_path)
    assert _lines(first, "STATE") == "completed"
    assert "'stored': 2" in _lines(first, "STATS"), first
    assert len(list(Path(store).glob("train_step-*"))) == 1 and len(list(Path(store).glob("eval_step-*"))) == 1
    second = _child(TRAIN_CHILD.format(tests=str(REPO / "tests"), store=store, root=str(tmp_path),
                                       name="reader", lr=0.004), tmp_path)
    assert _lines(second, "STATE") == "completed"
    stats = _lines(second, "STATS")
    assert "'loaded': 2" in stats and "'compiled': 0" in stats and "'failed': 0" in stats, stats
    traced = _lines(second, "TRACED")
    assert "train_fn" not in traced and "eval_fn" not in traced, traced
    l1, l2 = eval(_lines(first, "LOSSES")), eval(_lines(second, "LOSSES"))  # noqa: S307 - our own print
    assert l1[0] == l2[0] and l1[1] != l2[1]


PERSISTENT_CHILD = """
    import jax, jax.numpy as jnp
    from adapters_lib import program_store
    jax.config.update("jax_compilation_cache_dir", {cache!r})
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    if {store!r}:
        program_store.enable({store!r})

    def f(a, b):
        h = jnp.concatenate([jnp.tanh(a @ b), a[:, :8]], axis=1)
        return (h @ h.T).sum(axis=1) + {salt}

    a, b = jnp.ones((16, 32)) / 7, jnp.ones((32, 24)) / 5
    jitted = jax.jit(f)
    if {call_first}:
        jitted(a, b)  # compiled outside the store first (or served by the cache): JAX's memory keeps it
    compiled = program_store.load_or_compile("probe", ("probe", {salt}), lambda: jitted.lower(a, b))
    print("VALUE", float(compiled(a, b)[0]))
    print("STATS", program_store.stats)
"""


@pytest.fixture(scope="module")
def jax_cache(tmp_path_factory) -> dict:
    """A JAX persistent cache holding the probe program (a plain process wrote it, no store), for
    the two tests below: each then works with a program store of its own."""
    import random

    root = tmp_path_factory.mktemp("jax-cache")
    fill = dict(tests="", cache=str(root / "cache"), salt=random.random())
    plain = _child(PERSISTENT_CHILD.format(store="", call_first=False, **fill), root)  # the jax cache only
    return {"fill": fill, "value": _lines(plain, "VALUE")}


@pytest.fixture(scope="module")
def probe_store(tmp_path_factory, jax_cache) -> dict:
    """One program store and two processes on that JAX cache, for the two tests below (one
    process fewer than a store each): ``memory`` ran the jitted function before the store
    compiled it; ``kept``, the next process, had the store compile it (the cache served it).
    The second is the first test's process that keeps a program the cache served: the store
    held no probe before it (``memory`` kept none)."""
    root = tmp_path_factory.mktemp("probe-store")
    store = root / "programs"
    fill = jax_cache["fill"]  # the jax cache (written by a plain process)
    memory = _child(PERSISTENT_CHILD.format(store=str(store), call_first=True, **fill), root)
    after_memory = list(store.glob("probe-*"))
    kept = _child(PERSISTENT_CHILD.format(store=str(store), call_first=False, **fill), root)
    return {"store": store, "memory": memory, "after_memory": after_memory, "kept": kept}


def test_a_program_the_persistent_cache_served_is_stored_with_the_cache_bytes(tmp_path, jax_cache, probe_store):
    """JAX's persistent cache serves the compile (an earlier process wrote it); the store keeps
    that program, and a third process runs what it reads back with the right result (an
    executable the cache served serializes again without its kernels on XLA:CPU)."""
    kept = probe_store["kept"]  # cache hit, no probe in the store before: stored
    assert not probe_store["after_memory"] and "'stored': 1" in _lines(kept, "STATS"), kept
    fill = dict(jax_cache["fill"], call_first=False)
    read = _child(PERSISTENT_CHILD.format(store=str(probe_store["store"]), **fill), tmp_path)
    assert "'loaded': 1" in _lines(read, "STATS"), read
    assert _lines(read, "VALUE") == _lines(kept, "VALUE") == jax_cache["value"]


def test_a_program_jax_answered_from_memory_is_not_kept_without_its_kernels(jax_cache, probe_store):
    """The jitted function ran before the store compiled it, and JAX's persistent cache served
    it then: ``compile()`` is answered from JAX's memory, with no cache bytes to keep, and that
    executable serializes again without its kernels on XLA:CPU. It is not kept, and the next
    process compiles it (the cache serves it), keeps the cache's bytes and runs it right (kept
    as it was, it failed there: ``Function broadcast_power_fusion not found``)."""
    memory, read = probe_store["memory"], probe_store["kept"]
    assert "'stored': 0" in _lines(memory, "STATS") and not probe_store["after_memory"], memory
    assert "'stored': 1" in _lines(read, "STATS"), read
    assert _lines(read, "VALUE") == _lines(memory, "VALUE") == jax_cache["value"]


def test_an_unreadable_entry_is_removed_and_the_program_compiled(tmp_path, caplog):
    import jax
    import jax.numpy as jnp

    from adapters_lib import program_store

    program_store.enable(tmp_path / "programs")
    try:
        x = jnp.arange(6.0)
        lower = lambda: jax.jit(lambda v: v * 3 + 1).lower(x)  # noqa: E731
        program_store.load_or_compile("unit", ("unit", 1), lower)
        (entry,) = (tmp_path / "programs").glob("unit-*")
        entry.write_bytes(b"not a program")
        before = dict(program_store.stats)
        compiled = program_store.load_or_compile("unit", ("unit", 1), lower)
        assert [float(v) for v in compiled(x)] == [1, 4, 7, 10, 13, 16]
        assert program_store.stats["failed"] == before["failed"] + 1
        assert program_store.stats["compiled"] == before["compiled"] + 1
        assert "not read back" in caplog.text
        assert program_store.load_or_compile("unit", ("unit", 1), lower) is not None  # written again
        assert program_store.stats["loaded"] == before["loaded"] + 1
    finally:
        program_store.disable()


def test_a_program_compiled_behind_running_steps_is_written_when_they_end(tmp_path):
    """Serializing an executable holds the GIL (a ~2 s stall between the 1B's steps on the
    v5e): a program compiled on a compile thread while a run's steps run serves at once and is
    written when they end; one compiled elsewhere (the device thread) is written at once;
    ``flush`` writes what waits (the process ending)."""
    import time

    import jax
    import jax.numpy as jnp

    from adapters_lib import program_store
    from adapters_lib.train import compile_queue

    program_store.enable(tmp_path / "p")
    q = compile_queue.CompileQueue()
    x = jnp.arange(4.0)

    def compile_(k: int):
        return program_store.load_or_compile("behind", ("behind", k), lambda: jax.jit(lambda v: v * k).lower(x))

    try:
        release = program_store.steps_running()
        compiled = q.submit(compile_, 2, what="eval step").result(60)
        assert [float(v) for v in compiled(x)] == [0, 2, 4, 6]  # it serves at once
        assert not list((tmp_path / "p").glob("behind-*"))  # not written while the steps run
        compile_(5)  # this thread (the device's): written at once
        assert len(list((tmp_path / "p").glob("behind-*"))) == 1
        release()
        release()  # idempotent
        t0 = time.monotonic()
        while len(list((tmp_path / "p").glob("behind-*"))) < 2:
            assert time.monotonic() - t0 < 30, "the deferred program was not written after the steps"
            time.sleep(0.02)
        again = program_store.steps_running()
        q.submit(compile_, 7, what="eval step").result(60)
        assert program_store.flush() == 1  # the process ends: written now
        again()
        assert len(list((tmp_path / "p").glob("behind-*"))) == 3
        before = dict(program_store.stats)
        assert [float(v) for v in compile_(7)(x)] == [0, 7, 14, 21]
        assert program_store.stats["loaded"] == before["loaded"] + 1  # read back, as written
    finally:
        program_store.disable()


def test_the_store_is_off_unless_enabled_and_a_key_change_misses(tmp_path):
    import jax
    import jax.numpy as jnp

    from adapters_lib import program_store

    assert program_store.folder() is None and program_store.entry_path("x", 1) is None
    program_store.enable(tmp_path / "p")
    try:
        x = jnp.ones(3)
        lower = lambda: jax.jit(lambda v: v + 1).lower(x)  # noqa: E731
        program_store.load_or_compile("k", ("a",), lower)
        program_store.load_or_compile("k", ("b",), lower)
        assert len(list((tmp_path / "p").glob("k-*"))) == 2
        assert program_store.report()["entries"] == 2
    finally:
        program_store.disable()


def test_a_restarted_engine_reads_its_steps_and_its_compare_programs_back(engine_factory, tmp_path):
    """An engine trains a short demo run and compares (its base placed on the run's mesh); the
    next engine in the same home compares first (its base loaded on one device: the same
    programs), then trains the same shapes: the prefill, the decode, the train and eval steps
    are read back from its program store (its log says so) and the Compare answers the same."""
    from fixtures_engine import demo_run_config

    home = tmp_path / "home"

    def train(proc) -> str:
        run = proc.client.create_run(demo_run_config(steps=2, checkpoint_every=2, eval_every=2),
                                     source="<test>")
        assert proc.client.wait_run(run.id, timeout=600).state == "completed"
        return run.id

    def compare(proc, run_id: str) -> str:
        text = ""
        for item in proc.client.compare("Say hi.", run_id, max_new_tokens=6):
            assert item.type != "error", item.data
            if item.type == "token" and item.data.side == "tuned":
                text += item.data.text
        return text

    first = engine_factory(home=home)
    run_id = train(first)
    answer = compare(first, run_id)
    first.stop()
    assert "program kept for the next engine" in first.log_text()
    second = engine_factory(home=home)
    again = compare(second, run_id)
    train(second)
    text = second.log_text()
    log = text[text.rindex(" ready in "):]  # this engine's lines
    second.stop()
    for name in ("prefill", "decode", "train_step", "eval_step"):
        assert f"{name}: the stored program read back" in log, (name, log[-3000:])
    assert "program kept" not in log and "not read back" not in log
    assert again == answer


def test_the_adapters_shapes_are_read_back_equal_without_tracing_the_model(tmp_path):
    from jax import monitoring

    from adapters_lib import program_store
    from adapters_lib.config import LoraSpec
    from adapters_lib.lora import traced_shapes
    from adapters_lib.models import demo

    model = demo.demo_model()
    spec = LoraSpec(rank=4, targets=("q", "v", "down"))
    program_store.enable(tmp_path / "p")
    traced: list[str] = []

    def listener(event: str, duration: float, **kw: object) -> None:
        if event.endswith("jaxpr_trace_duration"):
            traced.append(str(kw.get("fun_name", "")))

    try:
        made = traced_shapes._traced_shapes.__wrapped__(model, spec)
        assert len(list((tmp_path / "p").glob("adapter-shapes-*.shapes"))) == 1
        monitoring.register_event_duration_secs_listener(listener)
        try:
            read = traced_shapes._traced_shapes.__wrapped__(model, spec)
        finally:
            monitoring.unregister_event_duration_listener(listener)
    finally:
        program_store.disable()
    assert traced == []
    assert read[1] == made[1] and read[0] == made[0]
