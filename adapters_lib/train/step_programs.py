"""The train and eval steps' jitted programs, kept by shape in this process.

``train.step.build_steps`` makes four jitted functions per run (the train step, the eval
step, the optimizer's init, a copy). Made anew, each would be traced and lowered again at
its first call, even when an earlier run in the same engine had the very same shapes —
and the persistent compile cache only spares the XLA compile, not the tracing. So the
functions are kept here, keyed by everything their program depends on (``program_key``),
and a run whose key was seen before gets the same jitted objects back: their in-memory
executables serve it, nothing is traced or compiled.

What is in the key: the model's class and config, the params' dtype, the LoRA spec, the
trainable and base trees (structure, shapes, dtypes), the mesh (devices, axes, sizes), the
batch shape (batch size, sequence length, micro-batches), the compute dtype, remat, the
optimizer's kind (schedule shape, clipping, weight decay), the cross-entropy chunk and kernel,
and the attention kind. What is not: the learning rate, warm-up and step count (inputs of the step,
``optimizer.schedule_hparams``), the seed, the data and the run's name — so an lr-only
change, a longer run and the next point of a sweep compile nothing.

Across engines (``StepProgram``): with the program store on (``program_store``, which the
engine enables), the train and eval steps' executables are kept on disk under the same key
plus ``slots`` and the batch's shapes, and a new engine reads them back instead of tracing,
lowering and asking the persistent compile cache (a new engine's second launch of the real
270M traced its train step for ~5 s and lowered it for ~1.5 s before the cache answered).

Compiles behind run on the engine's one compile queue (``compile_queue``: ``_behind()``, with
``listen``/``jobs`` here for its listeners); a step that compiles in the foreground, or waits
for a compile under way, is announced there too (``where = "foreground"``), so that a run can
say what it waits for.

``GEMMA_WORKBENCH_STEP_PROGRAMS``: how many keys are kept (default 8; 0 turns keeping off).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_KEPT: collections.OrderedDict[tuple, Any] = collections.OrderedDict()
_LOCK = threading.RLock()
stats = {"kept": 0, "made": 0}
"""How often a run got kept programs and how often new ones were made (tests, logs)."""


def capacity() -> int:
    try:
        return max(0, int(os.environ.get("GEMMA_WORKBENCH_STEP_PROGRAMS", "8")))
    except ValueError:
        return 8


def tree_signature(tree: Any) -> tuple:
    """Structure, shapes and dtypes of a params tree (arrays or ShapeDtypeStructs)."""
    import jax

    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return (str(treedef), tuple((tuple(getattr(x, "shape", ())), str(getattr(x, "dtype", type(x).__name__)))
                                for x in leaves))


def mesh_signature(mesh: Any) -> tuple:
    return (tuple(int(d.id) for d in mesh.devices.flat), tuple(mesh.axis_names),
            tuple(mesh.devices.shape), str(mesh.devices.flat[0].platform))


def program_key(model: Any, cfg: Any, mesh: Any, trainable: Any, base: Any, *, optimizer: Any,
                length: int, ce_chunk: int, gather_loss: bool, attention_kind: str,
                ce_kernel: str = "xla") -> tuple | None:
    """What the four programs depend on (see the module doc); None when the optimizer is not
    ours (an arbitrary optax transformation may hold constants that no key can name)."""
    spec = getattr(optimizer, "spec", None)
    if spec is None or not hasattr(optimizer, "at"):
        return None
    t = cfg.train
    return (
        type(model).__module__, type(model).__qualname__, repr(model),
        str(getattr(model, "dtype", "")), repr(cfg.lora) if cfg.lora.enabled else "full",
        tree_signature(trainable), tree_signature(base), mesh_signature(mesh),
        int(t.batch_size), int(length), int(t.grad_accum), str(t.compute_dtype), bool(t.remat),
        str(spec.schedule), float(spec.clip_norm), float(spec.weight_decay),
        int(ce_chunk), bool(gather_loss), str(attention_kind), str(ce_kernel),
    )


def kept(key: tuple | None, make: Callable[[], Any]) -> Any:
    """The programs kept for ``key``, or ``make()``'s (kept from now on)."""
    size = capacity()
    if key is None or size == 0:
        stats["made"] += 1
        return make()
    with _LOCK:
        if key in _KEPT:
            _KEPT.move_to_end(key)
            stats["kept"] += 1
            log.info("train/eval steps: the programs of an earlier run of the same shapes "
                     "(nothing to trace or compile)")
            return _KEPT[key]
    value = make()
    with _LOCK:
        stats["made"] += 1
        _KEPT[key] = value
        while len(_KEPT) > size:
            _KEPT.popitem(last=False)
    return value


_PROGRAMS: weakref.WeakSet = weakref.WeakSet()
RELEASERS: list[Callable[[], int]] = []
"""Callbacks that free device memory others hold (the engine's: Compare's tuned models), each
returning how many things it dropped: called when a step's program does not fit (``release``)."""


def out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is the device's "no room for this program or its buffers"."""
    text = str(err)
    return "RESOURCE_EXHAUSTED" in text or "Out of memory" in text or "E0101" in text


RELEASE_STAGES = ("the Compare's cached models", "the other step programs")
"""What ``release`` frees, cheapest to have again first, each stage with a full collection (a
dropped model's buffers held in reference cycles are freed only then: on the v5e the 1B's steps
after a release without one took 7.5 s each while the device was near full): a cached model is
placed again from the weights in a second; another step program is read back from the program
store in seconds (the 1B's family program took 8.7 s on the v5e), and the family's serves every
next tweak."""


def release(keep: Any, stage: int) -> int:
    """Free what others hold on the devices for ``keep`` (a ``StepProgram`` that does not fit
    beside them): ``RELEASE_STAGES[stage]``, then a full collection; how many things went."""
    import gc

    dropped = 0
    if stage == 0:
        for releaser in RELEASERS:
            try:
                dropped += int(releaser() or 0)
            except Exception:  # noqa: BLE001 - a releaser never hides the step's own error
                log.warning("a device-memory releaser failed", exc_info=True)
    else:
        for program in list(_PROGRAMS):
            if program is not keep and program.compiled:
                dropped += len(program.compiled)
                program.compiled.clear()
    if dropped:
        gc.collect()
    return dropped


class StepProgram:
    """A jitted step whose last argument is the static ``slots`` and whose fourth is the batch.

    With the program store off, or no key, a call is the jitted function's. With it on, the
    executable of each (``slots``, batch shapes) is read back from the store or compiled
    ahead of the call (and stored), then kept here: the next call, the next run of the same
    key in this engine, and the next engine trace nothing. An executable whose arguments do
    not match (a layout the key missed) gives way to the jitted function, with a warning.

    ``compile_behind`` compiles a program in a background thread (one at a time, this
    process) from abstract arguments while the device runs others: ``Steps`` asks for the
    eval step's before the first eval and, on an accelerator, for a batch's own program
    while a wider one (more loss positions) serves it.
    """

    def __init__(self, jitted: Any, name: str, key: tuple | None):
        self.jitted = jitted
        self.name = name
        self.key = key
        self.compiled: dict[tuple, Any] = {}
        self.called: set[tuple] = set()
        self.pending: dict[tuple, Any] = {}
        self.lower = jitted.lower
        _PROGRAMS.add(self)

    @staticmethod
    def signature(batch: Any, slots: int) -> tuple:
        return (int(slots), tuple((k, tuple(v.shape), str(v.dtype)) for k, v in sorted(batch.items())))

    def ready(self, sig: tuple) -> bool:
        """Whether a call with ``sig`` runs without compiling (kept, stored, or called before)."""
        return sig in self.compiled or sig in self.called

    @property
    def what(self) -> str:
        """The program in words ("train step"), as the compile queue's jobs name it."""
        return self.name.replace("_", " ")

    def compile_behind(self, *args: Any) -> Any:
        """Compile (or read back) the program for ``args`` (abstract ones will do; the last is
        ``slots``) in the background; the future, or None when it is ready or under way (inside
        ``compile_queue.for_request``, listed under that request all the same). A future
        cancelled while it waits (a newer request, or the step itself) is forgotten here."""
        sig = self.signature(args[3], args[-1])
        queue = _behind()
        with _LOCK:
            known = self.pending.get(sig)
            if self.ready(sig) or known is not None:
                queue.adopt(known, self.what)
                return None
            future = queue.submit(self._compile, sig, args, what=self.what)
            if not future.done():
                self.pending[sig] = future
        future.add_done_callback(lambda f: self._forget_pending(sig, f))
        return future

    def compile_now(self, *args: Any, lowered: Callable[[], None] | None = None) -> bool:
        """Compile (or read back) the program for ``args`` in this thread, as the call would (a
        foreground job), before the call: False when it is ready or compiling behind already.
        ``lowered``: called once the program is traced and lowered (XLA's compile, which
        releases the GIL, follows), if it is."""
        sig = self.signature(args[3], args[-1])
        with _LOCK:
            if self.ready(sig) or sig in self.pending:
                return False
        with _behind().foreground(self.what):
            self.compiled[sig] = self._load_or_compile(sig, args, lowered)
        return True

    def _forget_pending(self, sig: tuple, future: Any) -> None:
        with _LOCK:
            if self.pending.get(sig) is future:
                del self.pending[sig]

    def _load_or_compile(self, sig: tuple, args: tuple, lowered: Callable[[], None] | None = None) -> Any:
        """The executable for ``args``: the program store's (read back, or compiled and stored),
        or compiled here when the programs have no key. ``lowered``: see ``compile_now``."""
        from adapters_lib import program_store

        def lower() -> Any:
            out = self.jitted.lower(*args)
            if lowered is not None:
                lowered()
            return out

        if self.key is None:
            return lower().compile()
        return program_store.load_or_compile(self.name, (self.key, sig), lower)

    def _compile(self, sig: tuple, args: tuple) -> None:
        t0 = time.perf_counter()
        try:
            self.compiled[sig] = self._load_or_compile(sig, args)
            log.info("%s for %d loss positions a row: compiled behind the running steps in %.1f s",
                     self.name, sig[0], time.perf_counter() - t0)
        except Exception as e:  # the job fails; the call compiles it in the foreground instead
            log.warning("%s: the background compile failed (%s: %s); the step compiles it when it "
                        "needs it", self.name, type(e).__name__, str(e)[:300])
            raise

    def __call__(self, *args: Any) -> Any:
        from adapters_lib import program_store

        *dynamic, slots = args
        sig = self.signature(dynamic[3], slots)
        future = self.pending.get(sig)
        if future is not None and not future.cancel():  # under way: wait rather than compile twice
            with _behind().foreground(self.what):  # (a queued one is dropped: compiled here, now)
                try:
                    future.result()
                except Exception:  # noqa: BLE001 - failed or dropped behind: compiled below
                    pass
        fn = self.compiled.get(sig)
        if fn is None:
            if self.key is None or program_store.folder() is None:
                if sig in self.called:
                    return self.jitted(*args)
                self.called.add(sig)
                with _behind().foreground(self.what):  # traced, lowered, compiled by this call
                    return self.jitted(*args)
            with _behind().foreground(self.what):
                fn = self.compiled[sig] = self._load_or_compile(sig, args)
        if fn is self.jitted:
            return self.jitted(*args)
        try:
            return fn(*dynamic)
        except Exception as e:  # checked (or loaded) before anything runs: nothing donated yet
            if out_of_memory(e):  # not loaded: others hold the room (the engine's earlier programs)
                return self._run_after_release(fn, dynamic, e)
            if not isinstance(e, (TypeError, ValueError)):
                raise
            log.warning("%s: the compiled program does not take these arguments (%s): jitted", self.name, e)
            self.compiled[sig] = self.jitted
            return self.jitted(*args)

    def _run_after_release(self, fn: Any, dynamic: list, error: BaseException) -> Any:
        """``fn`` run once the device has room: ``release``'s stages one at a time, the
        cheapest first, each followed by a try; the device's last error when none made room."""
        for stage, what in enumerate(RELEASE_STAGES):
            if not release(self, stage):
                continue
            log.warning("%s: no room on the device for its program; %s released, then run",
                        self.name, what)
            try:
                return fn(*dynamic)
            except Exception as e:  # noqa: BLE001 - still no room: the next stage
                if not out_of_memory(e):
                    raise
                error = e
        raise error


_BEHIND: Any = None
_BEHIND_LOCK = threading.Lock()


def _behind() -> Any:
    """The one background thread programs compile on (``compile_queue.CompileQueue``: XLA's
    compile is mostly one thread). A daemon: an engine that stops does not wait for a compile
    nobody needs any more (a ``ThreadPoolExecutor``'s workers are joined at exit)."""
    global _BEHIND
    with _BEHIND_LOCK:
        if _BEHIND is None:
            from adapters_lib.train.compile_queue import CompileQueue

            _BEHIND = CompileQueue()
        return _BEHIND


def listen(callback: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
    """``callback(job)`` on every state change of a compile job (``compile_queue``); returns
    the function that stops it."""
    return _behind().listen(callback)


def jobs() -> list[dict[str, Any]]:
    """The compile queue's live jobs and its most recent finished ones."""
    return _behind().jobs()


def forget() -> None:
    """Drop every kept program (tests; a device change)."""
    with _LOCK:
        _KEPT.clear()
