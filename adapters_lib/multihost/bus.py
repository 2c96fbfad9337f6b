"""Messages from process 0 to every process, through JAX's own collectives.

``Bus.exchange``: ``multihost_utils.broadcast_one_to_all`` of a length-prefixed UTF-8 JSON
message as a uint8 array. Every process calls it at the same point of the program: process 0
with the message, the others with ``None``; all get process 0's message. A follower waiting
on a dead leader fails in the collective (gloo: connection closed; TPU: the coordination
service's heartbeat) instead of waiting forever; idle leaders send a heartbeat message every
few seconds so that this happens while nothing runs too.
"""

from __future__ import annotations

import json
from typing import Any

from adapters_lib.multihost.distributed import is_primary

HEADER = 8  # bytes of the length prefix (uint64, little-endian)
MIN_BUCKET = 256


def _bucket(n: int) -> int:
    """Payload sizes are rounded up to powers of two: few distinct shapes, few compiles."""
    size = MIN_BUCKET
    while size < n:
        size *= 2
    return size


def encode(message: dict[str, Any], size: int | None = None):
    """A message as a uint8 array: 8-byte little-endian length, UTF-8 JSON, zero padding."""
    import numpy as np

    body = json.dumps(message, separators=(",", ":")).encode("utf-8")
    size = size or _bucket(HEADER + len(body))
    if HEADER + len(body) > size:
        raise ValueError(f"message of {len(body)} bytes does not fit in {size}")
    buf = np.zeros(size, np.uint8)
    buf[:HEADER] = np.frombuffer(len(body).to_bytes(HEADER, "little"), np.uint8)
    buf[HEADER:HEADER + len(body)] = np.frombuffer(body, np.uint8)
    return buf


def decode(buf: Any) -> dict[str, Any]:
    import numpy as np

    data = np.asarray(buf, np.uint8).tobytes()
    n = int.from_bytes(data[:HEADER], "little")
    return json.loads(data[HEADER:HEADER + n].decode("utf-8"))


class Bus:
    """Process 0 → every process, through ``broadcast_one_to_all`` (two collectives a message:
    the payload size, then the payload). Every process must call ``exchange`` in the same
    order; see the module docstring."""

    def __init__(self) -> None:
        self.sent = 0

    def exchange(self, message: dict[str, Any] | None) -> dict[str, Any]:
        import numpy as np
        from jax.experimental import multihost_utils

        primary = is_primary()
        if primary:
            if message is None:
                raise ValueError("process 0 must give the message")
            payload = encode(message)
            size = np.array([payload.size], np.int64)
        else:
            size = np.zeros(1, np.int64)
        size = int(np.asarray(multihost_utils.broadcast_one_to_all(size))[0])
        if not primary:
            payload = np.zeros(size, np.uint8)
        got = np.asarray(multihost_utils.broadcast_one_to_all(payload))
        self.sent += 1
        return decode(got)

    def send(self, message: dict[str, Any]) -> dict[str, Any]:
        """Process 0's side."""
        return self.exchange(message)

    def receive(self) -> dict[str, Any]:
        """A follower's side."""
        return self.exchange(None)

    def send_command(self, cmd: Any) -> Any:
        """Process 0: send ``cmd.to_json()``; the command every process got, read back."""
        from adapters_lib.multihost.messages import message_from_json

        return message_from_json(self.send(cmd.to_json()))

    def receive_command(self) -> Any:
        """A follower: the next command from process 0 (``messages.message_from_json``)."""
        from adapters_lib.multihost.messages import message_from_json

        return message_from_json(self.receive())
