"""A gemma-route run before it runs: ``plan_run(cfg)`` builds what the trainer's set-up needs —
the model on the mesh, the LoRA family (``lora.family``), the trainable tree, the optimizer, the
jitted steps, the data — and ``compile_ahead(cfg)`` queues the programs the run's first step and
its evals will need on the one compile thread (``step_programs``), so that a run launched later
finds them compiled (or waits for the compile already under way instead of starting another).

The set-up's time goes into ``RunPlan.timeline`` (seconds per phase), logged as one line: where
a run's start went is then read off the engine log, not guessed.

The loss positions (``loss.loss_slots``) the run's batches need are read from the host data
before the first step (``widest_slots``, within a time budget): the first program compiled is
the widest the run needs, so no batch later in the run compiles in the foreground.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from adapters_lib.config import RunConfig

log = logging.getLogger(__name__)

SLOTS_SCAN_SECONDS = 2.0
"""How long ``widest_slots`` may read batches on the host; past it the run's slots are the
whole length (every position: never narrower than a batch)."""


@dataclass
class RunPlan:
    """What ``plan_run`` built (see the module doc)."""

    loaded: Any
    mesh: Any
    rng: Any
    family: Any
    """``lora.family.LoraFamily`` or None (the exact program)."""
    own: Any
    """The run's own trainable tree and optimizer state, abstract (``OwnShapes``), when the
    program is a family's: what its checkpoints hold. None otherwise."""
    trainable: Any
    """The trainable tree in the program's shapes (fresh adapters, a reference's, or the params)."""
    steps: Any
    pipeline: Any
    eval_host: list[Any]
    """The run's eval batches on the host (``train.eval_batches`` of them), assembled once."""
    timeline: dict[str, float] = field(default_factory=dict)
    own_steps: Any = None
    """With a family's program serving the run (``family`` set): the run's own (exact) steps,
    whose programs compile behind and take over once ready (``ready``): the steady
    state is the exact program's speed, the family's only serves the first ~minute."""
    behind: list[tuple[Any, tuple]] = field(default_factory=list)
    """(program, abstract arguments) to compile behind after the run's own evals: the run's own
    train step (a family serves meanwhile), or the family's for the next tweak."""

    def describe_timeline(self) -> str:
        return ", ".join(f"{k} {v:.1f} s" for k, v in self.timeline.items())


@dataclass
class OwnShapes:
    """The run's own trainable tree and optimizer state (abstract, replicated): what its
    checkpoints hold when the step's program is a LoRA family's (padded) shapes."""

    params: Any
    opt_state: Any


class Timeline:
    def __init__(self) -> None:
        self.t = time.perf_counter()
        self.phases: dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = self.phases.get(name, 0.0) + now - self.t
        self.t = now


def plan_run(cfg: RunConfig) -> RunPlan:
    """The run's model, family, trainable tree, steps and data (nothing trained, nothing placed
    beyond the base params)."""
    import jax

    from adapters_lib import mesh as mesh_lib
    from adapters_lib.data import build_pipeline
    from adapters_lib.lora import traced_shapes
    from adapters_lib.models.loader import load_model
    from adapters_lib.train.optimizer import make_optimizer
    from adapters_lib.train.step import build_steps

    t = cfg.train
    clock = Timeline()
    devices = jax.devices()
    mesh = mesh_lib.make_mesh(cfg.mesh, devices)  # a bad device count fails here, in words
    clock.mark("devices")
    loaded = load_model(cfg.model_spec(), param_dtype=t.param_dtype, sharding=mesh_lib.sharding_fn(mesh))
    mesh_lib.check(cfg.mesh, loaded.config, t.batch_size, cfg.data.max_length, len(devices),
                   grad_accum=t.grad_accum)
    clock.mark("model")
    rng = jax.random.key(t.seed)
    init_rng, rng = jax.random.split(rng)
    if cfg.lora.enabled:
        # on the host: a new rank's few small init programs compile in milliseconds there (an
        # accelerator took 4-5 s for a rank tweak's); init_state places the tree on the mesh
        with on_host() as cpu:
            key = jax.device_put(init_rng, cpu) if cpu is not None else init_rng
            trainable = traced_shapes.init_lora(loaded.model, cfg.lora, loaded.params, key)
        base_params = loaded.params
    else:
        trainable = loaded.params
        base_params = None
    optimizer = make_optimizer(t)
    reference = reference_adapters(cfg, trainable)
    if reference is not None:  # the policy starts as its reference (step 1: δ = 0, loss log 2)
        trainable = reference
    family = _family(cfg, loaded.config, devices)
    own = None
    if family is not None:  # the program's shapes; checkpoints keep the run's own (``own``)
        own = _own_abstract(trainable, optimizer, mesh)
        trainable = fit_on_host(trainable, traced_shapes.adapter_shapes(loaded.model, family.program))
        log.info("LoRA: %s (train.programs = %r)", family.describe(), t.programs)
    clock.mark("adapters")
    steps = build_steps(loaded.model, cfg, optimizer, mesh, base_params, trainable,
                        reference_params=reference, family=family)
    clock.mark("steps")
    pipeline = build_pipeline(cfg.data, loaded.tokenizer, batch_size=t.batch_size, seed=t.seed,
                              kind=steps.objective.data)
    clock.mark("data")
    if steps.compile_behind:
        steps.run_slots = widest_slots(steps, pipeline, t.steps)
        clock.mark("loss positions")
    plan = RunPlan(loaded=loaded, mesh=mesh, rng=rng, family=family, own=own, trainable=trainable,
                   steps=steps, pipeline=pipeline, eval_host=pipeline.eval_batches(t.eval_batches),
                   timeline=clock.phases)
    if family is not None and steps.compile_behind:
        _choose_program(plan, cfg, optimizer, base_params, reference)
        clock.mark("programs")
    return plan


@contextlib.contextmanager
def on_host() -> Iterator[Any]:
    """JAX's default device is this host's CPU inside (its device; None, and the default device
    as it is, where JAX_PLATFORMS left the CPU out or the job spans processes: there every
    process makes the same values where the old path did)."""
    import jax

    try:
        cpu = jax.local_devices(backend="cpu")[0] if jax.process_count() == 1 else None
    except RuntimeError:
        cpu = None
    if cpu is None:
        yield None
        return
    with jax.default_device(cpu):
        yield cpu


def fit_on_host(tree: Any, like: Any) -> Any:
    """``lora.family.fit`` of fresh adapters in numpy, kept on the host's CPU device: no pad or
    slice op compiled for each leaf's shape (the 270M's first fit took 2.2 s so on two cores,
    0.02 s in numpy). Where ``on_host`` has no CPU device, the same fit as JAX ops."""
    import jax

    from adapters_lib.lora import family as lora_family

    with on_host() as cpu:
        if cpu is None:
            return lora_family.fit(tree, like)
        return jax.device_put(lora_family.fit(tree, like, host=True), cpu)


def first_args(steps: Any, batch: Any) -> tuple:
    """The train step's abstract arguments for the run's first batch (at the run's widest loss
    positions): what ``compile_behind`` takes and the signature ``ready`` asks about."""
    import jax
    import numpy as np

    abstract = {k: jax.ShapeDtypeStruct(np.shape(batch[k]), np.asarray(batch[k]).dtype, sharding=steps.batch_sharding)
                for k in steps.keys}
    slots = max(steps.slots_for(batch), steps.run_slots or 0)
    return steps._abstract_args("train", abstract, slots)


def ready(steps: Any, args: tuple) -> bool:
    """Whether ``steps``' train program for ``args`` (``first_args``) runs without compiling:
    compiled here, read back, or a background compile done without error."""
    program = steps._train
    return program.ready(program.signature(args[3], args[-1]))


def _coming(steps: Any, args: tuple) -> bool:
    """Compiled, or compiling behind already (the first step waits for it: less than a compile)."""
    program = steps._train
    sig = program.signature(args[3], args[-1])
    return program.ready(sig) or sig in program.pending


def _choose_program(plan: RunPlan, cfg: RunConfig, optimizer: Any, base_params: Any, reference: Any) -> None:
    """Which program serves a family run first (an accelerator): the run's own when compiled (an
    earlier run of this config); else the family's, the run's own compiling behind to take over.
    The family's is compiled already after any earlier run of the model (a tweak: no wait); on a
    cold start it compiles now, in the time the run's own would have taken, so that a rank, alpha
    or targets tweak right after the launch finds it ready (on a v5e, with the run's own first
    and the family's behind, a rank tweak 18 s after the 270M's first step waited 16 s for the
    family's compile). What the family's step costs depends on its bucket: at the Gemma-3-1B
    shape on a v5e the rank-32 family ``"auto"`` picks at 4 × 2048 ran 3.5 % faster than the
    run's own program, the rank-128 family at 2 × 2048 7.6 % (r16 on every target) to 39 % (r8
    on q, v) slower (BENCHMARKS.md, "TPU v5e"): so the family serves the wait, and the run's own
    takes over once compiled. The run's own serves only with its eval steps compiled too, unless
    the family's lacks some as well: on a v5e a ``max_length`` tweak compiled ahead (``prepare``:
    the family's train and eval steps, then the run's own train step) found the own train step
    ready and compiled its eval step in the foreground, step 1 at 12.9 s instead of ~2 s."""
    from adapters_lib.train.step import build_steps

    fam = plan.steps
    own = build_steps(plan.loaded.model, cfg, optimizer, plan.mesh, base_params, plan.own.params,
                      reference_params=reference)
    own.run_slots = fam.run_slots
    first = plan.pipeline.train_batch(0)
    own_args, fam_args = first_args(own, first), first_args(fam, first)
    own_ready, fam_ready = ready(own, own_args), ready(fam, fam_args) and fam.evals_ready(plan.eval_host)
    if own_ready and (own.evals_ready(plan.eval_host) or not fam_ready):
        plan.trainable = fit_on_host(plan.trainable, plan.own.params)
        plan.steps, plan.family, plan.own = own, None, None
        log.info("LoRA: the run's own program (compiled before)")
        return
    plan.own_steps = own
    plan.behind.append((own._train, own_args))
    if _coming(fam, fam_args):
        log.info("LoRA: the family's compiled program serves the run while its own compiles behind")
    else:
        log.info("LoRA: the family's program compiles now and serves the run (ready for the next rank, "
                 "alpha or targets) while the run's own compiles behind")


def compile_takeover(steps: Any, own: OwnShapes) -> Any:
    """The future of one compiled program that moves the family's state to the run's own shapes
    (``lora.family.fit`` of the params and the optimizer state, on the device), compiled on the
    compile thread: the takeover then runs one program, no per-shape eager op compiles mid-run."""
    import jax

    from adapters_lib.lora import family as lora_family
    from adapters_lib.train import step_programs

    state = steps.abstract_state

    def move(params, opt_state):
        return lora_family.fit(params, own.params), lora_family.fit(opt_state, own.opt_state)

    fn = jax.jit(move, out_shardings=(jax.tree.map(lambda x: x.sharding, own.params),
                                      jax.tree.map(lambda x: x.sharding, own.opt_state)))
    return step_programs._behind().submit(lambda: fn.lower(state.params, state.opt_state).compile(),
                                          what="takeover (family → own shapes)")


def _family(cfg: RunConfig, config: Any, devices: list) -> Any:
    """The run's LoRA family (``run_estimate.run_program``: with "auto", the largest rank bucket whose
    padded adapters fit the device), or None for the exact program."""
    from adapters_lib.lora import family as lora_family
    from adapters_lib.memory import run_estimate
    from adapters_lib.memory.device import device_memory_bytes

    platform = devices[0].platform
    family = lora_family.run_family(cfg, platform)
    if family is None or cfg.train.programs != "auto":
        return family
    limit = device_memory_bytes(devices[0])
    if not limit:
        return family
    got = run_estimate.run_program(cfg, config, device_count=len(devices), device_bytes=limit, platform=platform)
    if got is None or got.program.rank != family.program.rank:
        full = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, programs="family"))
        padded = run_estimate.estimate_run(full, config, device_count=len(devices), device_bytes=limit,
                                           platform=platform)
        log.info("LoRA: %s (a rank-%d family's adapters would need %.1f of %.1f GiB)",
                 "the exact program" if got is None else f"a rank-{got.program.rank} family",
                 family.program.rank, padded.total / 2**30, limit / 2**30)
    return got


def widest_slots(steps: Any, pipeline: Any, total_steps: int, budget: float = SLOTS_SCAN_SECONDS) -> int | None:
    """The most loss positions a row any of the run's ``total_steps`` batches needs
    (``Steps.slots_for``), read on the host; the whole length when the scan would take longer
    than ``budget`` seconds or the data streams (None: unknown, no data)."""
    from adapters_lib.data.batches import Pipeline

    length = int(pipeline.max_length) if hasattr(pipeline, "max_length") else None
    if not isinstance(pipeline, Pipeline):  # a stream: its batches are read as the run goes
        return length
    t0 = time.perf_counter()
    widest = 0
    for step in range(total_steps):
        widest = max(widest, steps.slots_for(pipeline.train_batch(step)))
        if widest == length:
            break
        if time.perf_counter() - t0 > budget:
            log.info("loss positions: %d steps read in %.1f s; the run's programs keep every position",
                     step + 1, budget)
            return length
    return widest or None


def compile_ahead(cfg: RunConfig, *, force: bool = False, own: bool = True) -> list[Any]:
    """Queue the compiles of ``cfg``'s first train step and its eval steps on the compile thread
    (``StepProgram.compile_behind``); the futures started (none when each is ready or under way,
    or on a CPU unless ``force``: there a compile takes the cores the steps need). A LoRA
    family's run: the family's steps, then the run's own eval and train steps (the launch then
    serves from its own: ``_choose_program``); ``own`` False: the family's only.

    Each program's eval steps are queued before its train step: forward only, they compile in a fraction
    of its time (the 270M's at max_length 256 on the v5e: 10 s against 59 s), and a run's base
    eval needs them before its step 1 whereas its train step may run in a wider program
    (``compiled_steps``). A guess (a neighbouring ``max_length``) starts only between runs, so
    its last job waited longest: queued after the train step, the eval step of the 270M's
    ``max_length`` 256 waited through five runs and held that row's step 1 to 7.5 s."""
    plan = plan_run(cfg)
    steps = plan.steps
    if not (steps.compile_behind or force):
        return []
    futures = _evals_behind(steps, plan.eval_host)
    futures.append(steps._train.compile_behind(*first_args(steps, plan.pipeline.train_batch(0))))
    if own and plan.own_steps is not None:  # its eval steps too: the run's own then serves from step 1
        futures += _evals_behind(plan.own_steps, plan.eval_host)
    futures += [program.compile_behind(*args) for program, args in plan.behind if own or plan.own_steps is None]
    return [f for f in futures if f is not None]


def _evals_behind(steps: Any, batches: list) -> list[Any]:
    """``steps``' eval programs for the host ``batches`` queued on the compile thread (a CPU's
    steps too: ``compile_ahead``'s ``force``); the futures started."""
    saved, steps.compile_behind = steps.compile_behind, True
    try:
        return steps.compile_eval_behind([steps.put_batch(b) for b in batches])
    finally:
        steps.compile_behind = saved


def reference_adapters(cfg: RunConfig, trainable: Any) -> Any:
    """The adapters of the reference model an objective asks for (DPO ``reference = "run:…"``:
    that run's, which the trained adapters also start from, as TRL and LLaMA-Factory start the
    policy from the model they take as the reference), or None: the base with the adapters off
    (the trained adapters start at zero: the policy is the base)."""
    ref = getattr(cfg.train, "reference", "base")
    if not ref or ref == "base" or not cfg.lora.enabled:
        return None
    from adapters_lib.train.objectives.dpo import load_reference_adapters

    return load_reference_adapters(cfg, ref, trainable)


def _own_abstract(trainable: Any, optimizer: Any, mesh: Any) -> OwnShapes:
    import jax

    from adapters_lib import mesh as mesh_lib

    rep = mesh_lib.replicated(mesh)
    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=rep), trainable)
    opt = jax.eval_shape(optimizer.init, params)
    return OwnShapes(params, jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=rep), opt))
