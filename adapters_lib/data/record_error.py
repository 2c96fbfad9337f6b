"""``RecordError``: why one record cannot be read in its format, naming its field (raised by
``data.formats``, ``data.labels`` and ``data.preference``; turned into the report's issues)."""

from __future__ import annotations


class RecordError(Exception):
    def __init__(self, message: str, field_name: str = ""):
        super().__init__(message)
        self.message = message
        self.field = field_name
