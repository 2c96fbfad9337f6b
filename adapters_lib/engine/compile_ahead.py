"""Compile the next run's programs while the user is still deciding.

``AheadCompiler.request(cfg)`` (the ``compile_ahead`` command: Configure's edits, a model
picked, ``gemma-workbench prepare``) makes a compile-ahead request on the one compile queue
(``train.compile_queue``, purpose ``"next run"``): the queued jobs of the previous request are
dropped at once (a compile already under way finishes and is kept). Then a device job
(``Engine.on_device``, internal) runs ``train.plan.compile_ahead(cfg)``: the run's set-up
(model on the devices, data, steps), then its first train step and eval steps queued on the
compile thread. The reply comes at once; ``compile_jobs`` says how the jobs go.

**While a run trains or waits**, a request is deferred, not run between the run's steps: its
set-up would place a second copy of a model on the devices the run uses, and steal host
time from its steps. It starts when the run ends (``after_run``); a newer request replaces it.

**On a CPU engine** nothing compiles ahead (the compile takes the cores the steps need): the
reply says so (``ahead`` false), and the programs compile at launch. ``force`` (``prepare
--force``, the tests) compiles ahead there too.

**At start**, on an accelerator, the engine compiles ahead for the last launched config
(``last-config.toml`` in the engine's folder, written at each ``create_run``).

**While a run trains**, on an accelerator, its config at its neighbouring ``max_length`` values
(twice and half: ``neighbour_lengths``) compiles ahead too, so that a length tweak finds its
programs ready as a rank tweak finds the family's: a set-up job on the compile thread, queued
at the run's set-up (``start_hook``: held, like every job, until the run's first step is
lowered or has run), which queues the eval steps and the family's train step at the first length
(where the memory estimate fits them), then the next length's set-up, a job of its own. Its
purpose, ``"neighbour lengths"``, is a guess (``compile_queue.LOW``): its jobs start only when
no other job waits, no run waits in the queue and no client's device job (a Compare, an eval)
waits or runs (``gate_guesses``), and the next run's guess supersedes it. Nothing runs on the
device thread: a run launched meanwhile does not wait for it.

``GEMMA_WORKBENCH_COMPILE_AHEAD``: ``auto`` (the default: on an accelerator), ``on`` (a CPU
too, the engine's start included) or ``off``. ``GEMMA_WORKBENCH_NEIGHBOUR_LENGTHS``: ``auto``
(the default: on an accelerator), ``on`` (a CPU too) or ``off``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from adapters_lib.engine import api, locations
from adapters_lib.errors import WorkbenchError

log = logging.getLogger("adapters_lib.engine")

ENV = "GEMMA_WORKBENCH_COMPILE_AHEAD"
NEIGHBOURS_ENV = "GEMMA_WORKBENCH_NEIGHBOUR_LENGTHS"
PURPOSE = "next run"
NEIGHBOURS = "neighbour lengths"  # a ``compile_queue.LOW`` purpose: after every other job
LAST_CONFIG = "last-config.toml"
CPU_MESSAGE = "the programs compile at launch (a CPU engine compiles nothing ahead)"


def mode(env: str = ENV) -> str:
    """``env``'s setting: "on", "off" or "auto"."""
    value = os.environ.get(env, "auto").strip().lower()
    if value in ("0", "off", "false", "no"):
        return "off"
    if value in ("1", "on", "true", "yes", "force"):
        return "on"
    return "auto"


def neighbour_lengths(length: int) -> list[int]:
    """The ``max_length`` values compiled ahead after a run of ``length``: twice, then half (at
    least 16 tokens)."""
    return [n for n in (2 * length, length // 2) if n >= 16 and n != length]


def last_config_path() -> Path:
    return locations.engine_dir() / LAST_CONFIG


def describe(cfg: Any) -> str:
    """A config in a few words: the model, the adapter, the batch (the jobs' ``about``)."""
    lora = f"LoRA r{cfg.lora.rank}" if cfg.lora.enabled else "full"
    return f"{cfg.model.source} · {lora} · {cfg.train.batch_size}×{cfg.data.max_length}"


def _does_not_fit(cfg: Any) -> str:
    """Why a launch of ``cfg`` would be refused by the memory estimate (its ``verdict``
    "exceeds", as the launch's check says: ``engine.compute``); "" otherwise."""
    import jax

    from adapters_lib.memory import run_estimate
    from adapters_lib.memory.device import device_memory_bytes
    from adapters_lib.memory.estimate import ce_chunk_budget
    from adapters_lib.models.loader import load_model

    devices = jax.devices()
    config = load_model(cfg.model_spec(), param_dtype=cfg.train.param_dtype).config  # the cached model
    got = run_estimate.estimate_run(cfg, config, device_count=len(devices), device_bytes=device_memory_bytes(devices[0]),
                              ce_chunk_bytes=ce_chunk_budget(devices[0]), platform=devices[0].platform)
    return f"its step would need {got.summary()}" if got.verdict == "exceeds" else ""


def _processes() -> int:
    import sys

    jax = sys.modules.get("jax")
    return int(jax.process_count()) if jax is not None else 1


class AheadCompiler:
    """The engine's compile-ahead requests (see the module doc)."""

    def __init__(self, engine: Any):
        self.engine = engine
        self._lock = threading.Lock()
        self.latest: api.CompileRequestInfo | None = None
        self._deferred: tuple[Any, Any, bool] | None = None
        self._ungate: Any = None

    def gate_guesses(self) -> None:
        """While a run waits in the queue, or a client's device job (a Compare, an eval) waits
        or runs, no guess starts (``CompileQueue.gate_low``): its set-up (1-3 s of Python)
        would take the GIL from that run's set-up, which starts any moment, or from the job.
        On the v5e the 270M's Compare right after a run took 1.50 s to its first token beside a
        guess's set-up that began as the Compare was queued (0.29-0.60 s without)."""
        import weakref

        from adapters_lib.train import step_programs

        scheduler = weakref.ref(self.engine.scheduler)  # a closed engine's gate never holds

        def nothing_waits() -> bool:
            device = scheduler()
            return device is None or device.nothing_waits()

        if self._ungate is None:
            self._ungate = step_programs._behind().gate_low(nothing_waits)

    def close(self) -> None:
        ungate, self._ungate = self._ungate, None
        if ungate is not None:
            ungate()

    # ----------------------------------------------------------------- policy

    def allowed(self, force: bool = False) -> tuple[bool, str]:
        """Whether this engine compiles ahead now, and why not."""
        if mode() == "off":
            return False, f"compiling ahead is off ({ENV}=off)"
        runtime = self.engine.runtime
        if runtime.error:
            return False, f"JAX did not start: {runtime.error}"
        backend = runtime.backend
        if backend is None:
            return False, "the engine is starting (its devices are not known yet)"
        if backend == "cpu" and not (force or mode() == "on"):
            return False, CPU_MESSAGE
        if _processes() > 1:  # every host would have to set up the same run: at launch only
            return False, "the programs compile at launch (a multi-host engine compiles nothing ahead)"
        return True, ""

    # ----------------------------------------------------------------- requests

    def request(self, cfg: Any, *, force: bool = False) -> api.CompileAheadReply:
        """Queue ``cfg``'s programs (or defer them while a run trains); the reply at once."""
        from adapters_lib.train import step_programs

        self.engine.runtime.wait_devices()
        ok, why = self.allowed(force)
        backend = self.engine.runtime.backend or ""
        if not ok:
            return api.CompileAheadReply(ahead=False, backend=backend, message=why)
        req = step_programs._behind().request(PURPOSE, describe(cfg))
        if self._busy():
            info = self._set(req, "deferred", "a run trains: these programs compile when it ends")
            with self._lock:
                self._deferred = (cfg, req, force)
        else:
            info = self._set(req, "planning")
            self._submit(cfg, req, force)
        return api.CompileAheadReply(ahead=True, backend=backend, request=info)

    def after_run(self) -> None:
        """A run ended (the device thread): a deferred request starts, unless another run waits."""
        with self._lock:
            deferred, self._deferred = self._deferred, None
        if deferred is None:
            return
        cfg, req, force = deferred
        if req.superseded:
            return
        if self.engine.run_queue.has_queued():
            with self._lock:
                self._deferred = deferred
            return
        self._set(req, "planning")
        self._submit(cfg, req, force)

    def start_hook(self, cfg: Any) -> Any:
        """The ``TrainHook`` that queues ``neighbours(cfg)`` at the run's set-up."""
        from adapters_lib.train.hooks import TrainHook

        ahead = self

        class NeighbourLengths(TrainHook):
            name = "neighbour lengths"

            def on_setup(self, session: Any) -> None:
                try:
                    ahead.neighbours(cfg)
                except Exception:  # noqa: BLE001 - a guess never fails a run
                    log.warning("compile ahead of the neighbouring lengths not queued", exc_info=True)

        return NeighbourLengths()

    def neighbours(self, cfg: Any) -> None:
        """A run of ``cfg`` sets up: its config at ``neighbour_lengths`` compiled ahead (the
        module doc), on an accelerator, for a gemma-route LoRA run."""
        from adapters_lib.train import step_programs

        setting = mode(NEIGHBOURS_ENV)
        if setting == "off" or cfg.model.backend != "gemma" or not cfg.lora.enabled:
            return
        ok, _ = self.allowed(force=setting == "on")
        lengths = neighbour_lengths(int(cfg.data.max_length))
        if not ok or not lengths or (self.engine.runtime.backend == "cpu" and setting == "auto"):
            return
        queue = step_programs._behind()
        req = queue.request(NEIGHBOURS, f"{describe(cfg)}, max_length {' and '.join(map(str, lengths))}")
        with queue.for_request(req):
            queue.submit(self._plan_neighbours, cfg, req, lengths, what="set-up", purpose=NEIGHBOURS)

    def _plan_neighbours(self, cfg: Any, req: Any, lengths: list[int]) -> None:
        """(The compile thread.) The first length's set-up and programs queued, where it fits;
        the next lengths' set-up a job of its own, queued behind them. The queue's gate and
        holds act when a job starts: with every length in one job, a Compare or a run queued
        during one length's set-up (1-3 s of Python on the v5e) would run beside the next
        one's too."""
        import dataclasses

        from adapters_lib.train import step_programs
        from adapters_lib.train.plan import compile_ahead

        if req.superseded or not lengths:
            return
        queue, (length, rest) = step_programs._behind(), (lengths[0], lengths[1:])
        try:
            other = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, max_length=length))
            why = _does_not_fit(other)
            if why:
                log.info("compile ahead of max_length %d (the last run's was %d): skipped, %s", length,
                         cfg.data.max_length, why)
                return
            t0 = time.perf_counter()
            try:
                with queue.for_request(req):
                    futures = compile_ahead(other, force=True, own=False)
            except WorkbenchError as e:
                log.info("compile ahead of max_length %d: %s", length, e)
                return
            except Exception:  # noqa: BLE001 - a guess never fails anything else
                log.warning("compile ahead of max_length %d failed", length, exc_info=True)
                return
            log.info("compile ahead of max_length %d (the last run's was %d): set up in %.1f s, %d program(s) "
                     "queued", length, cfg.data.max_length, time.perf_counter() - t0, len(futures))
        finally:
            if rest and not req.superseded:
                with queue.for_request(req):
                    queue.submit(self._plan_neighbours, cfg, req, rest, what="set-up", purpose=NEIGHBOURS)

    def at_start(self) -> None:
        """Compile ahead for the last launched config once the devices are known (in a thread;
        on an accelerator, or anywhere with ``GEMMA_WORKBENCH_COMPILE_AHEAD=on``)."""
        if mode() == "off" or not last_config_path().is_file():
            return
        threading.Thread(target=self._start_up, name="compile-ahead-start", daemon=True).start()

    def remember(self, cfg: Any) -> None:
        """The config of a launched run: the one compiled ahead at the engine's next start."""
        path = last_config_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(cfg.to_toml(), encoding="utf-8")
            os.replace(tmp, path)
        except OSError as e:  # never fails a launch
            log.warning("the last launched config was not remembered (%s)", e)

    def jobs(self, request: int = 0) -> api.CompileJobs:
        from adapters_lib.train import step_programs

        ok, why = self.allowed() if self.engine.runtime.devices_known.is_set() else (False, "")
        jobs = [api.CompileJobInfo.from_json(j) for j in step_programs.jobs()
                if not request or j["request"] == request]
        return api.CompileJobs(ahead=ok, backend=self.engine.runtime.backend or "", message=why,
                               latest=self.latest, jobs=jobs)

    # ----------------------------------------------------------------- inside

    def _busy(self) -> bool:
        runs = self.engine.run_queue
        return runs.training() is not None or runs.has_queued()

    def _set(self, req: Any, state: str, message: str = "") -> api.CompileRequestInfo:
        info = api.CompileRequestInfo(request=req.id, state=state, about=req.about, message=message,
                                      since=time.time())
        with self._lock:
            if self.latest is None or self.latest.request <= req.id:
                self.latest = info
        return info

    def _submit(self, cfg: Any, req: Any, force: bool) -> None:
        self.engine.on_device(lambda: self._plan(cfg, req, force), label=f"compile ahead {req.about}",
                              internal=True)

    def _plan(self, cfg: Any, req: Any, force: bool) -> None:
        """(The device thread.) The run's set-up, then its programs queued under ``req``."""
        from adapters_lib.train import step_programs
        from adapters_lib.train.plan import compile_ahead

        if req.superseded:
            self._set(req, "superseded")
            return
        if self.engine.run_queue.training() is not None:  # served between a run's steps: later
            self._set(req, "deferred", "a run trains: these programs compile when it ends")
            with self._lock:
                self._deferred = (cfg, req, force)
            return
        t0 = time.perf_counter()
        try:
            with step_programs._behind().for_request(req):
                futures = compile_ahead(cfg, force=force or mode() == "on")
        except WorkbenchError as e:
            self._set(req, "failed", str(e))
            log.info("compile ahead of %s: %s", req.about, e)
            return
        except Exception as e:  # noqa: BLE001 - a compile ahead never fails anything else
            self._set(req, "failed", f"{type(e).__name__}: {e}")
            log.warning("compile ahead of %s failed", req.about, exc_info=True)
            return
        self._set(req, "superseded" if req.superseded else "planned")
        log.info("compile ahead of %s: set up in %.1f s, %d program(s) queued", req.about,
                 time.perf_counter() - t0, len(futures))

    def _start_up(self) -> None:
        from adapters_lib.config import config_from_dict, parse_toml

        self.engine.runtime.wait_devices()
        ok, why = self.allowed()
        if not ok:
            log.info("no compile ahead at start: %s", why)
            return
        path = last_config_path()
        try:
            text = path.read_text(encoding="utf-8")
            cfg = config_from_dict(parse_toml(text, str(path)), source=str(path), text=text)
        except (OSError, WorkbenchError) as e:
            log.warning("no compile ahead at start: the last config does not load (%s)", e)
            return
        log.info("compiling ahead for the last launched config (%s)", describe(cfg))
        try:
            self.request(cfg)
        except Exception:  # noqa: BLE001 - the engine serves on without it
            log.warning("compile ahead at start failed", exc_info=True)
