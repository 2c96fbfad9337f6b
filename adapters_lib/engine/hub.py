"""Publish/subscribe of run events, from the device thread to the event loop's streams.

Publishing never blocks the publisher (the training thread): each subscriber has an
``asyncio.Queue`` fed through ``loop.call_soon_threadsafe``. A subscriber that falls too far
behind is closed (it gets ``OVERFLOW``) and reconnects with ``since_step``; the run never waits.

Log lines are on no file a stream replays (metrics and events are): the hub keeps a run's last
``LOG_KEEP`` of them while it trains (``recent_logs``), so a client that attaches during a long
set-up (loading, GPTQ, the first compile) reads what the run is doing, not only what comes next.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Any

OVERFLOW = {"type": "overflow", "data": {}}
MAX_BACKLOG = 10_000
LOG_KEEP = 200


class Subscription:
    def __init__(self, hub: Hub, key: str, loop: asyncio.AbstractEventLoop):
        self.hub = hub
        self.key = key
        self.loop = loop
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.closed = False

    def _put(self, item: dict[str, Any]) -> None:  # runs on the event loop
        if self.closed:
            return
        if self.queue.qsize() >= MAX_BACKLOG:
            self.closed = True
            self.queue.put_nowait(OVERFLOW)
            return
        self.queue.put_nowait(item)

    async def get(self) -> dict[str, Any]:
        return await self.queue.get()

    def close(self) -> None:
        self.closed = True
        self.hub._remove(self)


class Hub:
    """Fan-out of ``{"type", "data"}`` items per key (a run id)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: dict[str, list[Subscription]] = {}
        self._logs: dict[str, deque[dict[str, Any]]] = {}

    def subscribe(self, key: str, loop: asyncio.AbstractEventLoop | None = None) -> Subscription:
        sub = Subscription(self, key, loop or asyncio.get_running_loop())
        with self._lock:
            self._subs.setdefault(key, []).append(sub)
        return sub

    def _remove(self, sub: Subscription) -> None:
        with self._lock:
            subs = self._subs.get(sub.key, [])
            if sub in subs:
                subs.remove(sub)
            if not subs:
                self._subs.pop(sub.key, None)

    def publish(self, key: str, kind: str, data: dict[str, Any]) -> None:
        item = {"type": kind, "data": data}
        with self._lock:
            if kind == "log":
                self._logs.setdefault(key, deque(maxlen=LOG_KEEP)).append(data)
            subs = list(self._subs.get(key, ()))
        for sub in subs:
            try:
                sub.loop.call_soon_threadsafe(sub._put, item)
            except RuntimeError:  # the loop is closed: the engine is shutting down
                pass

    def recent_logs(self, key: str) -> list[dict[str, Any]]:
        """The last ``LOG_KEEP`` log lines published for ``key`` (until ``forget_logs``)."""
        with self._lock:
            return list(self._logs.get(key, ()))

    def forget_logs(self, key: str) -> None:
        with self._lock:
            self._logs.pop(key, None)

    def count(self, key: str) -> int:
        with self._lock:
            return len(self._subs.get(key, ()))
