"""Publish/subscribe of run events, from the device thread to the event loop's streams.

Publishing never blocks the publisher (the training thread): each subscriber has an
``asyncio.Queue`` fed through ``loop.call_soon_threadsafe``. A subscriber that falls too far
behind is closed (it gets ``OVERFLOW``) and reconnects with ``since_step``; the run never waits.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

OVERFLOW = {"type": "overflow", "data": {}}
MAX_BACKLOG = 10_000


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
            subs = list(self._subs.get(key, ()))
        for sub in subs:
            try:
                sub.loop.call_soon_threadsafe(sub._put, item)
            except RuntimeError:  # the loop is closed: the engine is shutting down
                pass

    def count(self, key: str) -> int:
        with self._lock:
            return len(self._subs.get(key, ()))
