"""What a link does when the connection drops: reconnect, retry, resume.

When a request or a stream fails at the transport (the ssh master was killed, the network
dropped, the laptop slept), ``reconnect()`` runs the link's handshake again with backoff for
up to ``GEMMA_WORKBENCH_RECONNECT_S`` seconds (default 300), telling the listeners
(``LinkEvent``: ``down`` → ``reconnecting`` … → ``up`` or ``failed``). ``call()`` retries a
GET (or anything that never left this machine) and refreshes the token on a 401; a POST cut
mid-way is not retried (it may have been done) and says so. ``follow()`` resumes a run stream
with ``since_step`` = the last step seen (no step twice, no event twice); ``guard()`` says to
run a generation again. The runs on the remote engine are never touched by any of this.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from adapters_lib import paths
from adapters_lib.errors import WorkbenchError

if TYPE_CHECKING:
    import threading

    from workbench.remote.spec import RemoteSpec
    from workbench.remote.ssh import SshControl


@dataclass(frozen=True)
class LinkEvent:
    """What happened to the link: ``down``, ``reconnecting``, ``up`` or ``failed``."""

    kind: str
    where: str
    message: str
    attempt: int = 0


class VersionMismatch(WorkbenchError):
    """The remote engine speaks another API version (not fixed by reconnecting)."""


def brief(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0][:200]


class Reconnecting:
    """The reconnect policy of ``RemoteLink`` (which supplies the handshake, the lock, the
    generation counter, ``emit``, the ssh control, the token and the listeners). The client
    holds a link as its ``client.Link`` protocol (the client never imports this package)."""

    where: str
    token: str | None
    listeners: list[Callable[[LinkEvent], Any]]
    spec: RemoteSpec
    ssh: SshControl
    generation: int
    _lock: threading.RLock
    emit: Callable[..., None]
    _handshake: Callable[..., None]
    refresh_token: Callable[[], None]

    def reconnect(self, error: BaseException, seen_generation: int) -> None:
        """Restore the link after ``error`` (unless another thread already did)."""
        with self._lock:
            if self.generation != seen_generation:
                return
            self.emit("down", f"connection to {self.where} lost ({brief(error)}); reconnecting…")
            budget = paths.env_number("GEMMA_WORKBENCH_RECONNECT_S")
            deadline = time.monotonic() + budget
            delay, attempt = 0.5, 0
            while True:
                attempt += 1
                try:
                    if attempt > 2 and self.ssh.master_pid() is not None:
                        self.ssh.exit_master()  # alive but not passing data: start afresh
                    self._handshake(interactive=False)
                except VersionMismatch:
                    self.emit("failed", f"{self.where}: the engine's version changed")
                    raise
                except (WorkbenchError, OSError, subprocess.SubprocessError, httpx.HTTPError) as e:
                    if time.monotonic() + delay > deadline:
                        self.emit("failed", f"could not reconnect to {self.where}: {brief(e)}")
                        raise WorkbenchError(
                            f"lost the connection to {self.where} and could not reconnect in "
                            f"{budget:.0f} s ({brief(e)})", where=self.spec.origin,
                            hint=f"the runs go on there; check `ssh {self.where}`, then "
                                 f"reattach: gemma-workbench --remote {self.where} runs attach ID"
                        ) from None
                    self.emit("reconnecting", f"reconnecting to {self.where} "
                              f"(attempt {attempt}: {brief(e)})…", attempt)
                    time.sleep(delay)
                    delay = min(delay * 2, 10.0)
                    continue
                self.generation += 1
                self.emit("up", f"reconnected to {self.where}", attempt)
                return

    def call(self, send: Callable[[], httpx.Response], method: str, path: str) -> httpx.Response:
        """One request through the link: reconnect on a transport error; retry a GET (or
        anything that never left this machine); refresh the token on a 401."""
        seen = self.generation
        try:
            response = send()
        except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
            raise  # slow, not lost
        except httpx.TransportError as e:
            self.reconnect(e, seen)
            if method != "GET" and not isinstance(e, httpx.ConnectError):
                raise WorkbenchError(
                    f"the connection to {self.where} dropped during {method} {path}; it is "
                    "back now", where=self.spec.origin,
                    hint=f"check whether it was done (gemma-workbench --remote {self.where} "
                         "runs) before trying again") from None
            response = send()
        if response.status_code == 401:
            self.refresh_token()
            response = send()
        return response

    def follow(self, open_stream: Callable[[int], Iterator[dict[str, Any]]],
               since_step: int) -> Iterator[dict[str, Any]]:
        """A run stream that survives link drops: reopened with ``since_step`` = the last
        metrics step seen; events, ``replayed`` and unchanged ``status`` not repeated."""
        last, seen_events, last_status, resumed = since_step, set(), None, False
        while True:
            seen = self.generation
            try:
                for item in open_stream(last):
                    kind, data = item.get("type"), item.get("data") or {}
                    if kind == "metrics" and isinstance(data.get("step"), int):
                        last = max(last, data["step"])
                    elif kind == "event":
                        key = json.dumps(data, sort_keys=True, default=str)
                        if key in seen_events:
                            continue
                        seen_events.add(key)
                    elif kind == "replayed" and resumed:
                        continue
                    elif kind == "status":
                        key = (data.get("state"), data.get("step"))
                        if resumed and key == last_status:
                            continue
                        last_status = key
                    yield item
                    if kind == "end":
                        return
                return
            except httpx.TransportError as e:  # incl. 60 s of silence: the engine pings every 10 s
                self.reconnect(e, seen)
                resumed = True

    def guard(self, open_stream: Callable[[], Iterator[dict[str, Any]]],
              what: str) -> Iterator[dict[str, Any]]:
        """A generation stream: it cannot resume (the engine stops a generation whose client
        went away), so a drop mid-way reconnects and says to run it again."""
        seen, got = self.generation, False
        try:
            for item in open_stream():
                got = True
                yield item
            return
        except httpx.TransportError as e:
            self.reconnect(e, seen)
            if got or not isinstance(e, httpx.ConnectError):
                raise WorkbenchError(f"the connection to {self.where} dropped during {what}; "
                                     "it is back now", where=self.spec.origin,
                                     hint="run it again") from None
        yield from open_stream()
