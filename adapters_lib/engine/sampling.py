"""Device jobs of the engine: sample, compare (one turn, a chat, a compare set) and export.

They run on the device thread and go through the one tuned-model path
(``adapters_lib.tuned``): a run's checkpoint, an exported adapter folder or a bare base model
is a ``TunedModel``; the last few are cached (a chat of several turns loads the weights
once). Each streamed text piece is handed to ``emit(type, data)``; when ``emit`` returns
False (the client went away) generation stops at the next piece.

Done replies carry, per side, the tokens, ``tokens_per_s`` and the ``stop_reason``
("stop": the model ended its turn, "length": ``max_tokens`` reached, "cancelled").
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def forget(run_path: Path) -> None:
    """Drop cached models of a run (it was deleted, or it trains on)."""
    with _LOCK:
        for key in [k for k in _CACHE if k[0] == "run" and k[1] == str(run_path)]:
            del _CACHE[key]


# --------------------------------------------------------------------------- the model


def run_dir_of(engine: Any, ref: str) -> Any:
    """A run named by id/prefix (the engine's run roots) or by its folder (an absolute path)."""
    from adapters_lib import runs

    path = Path(ref)
    if path.is_absolute():
        if path.is_symlink() or not (path / "config.toml").is_file():
            raise EngineError(f"{ref} is not a run directory (no config.toml)", status=404,
                              hint="pass a run id, or the folder `gemma-workbench train` printed")
        return runs.RunDir(path)
    return engine.find_run(ref)


def tuned_model(run: Any = None, step: int = -1, *, adapter: str = "", model: str = "") -> Any:
    """The ``TunedModel`` a request names: a run's checkpoint, an adapter folder, or a base."""
    from adapters_lib import tuned

    if run is not None:
        from adapters_lib.tuned.checkpoint import checkpoint_step

        if run.config().model.backend == "keras":
            got = None if step < 0 else step
        else:
            got = checkpoint_step(run, None if step < 0 else step)
        return _cached(("run", str(run.path), got), lambda: tuned.load_run_model(run, got))
    if adapter:
        return _cached(("adapter", adapter, model), lambda: tuned.load_adapter_model(adapter, model))
    return _cached(("base", model or "demo"), lambda: tuned.load_base_model(model or "demo"))


def settings_of(cmd: Any) -> Any:
    from adapters_lib.sample.settings import SamplingSettings

    return SamplingSettings(max_new_tokens=cmd.max_tokens, temperature=cmd.temperature,
                            top_k=getattr(cmd, "top_k", 0), top_p=getattr(cmd, "top_p", 1.0),
                            seed=cmd.seed)


def _side_stats(answers: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {"tokens": {s: a.tokens for s, a in answers.items()},
            "tokens_per_s": {s: a.tokens_per_s for s, a in answers.items()},
            "stop_reason": {s: a.stop_reason for s, a in answers.items()}}


def _token(piece: Any, *, side: bool, turn: int | None = None, row: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"text": piece.text, "token": piece.token, "done": piece.done}
    if side:
        data["side"] = piece.side
    if piece.done:
        data["stop_reason"] = piece.stop_reason
    if turn is not None:
        data["turn"] = turn
    if row is not None:
        data["row"] = row
    return data


# --------------------------------------------------------------------------- jobs


def sample_job(engine: Any, cmd: Any, run: Any, emit: Emit) -> dict[str, Any]:
    """One model answers one prompt (or the next turn of a chat)."""
    t0 = time.perf_counter()
    model = tuned_model(run, cmd.step, adapter=getattr(cmd, "adapter", ""), model=cmd.model)
    side = "tuned" if model.has_tuned else "base"
    prompt = list(cmd.messages) if getattr(cmd, "messages", None) else cmd.prompt
    answers = model.generate({side: [prompt]}, settings_of(cmd), chat=cmd.chat,
                             on_piece=lambda p: emit("token", _token(p, side=False)))
    answer = answers[side][0]
    return {"text": answer.text, "tokens": answer.tokens, "seconds": round(time.perf_counter() - t0, 3),
            "step": model.step, "complete": answer.stop_reason != "cancelled",
            "tokens_per_s": answer.tokens_per_s, "stop_reason": answer.stop_reason}


def compare_job(engine: Any, cmd: Any, run: Any, emit: Emit) -> dict[str, Any]:
    """Base and tuned answer one prompt, or every unanswered user turn of one conversation
    (``messages``; each side with its own history). Token items carry ``side`` (and ``turn``
    for a conversation); the done reply has the last turn's texts plus every turn's."""
    from adapters_lib.sample.conversation import Conversation, replay

    t0 = time.perf_counter()
    model = tuned_model(run, cmd.step, adapter=getattr(cmd, "adapter", ""), model=getattr(cmd, "model", ""))
    messages = getattr(cmd, "messages", None)
    conv = (Conversation.from_messages(list(messages), where="compare request: messages") if messages
            else Conversation.from_prompt(cmd.prompt, where="compare request: prompt"))
    system = getattr(cmd, "system", "")
    if system and conv.system is None:
        conv.system = system
    cancelled = False

    def on_piece(_row: int, turn: int, piece: Any) -> bool:
        nonlocal cancelled
        ok = emit("token", _token(piece, side=True, turn=turn if messages else None))
        cancelled = cancelled or not ok
        return ok

    [conv] = replay(model, [conv], settings_of(cmd), chat=cmd.chat, on_piece=on_piece)
    last = next((t for t in reversed(conv.turns) if not t.given and t.answers), conv.turns[-1])
    stats = _side_stats({s: last.answers[s] for s in ("base", "tuned") if s in last.answers})
    out = {"base": last.text("base"), "tuned": last.text("tuned"), **stats,
           "seconds": round(time.perf_counter() - t0, 3), "step": model.step, "complete": not cancelled}
    if messages:
        out["turns"] = [{"user": t.user, "reference": t.reference, "given": t.given,
                         **{s: t.text(s) for s in ("base", "tuned")},
                         **({"sides": {s: t.answers[s].to_dict() for s in ("base", "tuned")}}
                            if not t.given and "base" in t.answers else {})}
                        for t in conv.turns]
    return out


def compare_set_job(engine: Any, cmd: Any, run: Any, emit: Emit) -> dict[str, Any]:
    """A whole compare set (prompts and conversations), batched turn by turn, saved beside the
    run unless ``save`` is false. Token items carry ``row`` (the item) and ``turn``."""
    from adapters_lib.sample.compare_sets import save_compare
    from adapters_lib.sample.conversation import Conversation

    t0 = time.perf_counter()
    model = tuned_model(run, cmd.step, adapter=cmd.adapter, model=cmd.model)
    convs = []
    for i, item in enumerate(cmd.items):
        where = f"compare_set request: items[{i}]"
        conv = (Conversation.from_messages(item.messages, where=where) if item.messages
                else Conversation.from_prompt(item.prompt, where=where))
        if item.system and conv.system is None:
            conv.system = item.system
        convs.append(conv)
    settings = settings_of(cmd)
    cancelled = False

    def on_piece(row: int, turn: int, piece: Any) -> bool:
        nonlocal cancelled
        ok = emit("token", _token(piece, side=True, turn=turn, row=row))
        cancelled = cancelled or not ok
        return ok

    done = model.converse(convs, settings, chat=cmd.chat, on_piece=on_piece)
    records = [{**c.record(), "settings": model.settings_record(settings), "step": model.step} for c in done]
    saved = None
    if cmd.save and model.run_path is not None and not cancelled:
        saved = str(save_compare(model.run_path, records))
    return {"results": records, "saved": saved, "step": model.step, "complete": not cancelled,
            "seconds": round(time.perf_counter() - t0, 3)}


def export_job(engine: Any, cmd: Any, run: Any) -> dict[str, Any]:
    """Export a run's checkpoint in the one vocabulary (``export.formats``)."""
    from adapters_lib.export import formats
    from adapters_lib.export.run import check_format, default_out
    from adapters_lib.export.target import resolve_target

    fmt = formats.resolve(cmd.format, cmd.kind, where="export request: format")
    if cmd.out and not Path(cmd.out).expanduser().is_absolute():
        raise EngineError(f"out {cmd.out!r} is a relative path", where="export request: out", status=400,
                          hint="send an absolute folder (the engine's working directory is not yours)")
    check_format(run.config(), fmt, run.run_id)
    resolve_target(cmd.out or default_out(run.path, fmt), force=cmd.force, owned=not cmd.out,
                   where="export request: out")  # refuse before loading anything
    model = tuned_model(run, cmd.step)
    result = model.export(fmt, cmd.out or None, force=cmd.force)
    return {"run_id": run.run_id, "kind": formats.KINDS[fmt], "format": fmt, "out": result["out"],
            "step": result["step"], "result": result}
