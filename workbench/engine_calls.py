"""The engine's API as typed calls: ``EngineCalls``, one method per command, each building
the command (``adapters_lib.engine.api``) and answering its typed reply.

Whoever answers commands implements two methods — ``call(cmd)`` (a reply) and
``stream(cmd)`` (``api.StreamItem``s) — and gets every typed call from here: the engine's
client (``workbench.client.EngineClient``, over the socket) and the tests' stand-ins
(``tests/engine_fake.py``). The screens hold an engine as this type. Never imports httpx
or JAX.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from adapters_lib.engine import api
from adapters_lib.errors import WorkbenchError
from adapters_lib.runs.state import TERMINAL_STATES, RunState


class EngineCalls:
    """The typed calls of the v1 API (docs/engine-api.md) over ``call`` and ``stream``."""

    where = "local"
    """The engine's machine: ``"local"`` or an ssh destination."""

    def call(self, cmd: api.Command, *, timeout: float | None = None) -> Any:
        """One command's typed reply (``cmd.reply``)."""
        raise NotImplementedError

    def stream(self, cmd: api.Command) -> Iterator[api.StreamItem]:
        """A streaming command's typed items (``cmd.items``)."""
        raise NotImplementedError

    # ----------------------------------------------------------------- engine

    def status(self, *, wait: bool = False) -> api.EngineStatus:
        """Version, API version, JAX state, devices, health, busy, active run (``wait``: JAX)."""
        return self.call(api.Status(wait=wait), timeout=300 if wait else None)

    def shutdown(self) -> api.ShutdownReply:
        return self.call(api.Shutdown())

    def models(self, folders: list[str] | tuple[str, ...] = ()) -> list[api.ModelInfo]:
        return self.call(api.ListModels(folders=tuple(folders)), timeout=300).models

    def data_check(self, path: str = "", *, format: str = "auto", config: dict | None = None,
                   config_toml: str = "", limit: int = 0) -> api.DataReport:
        """The data report (``Report.to_dict()``: ok, fatal, counts, lengths, errors, ...).

        ``limit``: check at most this many records (0 = all) where the data area supports it.
        """
        cmd = api.CheckData(path=path, format=format, config=config, config_toml=config_toml,
                            limit=limit)
        return self.call(cmd, timeout=600).report

    def estimate(self, config: dict | None = None, *, config_toml: str = "",
                 overrides: list[str] | tuple[str, ...] = (), device: str = "") -> api.EstimateReply:
        """Memory per device, trainable params, mesh problems (``ok``: none is an error);
        ``device``: for a named chip (``v5e``) instead of the engine's own."""
        cmd = api.Estimate(config=config, config_toml=config_toml, overrides=tuple(overrides),
                           device=device)
        return self.call(cmd, timeout=600)

    def compile_ahead(self, config: dict | None = None, *, config_toml: str = "",
                      overrides: list[str] | tuple[str, ...] = (), source: str = "",
                      force: bool = False) -> api.CompileAheadReply:
        """Compile the config's programs ahead on the engine's compile thread (``ahead``
        false: a CPU engine, nothing compiles ahead; ``force``: there too); answered at once."""
        return self.call(api.CompileAhead(config=config, config_toml=config_toml,
                                          overrides=tuple(overrides), source=source, force=force),
                         timeout=300)

    def compile_jobs(self, request: int = 0) -> api.CompileJobs:
        """The compile queue's jobs (``request``: one compile-ahead's) and the latest request."""
        return self.call(api.ListCompileJobs(request=request))

    # ----------------------------------------------------------------- runs

    def create_run(self, config: dict | None = None, *, config_toml: str = "",
                   overrides: list[str] | tuple[str, ...] = (), source: str = "") -> api.RunSummary:
        """Queue a training run; returns its summary (``id``, ``state``, ``dir``, ...)."""
        return self.call(api.CreateRun(config=config, config_toml=config_toml,
                                       overrides=tuple(overrides), source=source))

    def list_runs(self) -> list[api.RunSummary]:
        return self.call(api.ListRuns()).runs

    def get_run(self, run_id: str, *, metrics: bool = True, events: bool = True) -> api.RunDetail:
        return self.call(api.GetRun(run_id=run_id, metrics=metrics, events=events))

    def list_sweeps(self) -> list[api.SweepInfo]:
        """Every sweep the engine's runs belong to, newest first."""
        return self.call(api.ListSweeps()).sweeps

    def get_sweep(self, sweep_id: str, *, metric: str = "") -> api.SweepResults:
        """A sweep's results table (``sweep show SWEEP --json``; contract)."""
        return self.call(api.GetSweep(sweep_id=sweep_id, metric=metric))

    def eval_checkpoints(self, run_id: str, *, data: str = "", metrics: list[str] | tuple[str, ...] = (),
                         batch_size: int = 4) -> api.EvalTable:
        """The base and every checkpoint of a run scored (``eval --all-checkpoints``)."""
        return self.call(api.EvalCheckpoints(run_id=run_id, data=data, metrics=tuple(metrics),
                                             batch_size=batch_size), timeout=3600)

    def stop_run(self, run_id: str) -> api.RunSummary:
        return self.call(api.StopRun(run_id=run_id))

    def resume_run(self, run_id: str) -> api.RunSummary:
        return self.call(api.ResumeRun(run_id=run_id))

    def delete_run(self, run_id: str) -> api.DeleteReply:
        return self.call(api.DeleteRun(run_id=run_id))

    def stream_run(self, run_id: str, since_step: int = 0) -> Iterator[api.StreamItem]:
        """Metrics/events on disk with step > since_step, then live items until the run ends.

        Item types: ``metrics``, ``event``, ``log``, ``status``, ``replayed`` (the replay is
        over), ``end`` (the run reached a final state; the stream closes), ``error``.
        """
        return self.stream(api.StreamRun(run_id=run_id, since_step=since_step))

    def wait_run(self, run_id: str, timeout: float = 600.0,
                 states: tuple[RunState, ...] = TERMINAL_STATES,
                 ) -> api.RunDetail:
        """Poll until the run is in one of ``states``; return its summary."""
        t0 = time.monotonic()
        while True:
            run = self.get_run(run_id, metrics=False, events=False)
            if run.state in states:
                return run
            if time.monotonic() - t0 > timeout:
                raise WorkbenchError(f"run {run_id} still {run.state} after {timeout:.0f} s")
            time.sleep(0.1)

    # ----------------------------------------------------------------- generation, export

    def sample(self, prompt: str = "", *, run_id: str = "", model: str = "demo", step: int = -1,
               messages: Sequence[Mapping[str, Any]] = (), system: str = "", adapter: str = "",
               **decoding: Any) -> Iterator[api.StreamItem]:
        """Streamed tokens: ``token`` items (``api.TokenChunk``), then ``done`` (``SampleDone``:
        text, tokens, tokens_per_s, stop_reason). ``messages``: a conversation instead of
        ``prompt`` (the model answers its last user turn). ``decoding``: the generation
        settings (``api.DECODING``: max_new_tokens, temperature, top_k, top_p, seed, chat,
        quantize, generation_dtype; the API's defaults when not given)."""
        return self.stream(api.Sample(prompt=prompt, run_id=run_id, model=model, step=step,
                                      messages=_chat(messages), system=system, adapter=adapter,
                                      **decoding))

    def compare(self, prompt: str = "", run_id: str = "", *, step: int = -1,
                messages: Sequence[Mapping[str, Any]] = (), system: str = "", adapter: str = "",
                model: str = "", save: bool = False, **decoding: Any) -> Iterator[api.StreamItem]:
        """Base vs tuned: ``token`` items carry ``side`` ("base"/"tuned"), then ``done``
        (``CompareDone``: per side tokens, tokens_per_s, stop_reason).

        ``messages`` (multi-turn A/B): the conversation so far; every user turn without an
        answer is answered, each side with its own history. Send earlier answers back as
        ``{"role": "assistant", "base": ..., "tuned": ...}``; token items then carry ``turn``
        and the done reply has ``turns``. ``save``: keep the result in ``<run>/compare/``
        (the done reply's ``saved`` names the file). ``decoding``: as ``sample``'s."""
        return self.stream(api.Compare(prompt=prompt, run_id=run_id, step=step,
                                       messages=_chat(messages), system=system, adapter=adapter,
                                       model=model, save=save, **decoding))

    def compare_set(self, entries: Sequence[Mapping[str, Any]], *, run_id: str = "", adapter: str = "",
                    model: str = "", step: int = -1, save: bool = True,
                    **decoding: Any) -> Iterator[api.StreamItem]:
        """A compare set (``{"prompt"}`` or ``{"messages"}`` entries) in one stream: ``token``
        items carry ``row``/``turn``/``side``; ``done`` (``CompareSetDone``) has the results
        and the saved file. ``decoding``: as ``sample``'s."""
        items = tuple(api.CompareItem(prompt=e.get("prompt", ""), messages=_chat(e.get("messages") or ()),
                                      system=e.get("system", "")) for e in entries)
        return self.stream(api.CompareSet(run_id=run_id, adapter=adapter, model=model, step=step,
                                          entries=items, save=save, **decoding))

    def prepare_compare(self, run_id: str, step: int = -1) -> api.PrepareCompareReply:
        """Compare picked ``run_id``'s checkpoint ``step``: its programs compile behind (answered at once)."""
        return self.call(api.PrepareCompare(run_id=run_id, step=step))

    def compares(self, run_id: str, *, limit: int = 200) -> api.CompareList:
        """A run's earlier compares (``compares``: newest first), read by the engine."""
        return self.call(api.ListCompares(run_id=run_id, limit=limit))

    def eval(self, data: str, *, model: str = "", run_id: str = "", step: int = -1,
             format: str = "auto", loss_on: str = "model", max_length: int = 0,
             batch_size: int = 4, quantize: str = "") -> api.EvalResult:
        """Loss, perplexity and scored tokens on ``data`` (an absolute path on the engine's machine)."""
        return self.call(api.Eval(data=data, model=model, run_id=run_id, step=step, format=format,
                                  loss_on=loss_on, max_length=max_length, batch_size=batch_size,
                                  quantize=quantize),
                         timeout=3600)

    def export(self, run_id: str, *, kind: str = "", out: str = "", step: int = -1,
               format: str = "", force: bool = False, quant: str = "") -> api.ExportReply:
        """``format``: "adapter", "gemma", "hf", "gguf" or "gguf-lora" (``api.EXPORT_FORMATS``);
        ``kind`` is the older "adapter"/"merged" (alone, "merged" is "gemma"); ``quant``: the
        GGUF formats' type."""
        return self.call(api.Export(run_id=run_id, kind=kind, out=out, step=step, format=format,
                                    force=force, quant=quant), timeout=3600)


def _chat(messages: Sequence[Mapping[str, Any]]) -> tuple[api.ChatMessage, ...]:
    return tuple(m if isinstance(m, api.ChatMessage) else api.ChatMessage.from_json(dict(m), key="messages")
                 for m in messages)
