"""Device jobs of the engine: sample, compare (one turn, a chat, a compare set).

They run on the device thread and go through the one tuned-model path
(``adapters_lib.tuned``): a run's checkpoint, an exported adapter folder or a bare base model
is a ``TunedModel``; the last few are cached (a chat of several turns loads the weights
once; export and eval, ``engine.checkpoint_jobs``, share the cache). Each streamed text piece is handed to ``emit(type, data)``; when ``emit`` returns
False (the client went away) generation stops at the next piece.

Done replies carry, per side, the tokens, ``tokens_per_s`` and the ``stop_reason``
("stop": the model ended its turn, "length": ``max_new_tokens`` reached, "cancelled").
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters_lib.engine.errors import EngineError
from adapters_lib.errors import WorkbenchError

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


def forget_all() -> int:
    """Drop every cached tuned model (a run's step needs the device memory they hold); how many."""
    with _LOCK:
        n = len(_CACHE)
        _CACHE.clear()
    return n


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


def adapter_dir(cmd: Any) -> str:
    """The request's adapter folder: absolute, holding an adapter_config.json."""
    adapter = getattr(cmd, "adapter", "")
    if not adapter:
        return ""
    path = Path(adapter)
    if not path.is_absolute():
        raise EngineError(f"adapter {adapter!r} is a relative path", status=400, where=f"{cmd.name} request: adapter",
                          hint="send an absolute folder (the engine's working directory is not yours)")
    if not (path / "adapter_config.json").is_file():
        raise EngineError(f"{adapter} has no adapter_config.json", status=404, where=f"{cmd.name} request: adapter",
                          hint="pass a folder written by `gemma-workbench export --format adapter`")
    return adapter


def tuned_model(run: Any = None, step: int = -1, *, adapter: str = "", model: str = "",
                quantize: str = "", generation_dtype: str = "", generating: bool = False) -> Any:
    """The ``TunedModel`` a request names: a run's checkpoint, an adapter folder, or a base;
    ``quantize`` (not "") holds its base that way instead of the run's ``[model] quantize``;
    ``generation_dtype`` (not "") a generation copy in that dtype (made once, kept here and by
    the model cache); ``generating`` (sample, compare): "" is the run's ``[model]
    generation_dtype``."""
    from adapters_lib import tuned

    check_quantize(quantize)
    check_generation_dtype(generation_dtype)
    dtype = generation_dtype
    if run is not None and generating:
        dtype = tuned.generation_dtype_of(generation_dtype, run.config())
    if run is not None:
        from adapters_lib.evals.selection import resolve_step
        from adapters_lib.tuned.checkpoint import checkpoint_step

        step = resolve_step(run, step)  # -2: the run's best checkpoint

        if run.config().model.backend == "keras":
            got = None if step < 0 else step
        else:
            got = checkpoint_step(run, None if step < 0 else step)
        return _cached(("run", str(run.path), got, quantize, dtype),
                       lambda: tuned.load_run_model(run, got, quantize=quantize, generation_dtype=dtype))
    if adapter:
        return _cached(("adapter", adapter, model, quantize, dtype),
                       lambda: tuned.load_adapter_model(adapter, model, quantize=quantize,
                                                        generation_dtype=dtype))
    return _cached(("base", model or "demo", quantize, dtype),
                   lambda: tuned.load_base_model(model or "demo", quantize=quantize, generation_dtype=dtype))


def check_generation_dtype(value: str, where: str = "request: generation_dtype") -> None:
    from adapters_lib.tuned import GENERATION_DTYPES

    if value not in GENERATION_DTYPES:
        raise EngineError(f"generation_dtype is {value!r}", where=where, status=400,
                          hint="expected float32 or bfloat16 (or empty: the run's own)")


def check_quantize(quantize: str, where: str = "request: quantize") -> None:
    """A request's ``quantize``: "" or one of ``config.QUANTIZE_MODES`` (else a 400 in one line)."""
    from adapters_lib.config import QUANTIZE_MODES

    if quantize and quantize not in QUANTIZE_MODES:
        raise EngineError(f"quantize is {quantize!r}", where=where, status=400,
                          hint=f"expected one of {', '.join(QUANTIZE_MODES)}")


def settings_of(cmd: Any) -> Any:
    """The request's decoding settings, checked (a bad value is a 400 naming the key)."""
    try:
        return cmd.settings()  # api.Decoding: the one record of the generation fields
    except WorkbenchError as e:
        raise EngineError(e.message, where=e.where, hint=e.hint) from None


def _side_stats(answers: dict[str, Any], model: Any) -> dict[str, dict[str, Any]]:
    ran = {s: model.precision(s) for s in answers}
    return {"dtype": {s: p["dtype"] for s, p in ran.items()},
            "quantize": {s: p["quantize"] for s, p in ran.items()},
            "tokens": {s: a.tokens for s, a in answers.items()},
            "tokens_per_s": {s: a.tokens_per_s for s, a in answers.items()},
            "first_token_s": {s: round(a.first_token_s, 3) for s, a in answers.items()},
            "stop_reason": {s: a.stop_reason for s, a in answers.items()}}


def _last_generated(conv: Any) -> Any:
    """A conversation's last generated turn (a prompt's one answer), None when none was."""
    return next((t for t in reversed(conv.turns) if not t.given and t.answers), None)


def _turn_stats(turn: Any, model: Any) -> dict[str, dict[str, Any]]:
    """Each side's figures for ``turn``, as ``compare`` reports them (none for no turn)."""
    if turn is None:
        return {}
    return _side_stats({s: turn.answers[s] for s in ("base", "tuned") if s in turn.answers}, model)


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


# --------------------------------------------------------------------------- checks


@dataclass
class Prepared:
    """A generation request checked before its stream opens (every mistake a 4xx)."""

    run: Any = None
    adapter: str = ""
    settings: Any = None
    prompt: Any = None
    """sample: the prompt (text) or the conversation (messages)."""
    conversations: list[Any] = field(default_factory=list)
    """compare, compare_set: what to answer."""


def _messages(msgs: Any) -> list[dict[str, Any]]:
    """ChatMessage records as the plain dicts ``sample.conversation`` reads (no None keys)."""
    out = []
    for m in msgs:
        data = m.to_json() if hasattr(m, "to_json") else dict(m)
        out.append({k: v for k, v in data.items() if v is not None})
    return out


def _conversation(prompt: str, messages: Any, system: str, where: str) -> Any:
    from adapters_lib.sample.conversation import Conversation

    if prompt and messages:
        raise EngineError("send prompt or messages, not both", where=where)
    if messages:
        conv = Conversation.from_messages(_messages(messages), where=f"{where}: messages")
    elif prompt.strip():
        conv = Conversation.from_prompt(prompt, where=f"{where}: prompt")
    else:
        raise EngineError("prompt is empty", where=where, hint="send a non-empty prompt or messages")
    if system and conv.system is None:
        conv.system = system
    return conv


def prepare(engine: Any, cmd: Any) -> Prepared:
    """Check a sample / compare / compare_set request (``Engine.prepare_generation``)."""
    from adapters_lib.engine import api

    where = f"{cmd.name} request"
    settings = settings_of(cmd)
    check_quantize(cmd.quantize)
    check_generation_dtype(cmd.generation_dtype)
    run = run_dir_of(engine, cmd.run_id) if cmd.run_id else None
    adapter = adapter_dir(cmd)
    if run is not None and adapter:
        raise EngineError("send run_id or adapter, not both", where=where)
    if isinstance(cmd, api.Sample):
        from adapters_lib.sample.prompts import as_messages

        if cmd.prompt and cmd.messages:
            raise EngineError("send prompt or messages, not both", where=where)
        if not cmd.chat and (cmd.messages or cmd.system):
            raise EngineError("a conversation needs the chat template", where=f"{where}: chat",
                              hint="send chat: true, or a single prompt")
        system = [{"role": "system", "content": cmd.system}] if cmd.system else []
        if cmd.messages:  # the history as given: the model answers the last user turn
            msgs = _messages(cmd.messages)
            if msgs and msgs[0].get("role") == "system":
                system = []  # the conversation's own system message wins
            prompt: Any = as_messages([*system, *msgs], where=f"{where}: messages")
        elif not cmd.prompt.strip():
            raise EngineError("prompt is empty", where=where, hint="send a non-empty prompt or messages")
        else:
            prompt = [*system, {"role": "user", "content": cmd.prompt}] if system else cmd.prompt
        return Prepared(run, adapter, settings, prompt=prompt)
    if run is None and not adapter:
        raise EngineError(f"{cmd.name} needs run_id (or adapter): the tuned model to set beside the base",
                          where=where)
    if isinstance(cmd, api.Compare):
        convs = [_conversation(cmd.prompt, cmd.messages, cmd.system, where)]
    else:
        if not cmd.entries:
            raise EngineError("entries is empty", where=where, hint="send at least one prompt or conversation")
        convs = [_conversation(e.prompt, e.messages, e.system, f"{where}: entries[{i}]")
                 for i, e in enumerate(cmd.entries)]
    if not cmd.chat and any(c.prompt is None or c.system is not None for c in convs):
        raise EngineError("a conversation needs the chat template", where=f"{where}: chat",
                          hint="send chat: true, or plain prompts")
    return Prepared(run, adapter, settings, conversations=convs)


# --------------------------------------------------------------------------- jobs


def _model(cmd: Any, prepared: Prepared) -> Any:
    return tuned_model(prepared.run, cmd.step, adapter=prepared.adapter, model=getattr(cmd, "model", ""),
                       quantize=cmd.quantize, generation_dtype=cmd.generation_dtype, generating=True)


def sample_job(engine: Any, cmd: Any, prepared: Prepared, emit: Emit) -> dict[str, Any]:
    """One model answers one prompt (or the last user turn of a conversation)."""
    t0 = time.perf_counter()
    model = _model(cmd, prepared)
    side = "tuned" if model.has_tuned else "base"
    answers = model.generate({side: [prepared.prompt]}, prepared.settings, chat=cmd.chat,
                             on_piece=lambda p: emit("token", _token(p, side=False)))
    answer = answers[side][0]
    return {"text": answer.text, "tokens": answer.tokens, "seconds": round(time.perf_counter() - t0, 3),
            "step": model.step, "complete": answer.stop_reason != "cancelled",
            "tokens_per_s": answer.tokens_per_s, "first_token_s": round(answer.first_token_s, 3),
            "stop_reason": answer.stop_reason, **model.precision(side)}


def compare_job(engine: Any, cmd: Any, prepared: Prepared, emit: Emit) -> dict[str, Any]:
    """Base and tuned answer one prompt, or every unanswered user turn of one conversation
    (``messages``; each side with its own history). Token items carry ``side`` (and ``turn``
    for a conversation); the done reply has the last turn's texts plus every turn's."""
    from adapters_lib.sample.conversation import replay

    t0 = time.perf_counter()
    model = _model(cmd, prepared)
    chat_request = bool(cmd.messages)
    cancelled = False

    def on_piece(_row: int, turn: int, piece: Any) -> bool:
        nonlocal cancelled
        ok = emit("token", _token(piece, side=True, turn=turn if chat_request else None))
        cancelled = cancelled or not ok
        return ok

    [conv] = replay(model, prepared.conversations, prepared.settings, chat=cmd.chat, on_piece=on_piece)
    last = _last_generated(conv) or conv.turns[-1]
    stats = _turn_stats(last, model)
    out = {"base": last.text("base"), "tuned": last.text("tuned"), **stats,
           "seconds": round(time.perf_counter() - t0, 3), "step": model.step, "complete": not cancelled}
    if chat_request:
        out["turns"] = [{"user": t.user, "reference": t.reference, "given": t.given,
                         **{s: t.text(s) for s in ("base", "tuned")},
                         **({"sides": {s: t.answers[s].to_dict() for s in ("base", "tuned")}}
                            if not t.given and "base" in t.answers else {})}
                        for t in conv.turns]
    if getattr(cmd, "save", False) and model.run_path is not None and not cancelled:
        from adapters_lib.sample.compare_sets import save_compare

        kept = {**conv.record(), "settings": model.settings_record(prepared.settings),
                "step": model.step, **stats}
        out["saved"] = str(save_compare(model.run_path, [kept]))
    return out


def compare_set_job(engine: Any, cmd: Any, prepared: Prepared, emit: Emit) -> dict[str, Any]:
    """A whole compare set (prompts and conversations), batched turn by turn, saved beside the
    run unless ``save`` is false. Token items carry ``row`` (the entry) and ``turn``."""
    from adapters_lib.sample.compare_sets import save_compare

    t0 = time.perf_counter()
    model = _model(cmd, prepared)
    cancelled = False

    def on_piece(row: int, turn: int, piece: Any) -> bool:
        nonlocal cancelled
        ok = emit("token", _token(piece, side=True, turn=turn, row=row))
        cancelled = cancelled or not ok
        return ok

    done = model.converse(prepared.conversations, prepared.settings, chat=cmd.chat, on_piece=on_piece)
    records = [{**c.record(), "settings": model.settings_record(prepared.settings), "step": model.step,
                **_turn_stats(_last_generated(c), model)} for c in done]
    saved = None
    if cmd.save and model.run_path is not None and not cancelled:
        saved = str(save_compare(model.run_path, records))
    return {"results": records, "saved": saved, "step": model.step, "complete": not cancelled,
            "seconds": round(time.perf_counter() - t0, 3)}


def jobs() -> dict[type, Callable[..., dict[str, Any]]]:
    """The device job of each streaming generation command (``engine.handlers.generation``, after
    ``prepare``): ``job(engine, cmd, prepared, emit) -> done data``."""
    from adapters_lib.engine import api

    return {api.Sample: sample_job, api.Compare: compare_job, api.CompareSet: compare_set_job}
