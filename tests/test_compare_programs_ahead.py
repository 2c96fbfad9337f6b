"""What the first Compare and ``eval --run`` after a run would compile is compiled ahead and
never twice: the sides' adapter stack (``sample.stack.compile_ahead``, 1.4 s of the
first Compare after a run on the v5e), and the eval scorer that a request finds compiling on
the compile-ahead thread (``evals.perplexity._Scorer.warm``: the 1B's ``eval --run`` compiled it
a second time, 13.8 s)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor


def test_the_stack_compiled_ahead_serves_the_compare_and_equals_the_jitted_one(demo_lora):
    import jax
    import numpy as np

    from adapters_lib.sample import Sampler, SamplingSettings, stack

    loaded, spec, adapters = demo_lora
    s = Sampler.from_loaded(loaded, spec)
    pattern = (False, True)
    key = (stack.signature(adapters), pattern)
    stack._AHEAD.pop(key, None)
    jitted = stack._stacked_jit()
    with ThreadPoolExecutor(1) as pool:  # the engine's compile thread: a worker that runs a job
        future = s.compile_behind(pool.submit, [None, adapters], SamplingSettings(max_new_tokens=8))
        future.result()
    assert key in stack._AHEAD  # compiled on the thread, from abstract arguments
    before = jitted._cache_size()
    stacked, variants = s._stack([None, adapters])
    assert variants == 2 and jitted._cache_size() == before  # the Compare traced and compiled nothing
    reference = jax.tree.map(lambda x: np.stack([np.zeros_like(x), x]), jax.device_get(adapters))
    for got, want in zip(jax.tree.leaves(jax.device_get(stacked)), jax.tree.leaves(reference), strict=True):
        np.testing.assert_array_equal(got, want)
    # the A/B through the compiled-ahead stack answers as the jitted stack does
    ahead = s.generate_grid(["Is 5 even or odd?"], [None, adapters], SamplingSettings(max_new_tokens=8))
    stack._AHEAD.pop(key)
    jitted_rows = s.generate_grid(["Is 5 even or odd?"], [None, adapters], SamplingSettings(max_new_tokens=8))
    assert [[c["tokens"] for c in row] for row in ahead] == [[c["tokens"] for c in row] for row in jitted_rows]


def test_a_scorer_compiling_on_another_thread_is_waited_for_not_compiled_again(demo_lora):
    import jax
    import jax.numpy as jnp

    from adapters_lib.evals import perplexity

    loaded, spec, adapters = demo_lora
    lowered: list[str] = []
    release = threading.Event()

    def score(base, lora, batch):
        return jnp.sum(batch["tokens"]).astype(jnp.float32), jnp.float32(batch["tokens"].size)

    class Counted:  # the scorer's jitted function, its lowering counted and held until released
        def __init__(self, fn):
            self.fn = jax.jit(fn)

        def lower(self, *args):
            lowered.append(threading.current_thread().name)
            release.wait(60)
            return self.fn.lower(*args)

        def __call__(self, *args):
            return self.fn(*args)

    scorer = perplexity._Scorer(Counted(score), ("test", id(score)))
    batch = {"tokens": jnp.ones((2, 8), jnp.int32)}
    ahead = threading.Thread(target=scorer.warm, args=(None, None, batch), name="compile-ahead")
    ahead.start()
    while not lowered:  # the compile ahead is under way
        threading.Event().wait(0.01)
    answers: list = []
    asker = threading.Thread(target=lambda: answers.append(scorer(None, None, batch)), name="eval-run")
    asker.start()
    asker.join(0.5)
    assert asker.is_alive() and not answers  # the request waits for the compile under way
    release.set()
    ahead.join(60)
    asker.join(60)
    assert lowered == ["compile-ahead"]  # one compile, not two
    total, count = answers[0]
    assert float(total) == 16.0 and float(count) == 16.0
