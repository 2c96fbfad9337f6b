"""Compile a run's Compare (and eval) programs behind, after the run or when Compare picks it.

The user's loop is: train, then Compare (or ``eval --run``). Their first call compiles the
sampler's prefill and decode (23 s on the real 270M on the v5e) and the eval scorer (~16 s).
So when a run completes or is stopped, and when Compare picks a run's checkpoint
(``prepare_compare``), the engine queues those compiles on its one compile thread
(``step_programs._behind()``) from abstract arguments:

- a short internal device job loads the tuned model (``sampling.tuned_model``: kept in its
  cache for the Compare that follows; the base is the model cache's) and the eval's trained
  tree, queues the compiles and returns: no device job is held for a compile, so a run
  launched or a request made meanwhile waits for nothing (the ~28 s before a run that
  followed a run was this warm-up compiling on the device thread);
- the compiles: the Compare's prefill for the prompt buckets 32 and 64 and its decode
  (``Sampler.compile_behind``: any ``max_new_tokens`` up to the KV-cache floor and any
  sampling settings share them), and the eval scorer for the run's ``max_length`` and its
  eval file's width (``perplexity.compile_behind``). With ``train.programs`` a family (an accelerator), these
  are the family's programs: a run whose rank, alpha or targets changed finds them compiled;
- a call that needs a program still compiling waits for it rather than compiling it again;
- a newer warm-up drops the queued compiles of the older one (``Future.cancel``: another
  run or checkpoint picked, nobody needs them); one under way finishes and is kept.

**At a run's start** (``start_hook``: its ``on_setup``, in a thread once the run's first step
is lowered; an accelerator, a gemma-route LoRA run), the sampler's programs and the eval
scorer for the run's family are queued too, from zero adapters of the run's shapes, where the model cache
holds the model the Compare loads (the run's own on one device; never a second model beside a
run) and no earlier run of this engine queued that family's: on a cold launch they compile on
the Compare's own compile thread while the train step compiles in the foreground, so a Compare
right after the first run finds them ready.

The device job is skipped when a run trains or waits, or a request waits (it would load a
model beside the run's); after a run it waits ``GRACE_S`` first, and a run or request that
comes meanwhile skips it too (a client that launches the next tweak at once does not wait for
a model load); one that comes while the model loads goes first after it (the eval
tree is not read then: its scorer compiles on first use). ``GEMMA_WORKBENCH_WARM_COMPARE=0`` turns it off (the test suite
does, ``tests/conftest.py``). ``status.warming`` names the run until its compiles end; the
engine log says when they were queued and how long they took, and how long the model's load
took by phase (``tuned.phases``: request, config, base, adapters, sides).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

log = logging.getLogger("adapters_lib.engine")

ENV = "GEMMA_WORKBENCH_WARM_COMPARE"
PROMPT = "Hi."
STATES = ("completed", "stopped")
PURPOSE = "compare"
"""The compile queue's purpose of these jobs: a newer warm-up drops the older one's."""
GRACE_S = 0.5
"""Seconds the warm-up after a run waits for the client's next request first (a tweak launched
at once, a Compare): one that comes meanwhile goes first, the warm-up skipped. On the v5e a run
queued 20-200 ms after the last one ended waited 0.2-1.7 s for the warm-up's model load."""


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _submitter(what: str, about: str) -> Any:
    """``submit(fn) -> Future`` on the engine's compile thread, the job named for its listeners."""
    from adapters_lib.train.step_programs import _behind

    queue = _behind()

    def submit(fn: Any) -> Any:
        try:
            return queue.submit(fn, what=what, about=about, purpose=PURPOSE)
        except TypeError:  # a plain worker: no job names
            return queue.submit(fn)

    return submit


def sampling_settings(run: Any) -> Any:
    """The decoding settings of a default Compare of ``run`` (what the warm-up compiles for)."""
    from adapters_lib.engine import api, sampling

    return sampling.settings_of(api.Compare(prompt=PROMPT, run_id=str(run.path)))


class Warmer:
    """The engine's Compare warm-up (the device thread loads, the compile thread compiles)."""

    def __init__(self, engine: Any):
        self.engine = engine
        self._lock = threading.Lock()
        self.current: str | None = None
        """The run being warmed (queued, loading or compiling), for ``status``."""
        self.done = 0
        """Warm-ups whose compiles all ended (tests, logs)."""
        self.futures: list[Any] = []
        """The compiles of the latest warm-up."""
        self._ahead: set[tuple[str, ...]] = set()
        """The families whose sampler programs a run's start queued (``at_run_start``)."""

    def after_run(self, run: Any) -> None:
        """A run's training ended (the device thread, ``Engine.run_ended``): warm it if it
        completed or was stopped and the engine has nothing else to do."""
        if str(run.state) in STATES:
            self.warm(run, grace=GRACE_S)

    def warm(self, run: Any, step: int = -1, grace: float = 0.0) -> bool:
        """Queue the warm-up of ``run``'s checkpoint ``step`` (-1: the latest), to start once
        ``grace`` seconds pass with no other work; False when skipped (off, the engine closes,
        or other work waits)."""
        if not enabled() or self.engine.scheduler.closing.is_set() or self._other_work():
            return False
        with self._lock:
            self.current = run.run_id
        try:
            self.engine.scheduler.submit(lambda: self._warm(run, step, grace), label=f"warm compare {run.run_id}",
                                         internal=True)
        except Exception:  # noqa: BLE001 - the engine is closing: no warm-up
            self._clear(run.run_id)
            return False
        return True

    def start_hook(self, cfg: Any) -> Any:
        """The ``TrainHook`` that queues the run's Compare and eval programs at its start (module
        doc): in a thread of its own, once the run's first step is lowered (``CompileQueue.hold``:
        its tracing on the device thread goes first)."""
        from adapters_lib.train.hooks import TrainHook

        class CompareAhead(TrainHook):
            name = "compare ahead"

            def on_setup(hook, session: Any) -> None:  # noqa: N805 - ``self`` is the warmer
                threading.Thread(target=self._when_free, args=(cfg, session.run), name="compare-ahead",
                                 daemon=True).start()

        return CompareAhead()

    def _when_free(self, cfg: Any, run: Any) -> None:
        from adapters_lib.train.step_programs import _behind

        if _behind().wait_free(PURPOSE, timeout=900):
            self.at_run_start(cfg, run)

    def at_run_start(self, cfg: Any, run: Any) -> list[Any]:
        """Queue the Compare's sampler programs and ``eval --run``'s scorer for ``cfg``'s LoRA
        family, from zero adapters of the run's shapes; the futures, [] when skipped or queued
        before for this family, length and eval file."""
        import jax

        from adapters_lib.engine import compile_ahead

        cpu = jax.default_backend() == "cpu" and compile_ahead.mode() != "on"
        if not enabled() or cfg.model.backend != "gemma" or not cfg.lora.enabled or cpu or jax.process_count() > 1:
            return []  # a CPU: the compile would take the cores the steps need (unless asked: "on")
        t0 = time.perf_counter()
        try:
            import numpy as np

            from adapters_lib.evals import perplexity
            from adapters_lib.lora import traced_shapes
            from adapters_lib.models.loader import is_kept, load_model
            from adapters_lib.sample.family import family_of
            from adapters_lib.tuned import generation_dtype_of
            from adapters_lib.tuned.gemma import COMPARE_BUCKETS, GemmaTuned

            spec, dtype = cfg.model_spec(), generation_dtype_of("", cfg)
            if not all(is_kept(spec, param_dtype=cfg.train.param_dtype, generation_dtype=d) for d in {dtype, ""}):
                return []  # it would place a second model beside the run's: the warm-up after it
            family = family_of(cfg.lora, cfg)
            key = (repr(spec), cfg.train.param_dtype, dtype, repr(family.program if family else cfg.lora),
                   cfg.data.max_length, cfg.data.eval_path)
            with self._lock:
                if key in self._ahead:
                    return []
                self._ahead.add(key)
            about = f"run {run.run_id}"
            # the base as the Compare and the eval load it (the model cache's: the run's own); the
            # zero adapters live while this queues (abstract arguments in the jobs), before the
            # run's step program is loaded; nothing runs on the devices (``prime`` is the warm-up's)
            loaded = load_model(spec, param_dtype=cfg.train.param_dtype, generation_dtype=dtype)
            zeros = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype),  # on the host: folded and placed
                                 traced_shapes.adapter_shapes(loaded.model, cfg.lora))  # in one transfer, not a leaf at a time
            model = GemmaTuned(loaded, lora=cfg.lora, adapters=zeros, cfg=cfg)
            sampler, settings = _submitter("sampler prefill + decode", about), sampling_settings(run)
            # in the order a user asks after the run: a Compare of a short prompt, eval, a longer one
            futures = model.compile_behind(sampler, settings, prompt_buckets=COMPARE_BUCKETS[:1])
            plain = load_model(spec, param_dtype=cfg.train.param_dtype) if dtype else loaded
            scorer = perplexity.compile_behind(plain.model, plain.params, zeros, cfg, _submitter("eval scorer", about),
                                               tokenizer=plain.tokenizer)
            futures += [scorer] if scorer is not None else []
            futures += model.compile_behind(sampler, settings, prompt_buckets=COMPARE_BUCKETS[1:])
        except Exception as e:  # noqa: BLE001 - never fails a run: the warm-up after it compiles them
            log.warning("run %s: the Compare's programs not queued at the start (%s: %s)", run.run_id,
                        type(e).__name__, e)
            return []
        if futures:
            log.info("run %s: the Compare's and eval's programs queued beside the run's own (%d, in %.1f s)",
                     run.run_id, len(futures), time.perf_counter() - t0)
        return futures

    def _other_work(self) -> bool:
        """A run trains or waits, a request waits, or the engine closes."""
        return self.engine.scheduler.waiting()

    def _clear(self, run_id: str) -> None:
        with self._lock:
            if self.current == run_id:
                self.current = None

    def _drop_older(self) -> None:
        with self._lock:
            older, self.futures = self.futures, []
        dropped = sum(1 for f in older if f.cancel())
        if dropped:
            log.info("Compare warm-up: %d queued compile(s) of an older one dropped", dropped)

    def _warm(self, run: Any, step: int, grace: float = 0.0) -> None:
        """The device job: load, queue the compiles, return."""
        from adapters_lib import program_store
        from adapters_lib.engine import api, sampling
        from adapters_lib.tuned import phases

        t0 = time.perf_counter()
        try:
            if self.engine.scheduler.work_within(grace):
                log.info("run %s: Compare warm-up skipped (other work %s)", run.run_id,
                         f"came within {grace:g} s" if grace else "waits")
                self._clear(run.run_id)
                return
            log.info("warming Compare for run %s", run.run_id)
            before = dict(program_store.stats)
            cmd = api.Compare(prompt=PROMPT, run_id=str(run.path), step=step, save=False)
            with phases.recording() as took:
                prepared = sampling.prepare(self.engine, cmd)
                phases.mark("request")
                model = sampling._model(cmd, prepared)  # the real Compare's model, kept in sampling's cache
            loaded_s = time.perf_counter() - t0
            loaded = f"{loaded_s:.1f} s: {phases.describe(took)}" if len(took) > 1 else f"{loaded_s:.1f} s"
            self._drop_older()
            about = f"run {run.run_id}"
            futures = []
            if hasattr(model, "compile_behind"):  # the gemma route (Keras compiles its own)
                futures += model.compile_behind(_submitter("sampler prefill + decode", about),
                                                prepared.settings)
            if not self._other_work() and hasattr(model, "prime"):
                model.prime()  # the sides' adapter stack compiled now, not in the Compare
            if self._other_work():  # a run or a request came meanwhile: it goes first
                log.info("run %s: Compare warm-up gives way after the model (%s); eval's "
                         "scorer compiles on first use", run.run_id, loaded)
            else:
                futures += self._eval_behind(run, step, _submitter("eval scorer", about))
        except Exception as e:  # noqa: BLE001 - a warm-up never fails anything: the Compare will say
            log.warning("run %s: Compare warm-up failed after %.1f s (%s: %s)", run.run_id,
                        time.perf_counter() - t0, type(e).__name__, e)
            self._clear(run.run_id)
            return
        with self._lock:
            self.futures = list(futures)
        log.info("run %s: Compare warm-up queued %d compile(s) behind in %.1f s (model loaded in %s)",
                 run.run_id, len(futures), time.perf_counter() - t0, loaded)
        self._when_done(run.run_id, futures, t0, before)

    def _eval_behind(self, run: Any, step: int, submit: Any) -> list[Any]:
        """``eval --run``'s scorer for the run's ``max_length``, queued (gemma LoRA runs)."""
        cfg = run.config()
        if cfg.model.backend != "gemma" or not cfg.lora.enabled:
            return []
        from adapters_lib.evals import perplexity
        from adapters_lib.evals.selection import resolve_step
        from adapters_lib.tuned import load_checkpoint

        step = resolve_step(run, step)  # -2: the best checkpoint
        _, loaded, trainable, _ = load_checkpoint(run, None if step is None or step < 0 else step)
        future = perplexity.compile_behind(loaded.model, loaded.params, trainable, cfg, submit,
                                           tokenizer=loaded.tokenizer)
        return [future] if future is not None else []

    def _when_done(self, run_id: str, futures: list[Any], t0: float, before: dict[str, int]) -> None:
        from concurrent.futures import wait

        from adapters_lib import program_store

        def report() -> None:
            wait(futures)
            if all(not f.cancelled() and f.exception() is None for f in futures):
                self.done += 1
                got = {k: program_store.stats[k] - before[k] for k in ("compiled", "loaded")}
                log.info("run %s: Compare warmed in %.1f s (programs compiled %d, read back %d)",
                         run_id, time.perf_counter() - t0, got["compiled"], got["loaded"])
            else:
                bad = next((f.exception() for f in futures if not f.cancelled() and f.exception()), None)
                log.info("run %s: Compare warm-up ended in %.1f s, not all compiled (%s)", run_id,
                         time.perf_counter() - t0, "dropped" if bad is None else f"{type(bad).__name__}: {bad}")
            self._clear(run_id)

        threading.Thread(target=report, name="warm-compare-report", daemon=True).start()
