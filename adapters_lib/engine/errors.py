"""The engine's refusal: a ``WorkbenchError`` that carries the HTTP status to answer with."""

from __future__ import annotations

from adapters_lib.errors import WorkbenchError


class EngineError(WorkbenchError):
    """A refused request: ``status`` is the HTTP status the API answers with."""

    def __init__(self, message: str, *, status: int = 400, where: str | None = None,
                 hint: str | None = None):
        super().__init__(message, where=where, hint=hint)
        self.status = status
