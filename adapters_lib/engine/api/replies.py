"""The typed replies of the engine's API (v1): one ``Record`` per answer and stream item.

See ``adapters_lib.engine.api`` for why these are frozen dataclasses, and docs/engine-api.md
for the prose. Another area adds its reply types in its own block at the end.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from adapters_lib.jsontypes import Record, record
from adapters_lib.runs.state import ACTIVE_STATES, RunState

API_VERSION = 1
"""The one definition: the server reports it in ``status``, the client refuses another."""
PREFIX = f"/v{API_VERSION}"

__all__ = [
    "ErrorInfo",
    "ErrorReply",
    "DeviceInfo",
    "JaxState",
    "HostMemory",
    "Health",
    "EngineStatus",
    "ShutdownReply",
    "ModelInfo",
    "ModelList",
    "DataIssueInfo",
    "DataExample",
    "DataReport",
    "DataCheckReply",
    "MeshProblem",
    "DeviceFit",
    "EstimateReply",
    "RunSummary",
    "RunDetail",
    "RunList",
    "DeleteReply",
    "ExportReply",
    "API_VERSION",
    "PREFIX",
]



# =========================================================================== replies


@record
class ErrorInfo(Record):
    """A refusal or a failure in words: ``{"message", "where", "hint"}`` (+ ``status``)."""

    message: str = ""
    where: str | None = None
    hint: str | None = None
    status: int | None = None
    """The HTTP status of a refused request (absent in a run's ``error``)."""


@record
class ErrorReply(Record):
    """The body of every 4xx/5xx answer."""

    error: ErrorInfo


@record
class DeviceInfo(Record):
    id: int
    platform: str = ""
    kind: str = ""
    process_index: int = 0
    memory_bytes: int | None = None
    """Capacity (null where the backend does not say, e.g. CPU)."""
    bytes_in_use: int | None = None
    peak_bytes_in_use: int | None = None


@record
class JaxState(Record):
    ready: bool = False
    """Devices are known (``status?wait=1`` waits for this)."""
    loading: bool = True
    error: str | None = None
    modules_ready: bool = False
    """gemma and the engine's heavy modules are imported too."""


@record
class HostMemory(Record):
    host_bytes: int | None = None
    engine_rss_bytes: int | None = None


@record
class Health(Record):
    """Whether the engine can still do device work."""

    device_thread: str = "starting"
    """"alive", "starting", "stopped" (after shutdown) or "dead" (a bug: see ``error``)."""
    error: str | None = None
    restarts: int = 0
    """How often the supervisor restarted the device thread."""


@record
class EngineStatus(Record):
    version: str = ""
    api_version: int = API_VERSION
    pid: int = 0
    started: float = 0.0
    uptime_s: float = 0.0
    jax: JaxState = dataclasses.field(default_factory=JaxState)
    backend: str | None = None
    devices: list[DeviceInfo] = dataclasses.field(default_factory=list)
    memory: HostMemory = dataclasses.field(default_factory=HostMemory)
    busy: bool = False
    active_run: str | None = None
    queued_runs: list[str] = dataclasses.field(default_factory=list)
    pending_jobs: int = 0
    runs_dir: str = ""
    listen: dict[str, str] = dataclasses.field(default_factory=dict)
    health: Health = dataclasses.field(default_factory=Health)
    data_dir: str = ""
    """Where ``train --upload`` puts data on the engine's machine (remote clients)."""
    host: str = ""
    """The engine machine's name."""
    warming: str | None = None
    """The run whose Compare programs the idle engine compiles now (or is about to): its
    first Compare will find them compiled (``engine/warm_compare.py``)."""


@record
class ShutdownReply(Record):
    stopping: bool = True
    active_run: str | None = None


@record
class ModelInfo(Record):
    """One model the catalog found (``catalog.ModelEntry``), with its problems in words."""

    id: str
    family: str = "other"
    size: str = "custom"
    variant: str = "pt"
    format: str = ""
    """demo, flax-orbax, safetensors, gguf, keras, ..."""
    path: str = ""
    tokenizer: str | None = None
    bytes: int = 0
    params: int | None = None
    status: str = "ok"
    """"ok", or why it cannot be used (unreadable, incomplete, unsupported, ...)."""
    reason: str = ""
    """The first problem, in words ("" when ``status`` is ok)."""
    problems: list[str] = dataclasses.field(default_factory=list)
    hint: str = ""
    """What to do about the problems."""
    source: str = "folder"
    """Where it was found: builtin, kaggle, huggingface, folder, ollama, lmstudio, ..."""
    arch: dict[str, Any] | None = None
    """The architecture (layers, widths, heads, vocab), when it could be read."""
    checkpoint: str = ""
    """The orbax checkpoint directory (may be a child of ``path``)."""
    note: str = ""
    """Something to know about an ``ok`` entry."""
    # GGUF and tokenizer fields (catalog.ModelEntry)
    quant: str | None = None
    """GGUF: the file type as llama.cpp names it (Q4_K_M, Q8_0, F16, ...)."""
    vocab_rows: int | None = None
    tokenizer_pieces: int | None = None
    tokenizer_mismatch: str = ""


@record
class ModelList(Record):
    models: list[ModelInfo] = dataclasses.field(default_factory=list)


@record
class DataIssueInfo(Record):
    """One dropped record or warning (``data.readers.DataIssue.to_dict``)."""

    file: str = ""
    line: int | None = None
    row: int | None = None
    field: str | None = None
    severity: str = "error"
    message: str = ""
    text: str = ""
    """``file:line: message``."""


@record
class DataExample(Record):
    """One example as the model sees it (``data.validate.Report.preview``)."""

    text: str = ""
    where: str = ""
    format: str = ""
    segments: list[Any] = dataclasses.field(default_factory=list)
    """``[text, trained]`` pieces."""
    tokens: int | None = None


@record
class DataReport(Record):
    """``adapters_lib.data.Report.to_dict()`` (docs/data.md); the rest of its keys in ``extra``."""

    ok: bool = False
    fatal: str | None = None
    path: str = ""
    format: str = ""
    records: int = 0
    examples: int = 0
    dropped: int = 0
    sequences: int = 0
    tokens: int = 0
    truncated: int = 0
    mean_tokens: float | None = None
    max_tokens: int | None = None
    errors: list[DataIssueInfo] = dataclasses.field(default_factory=list)
    warnings: list[DataIssueInfo] = dataclasses.field(default_factory=list)
    error_count: int = 0
    warning_count: int = 0
    preview: list[DataExample] = dataclasses.field(default_factory=list)


@record
class DataCheckReply(Record):
    report: DataReport


@record
class MeshProblem(Record):
    level: str = "error"
    """"error" (the run cannot start) or "warning"."""
    message: str = ""
    hint: str = ""
    where: str = ""
    """The config key it is about, when not the mesh ("[model] quantize_tile_size"; additive)."""


@record
class DeviceFit(Record):
    device: int = 0
    kind: str = ""
    bytes: int = 0
    capacity_bytes: int | None = None
    verdict: str = ""


@record
class EstimateReply(Record):
    """Memory per device, mesh problems and trainable params (no weights loaded)."""

    ok: bool = False
    estimate: dict[str, Any] | None = None
    """``memory.MemoryEstimate.to_dict()``: bytes per term, ``total``, ``fraction``, ``verdict``."""
    summary: str | None = None
    trainable_params: int | None = None
    total_params: int | None = None
    mesh_problems: list[MeshProblem] = dataclasses.field(default_factory=list)
    devices: list[DeviceFit] = dataclasses.field(default_factory=list)
    device_count: int = 0
    device_bytes: int | None = None
    hosts: dict[str, Any] | None = None
    """Multi-host engines: per-host devices and bytes."""


@record
class RunSummary(Record):
    """A run's ``status.json`` plus ``id`` and ``dir`` (its other keys in ``extra``)."""

    id: str
    state: RunState
    """queued, running, stopping, stopped, completed, failed, interrupted (contract)."""
    dir: str = ""
    run_id: str = ""
    step: int = 0
    total_steps: int = 0
    message: str = ""
    updated: float | None = None
    pid: int | None = None
    error: ErrorInfo | None = None
    """Why a ``failed`` run failed."""
    loss: float | None = None
    """The last logged training loss (NaN when the run diverged)."""
    final_loss: float | None = None
    final_eval_loss: float | None = None
    best_metric: str | None = None
    best_step: int | None = None
    """The step the run pinned as its best (``[train] best_metric``'s selection)."""
    best_value: float | None = None
    exact_match_base: float | None = None
    exact_match_tuned: float | None = None
    trainable_params: int | None = None
    peak_bytes: int | None = None
    wall_s: float | None = None
    processes: int | None = None
    """A multi-host run: the processes that trained it."""

    @property
    def active(self) -> bool:
        """Queued, running or stopping: a process is (or should be) working on it."""
        return self.state in ACTIVE_STATES


@record
class RunDetail(RunSummary):
    """``GET /v1/runs/{id}``: the summary, the resolved config, checkpoints, metrics, events."""

    config: dict[str, Any] | None = None
    checkpoints: list[int] = dataclasses.field(default_factory=list)
    metrics: list[dict[str, Any]] | None = None
    """Every ``metrics.jsonl`` record (null when asked without: ``?metrics=0``)."""
    events: list[dict[str, Any]] | None = None


@record
class RunList(Record):
    runs: list[RunSummary] = dataclasses.field(default_factory=list)


@record
class DeleteReply(Record):
    id: str
    deleted: bool = True


@record
class ExportReply(Record):
    run_id: str
    kind: str = "adapter"
    result: Any = None
    """What the export area wrote (paths, format, files)."""
    # additive: the one export vocabulary's name, and where it went
    format: str = ""
    """"adapter", "gemma", "hf", "gguf" or "gguf-lora" (``export.formats``); a GGUF
    export's ``result`` adds ``quant``, ``files``, ``modelfile`` and ``ollama_create``."""
    out: str = ""
    step: int | None = None


