"""Device jobs of the engine: sampling, A/B and export, run on the device thread.

They adapt ``adapters_lib.sample`` (the generation area) and ``adapters_lib.export`` to the
engine's streams: each text piece is handed to ``emit(type, data)``; when ``emit`` returns
False (the client went away) generation stops at the next piece. Loaded models are cached
(the last few (run, step) pairs), so a chat of several prompts loads the weights once.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

from adapters_lib import runs
from adapters_lib.engine import commands as C
from adapters_lib.engine.compute import as_json
from adapters_lib.engine.errors import EngineError

Emit = Callable[[str, dict[str, Any]], bool]
_CACHE: collections.OrderedDict[tuple, Any] = collections.OrderedDict()
_CACHE_SIZE = 2
_LOCK = threading.Lock()


def _cached(key: tuple, make: Callable[[], Any]) -> Any:
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    value = make()
    with _LOCK:
        _CACHE[key] = value
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return value


def _latest_step(run: runs.RunDir, step: int) -> int | None:
    from adapters_lib.engine.service import checkpoint_steps

    steps = checkpoint_steps(run)
    if not steps:
        raise EngineError(f"run {run.run_id} has no checkpoint yet", status=409,
                          hint="wait for its first checkpoint (train.checkpoint_every)")
    return steps[-1] if step < 0 else step


def _tuned(run: runs.RunDir, step: int) -> dict[str, Any]:
    """{"cfg", "sampler", "adapters", "tuned_sampler", "step"} for a run's checkpoint."""
    step = _latest_step(run, step)

    def make() -> dict[str, Any]:
        from adapters_lib.sample import Sampler

        cfg, loaded, trainable, got = runs.load_tuned(run.path, step)
        if cfg.lora.enabled:
            sampler = Sampler.from_loaded(loaded, cfg.lora)
            return {"cfg": cfg, "sampler": sampler, "adapters": trainable, "tuned_sampler": None,
                    "step": got}
        base = Sampler.from_loaded(loaded)
        tuned = Sampler(loaded.model, trainable, loaded.tokenizer)
        return {"cfg": cfg, "sampler": base, "adapters": None, "tuned_sampler": tuned, "step": got}

    return _cached(("run", str(run.path), step), make)


def _base(source: str) -> Any:
    def make() -> Any:
        from adapters_lib.config import ModelSpec
        from adapters_lib.models.loader import load_model
        from adapters_lib.sample import Sampler

        return Sampler.from_loaded(load_model(ModelSpec(source=source)))

    return _cached(("base", source), make)


def _settings(cmd: C.Sample | C.Compare) -> Any:
    from adapters_lib.sample import SamplingSettings

    return SamplingSettings(max_new_tokens=cmd.max_tokens, temperature=cmd.temperature,
                            seed=cmd.seed)


def _pump(pieces, emit: Emit, sides: tuple[str, ...]) -> tuple[dict[str, str], dict[str, int], bool]:
    texts = {s: "" for s in sides}
    counts = {s: 0 for s in sides}
    for piece in pieces:
        side = sides[piece.variant] if piece.variant < len(sides) else str(piece.variant)
        texts[side] += piece.text
        counts[side] += piece.token is not None
        data = {"text": piece.text, "token": piece.token, "done": piece.done}
        if len(sides) > 1:
            data["side"] = side
        if not emit("token", data):
            pieces.close()
            return texts, counts, False
    return texts, counts, True


def sample_job(engine: Any, cmd: C.Sample, run: runs.RunDir | None, emit: Emit) -> dict[str, Any]:
    t0 = time.perf_counter()
    settings = _settings(cmd)
    step = None
    if run is not None:
        tuned = _tuned(run, cmd.step)
        step = tuned["step"]
        if tuned["tuned_sampler"] is not None:
            pieces = tuned["tuned_sampler"].stream_grid([cmd.prompt], [None], settings, chat=cmd.chat)
        else:
            pieces = tuned["sampler"].stream_grid([cmd.prompt], [tuned["adapters"]], settings,
                                                  chat=cmd.chat)
    else:
        pieces = _base(cmd.model).stream_grid([cmd.prompt], [None], settings, chat=cmd.chat)
    texts, counts, complete = _pump(pieces, emit, ("text",))
    seconds = time.perf_counter() - t0
    return {"text": texts["text"], "tokens": counts["text"], "seconds": round(seconds, 3),
            "step": step, "complete": complete}


def compare_job(engine: Any, cmd: C.Compare, run: runs.RunDir | None, emit: Emit) -> dict[str, Any]:
    assert run is not None
    t0 = time.perf_counter()
    settings = _settings(cmd)
    tuned = _tuned(run, cmd.step)
    if tuned["tuned_sampler"] is None:
        pieces = tuned["sampler"].stream_grid([cmd.prompt], [None, tuned["adapters"]], settings,
                                              chat=cmd.chat)
        texts, counts, complete = _pump(pieces, emit, ("base", "tuned"))
    else:  # a full fine-tune: two models, one after the other
        texts, counts, complete = _pump(
            tuned["sampler"].stream_grid([cmd.prompt], [None], settings, chat=cmd.chat),
            emit, ("base",))
        if complete:
            t2, c2, complete = _pump(
                tuned["tuned_sampler"].stream_grid([cmd.prompt], [None], settings, chat=cmd.chat),
                lambda kind, data: emit(kind, {**data, "side": "tuned"}), ("tuned",))
            texts.update(t2)
            counts.update(c2)
    seconds = time.perf_counter() - t0
    return {"base": texts.get("base", ""), "tuned": texts.get("tuned", ""),
            "tokens": counts, "seconds": round(seconds, 3), "step": tuned["step"],
            "complete": complete}


def export_job(engine: Any, cmd: C.Export, run: runs.RunDir) -> dict[str, Any]:
    from adapters_lib import export

    step = None if cmd.step < 0 else cmd.step
    kwargs: dict[str, Any] = {"step": step, "force": cmd.force}
    if cmd.out:
        kwargs["out"] = cmd.out
    if cmd.format:
        kwargs["format"] = cmd.format
    fn = export.export_adapter if cmd.kind == "adapter" else export.export_merged
    result = fn(run.path, **kwargs)
    return {"run_id": run.run_id, "kind": cmd.kind, "result": as_json(result)}
