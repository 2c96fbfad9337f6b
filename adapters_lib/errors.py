"""One error type for user mistakes, rendered once at the edge (CLI line, TUI notification)."""

from __future__ import annotations


class WorkbenchError(Exception):
    """A mistake the user can fix: what is wrong, where, and what to do.

    Raised deep, rendered once: ``str(err)`` is the one-line form
    ``where: message; hint``. Tracebacks are for bugs, never for these.
    """

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.hint:
            text += f"; {self.hint}"
        return text

    def to_dict(self) -> dict[str, str | None]:
        return {"message": self.message, "where": self.where, "hint": self.hint}
