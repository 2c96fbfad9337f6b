"""A program compiled behind a run's steps is written for the next engine only once the steps
ended and the engine is idle (``program_store.write_when_idle``): not in the run's end, the
Compare after it or the next run's set-up, where serializing it held the GIL they needed."""

from __future__ import annotations

import time


def test_a_deferred_program_waits_for_the_idle_clock_then_is_written(tmp_path):
    import jax
    import jax.numpy as jnp

    from adapters_lib import program_store
    from adapters_lib.train import compile_queue

    program_store.enable(tmp_path / "p")
    idle = {"seconds": 0.0}  # the engine's clock: 0 while it trains, streams or serves
    program_store.write_when_idle(lambda: idle["seconds"])
    q = compile_queue.CompileQueue()
    x = jnp.arange(3.0)

    def written() -> int:
        return len(list((tmp_path / "p").glob("idle-*")))

    try:
        release = program_store.steps_running()
        compiled = q.submit(lambda: program_store.load_or_compile(
            "idle", ("idle", 3), lambda: jax.jit(lambda v: v * 3).lower(x)), what="eval step").result(60)
        assert [float(v) for v in compiled(x)] == [0, 3, 6]
        release()  # the steps ended; the engine is busy (the run's end, a Compare)
        time.sleep(1.0)
        assert written() == 0
        idle["seconds"] = program_store.QUIET_S  # idle long enough: written
        t0 = time.monotonic()
        while written() < 1:
            assert time.monotonic() - t0 < 30, "the deferred program was not written when idle"
            time.sleep(0.05)
    finally:
        program_store.write_when_idle(None)
        program_store.flush()
        program_store.disable()


def test_in_a_busy_engine_the_device_threads_own_program_waits_too(tmp_path):
    """The run's first step does not wait for its program's copy (the 1B's: 20.1 s on the v5e)."""
    import jax
    import jax.numpy as jnp

    from adapters_lib import program_store

    program_store.enable(tmp_path / "p")
    idle = {"seconds": 0.0}
    program_store.write_when_idle(lambda: idle["seconds"])
    x = jnp.arange(3.0)
    try:
        compiled = program_store.load_or_compile("own", ("own", 3), lambda: jax.jit(lambda v: v + 3).lower(x))
        assert [float(v) for v in compiled(x)] == [3, 4, 5]  # served at once
        time.sleep(0.5)
        assert not list((tmp_path / "p").glob("own-*"))  # the engine is busy: not yet
        idle["seconds"] = program_store.QUIET_S
        t0 = time.monotonic()
        while not list((tmp_path / "p").glob("own-*")):
            assert time.monotonic() - t0 < 30, "the deferred program was not written when idle"
            time.sleep(0.05)
    finally:
        program_store.write_when_idle(None)
        program_store.flush()
        program_store.disable()


def test_a_program_whose_copy_waits_is_served_again_from_memory(tmp_path):
    """A second set-up of the same program, its copy not yet written (the engine busy), gets
    the compiled one: nothing lowered, nothing compiled (not the 48 s recompile the v5e saw)."""
    import jax
    import jax.numpy as jnp

    from adapters_lib import program_store

    program_store.enable(tmp_path / "p")
    program_store.write_when_idle(lambda: 0.0)  # busy throughout
    x = jnp.arange(3.0)
    lowered = []

    def lower():
        lowered.append(1)
        return jax.jit(lambda v: v * 5).lower(x)

    try:
        first = program_store.load_or_compile("again", ("again", 3), lower)
        assert not list((tmp_path / "p").glob("again-*"))  # its copy waits
        second = program_store.load_or_compile("again", ("again", 3), lower)
        assert second is first and len(lowered) == 1
        assert [float(v) for v in second(x)] == [0, 5, 10]
        other = program_store.load_or_compile("again", ("again", 4), lower)  # another key compiles
        assert other is not first and len(lowered) == 2
    finally:
        program_store.write_when_idle(None)
        assert program_store.flush() == 2
        program_store.disable()
    assert len(list((tmp_path / "p").glob("again-*"))) == 2
