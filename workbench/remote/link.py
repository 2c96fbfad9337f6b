"""The link to a remote engine: start it, forward its socket, read its token, reconnect.

``RemoteLink.open()`` (the handshake, through one ssh master, see ``ssh.py``):
1. start the master (the user's ssh; interactive on the first connection of a CLI command
   or before the TUI opens, ``BatchMode`` afterwards);
2. find the remote command (the configured one, else ``gemma-workbench`` on the remote
   PATH, else ``~/.local/bin`` and ``~/gemma-workbench/.venv/bin``);
3. ``<command> engine start --json`` there: starts the engine when none runs, and answers
   its status (version, API version, socket, data dir) either way;
4. refuse another API version in one line that says which side to upgrade;
5. read the token (``cat`` over the same connection), forward the socket to
   ``<control dir>/engine.sock``, ask ``/v1/status`` through it.
The token lives in memory and in ``link.json`` (0600, in the 0700 control dir) so that the
next command of this user reuses the link without any ssh round trip.

When the link drops, ``resume.Reconnecting`` (its base) runs the handshake again and
resumes what was going on.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from adapters_lib.engine import api
from adapters_lib.errors import WorkbenchError
from workbench.remote.resume import LinkEvent, Reconnecting, VersionMismatch, brief
from workbench.remote.spec import FALLBACK_COMMANDS, RemoteSpec
from workbench.remote.ssh import SshControl, last_line

PROBE = ("for c in " + " ".join(f'"{c}"' for c in FALLBACK_COMMANDS) + "; do "
         'p=$(command -v "$c" 2>/dev/null) && [ -n "$p" ] && { printf "%s\\n" "$p"; exit 0; }; '
         "done; exit 127")
# over there, gemma-workbench uses its own engine, whatever its env or settings.toml say
# (dotfiles shared with this machine must not send it on to another host)
THERE = "env GEMMA_WORKBENCH_REMOTE="
INSTALL_HINT = ("install it there (git clone the repository, then `make setup`), or give its "
                "path: --remote-command ~/gemma-workbench/.venv/bin/gemma-workbench "
                "(or remote_command in settings.toml, GEMMA_WORKBENCH_REMOTE_COMMAND)")


def version_problem(status: dict[str, Any], host: str, local_api: int,
                    local_version: str) -> VersionMismatch | None:
    """A one-line refusal when the engine on ``host`` speaks another API version (``status``:
    its status as JSON, read untyped: another version's may not fit this one's types)."""
    remote_api = status.get("api_version")
    if remote_api == local_api:
        return None
    remote_version = status.get("version", "?")
    older_remote = isinstance(remote_api, int) and remote_api < local_api
    upgrade = (f"upgrade gemma-workbench on {host} (then restart its engine: "
               f"`gemma-workbench --remote {host} engine stop --force`)" if older_remote
               else "upgrade gemma-workbench on this machine")
    return VersionMismatch(
        f"the engine on {host} is gemma-workbench {remote_version} (API v{remote_api}); "
        f"this client is {local_version} (API v{local_api})", where=f"--remote {host}",
        hint=upgrade)


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


class RemoteLink(Reconnecting):
    """One remote engine reached through ssh; shared by every client of this process."""

    def __init__(self, spec: RemoteSpec, *, listeners: list[Callable[[LinkEvent], Any]] | None = None):
        self.spec = spec
        self.where = spec.host
        self.ssh = SshControl(spec)
        self.cache_path = self.ssh.dir / "link.json"
        self.info: dict[str, Any] = {}
        self.token: str | None = None
        self.status: api.EngineStatus | None = None
        """The engine's status when the link last opened."""
        self.generation = 0
        self.listeners: list[Callable[[LinkEvent], Any]] = list(listeners or [])
        self._lock = threading.RLock()

    @property
    def socket_path(self) -> Path:
        return self.ssh.local_socket

    def emit(self, kind: str, message: str, attempt: int = 0) -> None:
        event = LinkEvent(kind, self.where, message, attempt)
        for listener in list(self.listeners):
            with contextlib.suppress(Exception):  # a listener's bug never breaks the link
                listener(event)

    # ------------------------------------------------------------------ handshake

    def open(self, *, interactive: bool = False) -> None:
        """Reuse the cached link when it answers, else run the handshake."""
        with self._lock:
            if self._try_cached():
                return
            self._handshake(interactive=interactive)

    def _load_cache(self) -> dict[str, Any]:
        try:
            data = json.loads(self.cache_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) and data.get("host") == self.spec.host else {}

    def _try_cached(self) -> bool:
        cached = self._load_cache()
        if not cached.get("token") or not self.socket_path.exists():
            return False
        if self.spec.command and cached.get("remote_command") != self.spec.command:
            return False
        self.info, self.token = cached, cached["token"]
        try:
            self.status = self._probe()
        except (httpx.HTTPError, WorkbenchError):
            self.token = None
            return False
        return True

    def _probe(self) -> dict[str, Any]:
        """``/v1/status`` through the forwarded socket with our token; version-checked."""
        from workbench import __version__
        from workbench.client import EngineClient

        with EngineClient(socket_path=self.socket_path, token=self.token, timeout=30) as c:
            status = c.status()
        problem = version_problem(status.to_json(), self.where, api.API_VERSION, __version__)
        if problem:
            raise problem
        return status

    def remote_command(self) -> str:
        """The shell text that runs gemma-workbench there (checked to exist, or found)."""
        if self.spec.command:
            if self.info.get("remote_command") != self.spec.command:
                self._check_program(self.spec.command)
                self.info["remote_command"] = self.spec.command
            return self.spec.command
        if self.info.get("remote_command"):
            return self.info["remote_command"]
        r = self.ssh.run_sh(PROBE, timeout=60)
        found = r.stdout.decode(errors="replace").strip().splitlines()
        if r.returncode != 0 or not found:
            if r.returncode == 255:
                raise WorkbenchError(f"ssh to {self.where} failed: "
                                     f"{last_line(r.stderr.decode(errors='replace'))}",
                                     where=self.spec.origin)
            raise WorkbenchError(f"gemma-workbench is not installed on {self.where} (not on "
                                 "the PATH of a non-interactive ssh session)",
                                 where=self.spec.origin, hint=INSTALL_HINT)
        return shlex.quote(found[-1])

    def _check_program(self, command: str) -> None:
        """One clear line when the configured command's program is not there."""
        try:
            words = shlex.split(command)
        except ValueError:
            return  # shell text we cannot read: let the shell say what is wrong
        raw, i = command.split(), 0
        while i < len(words) and (words[i] == "env" or re.match(r"[A-Za-z_]\w*=", words[i])):
            i += 1
        if i >= len(words):
            return
        program = raw[i] if len(raw) == len(words) else shlex.quote(words[i])  # keeps ~, $HOME
        r = self.ssh.run_sh(f"command -v {program} >/dev/null 2>&1", timeout=60)
        if r.returncode == 255:
            raise WorkbenchError(f"ssh to {self.where} failed: "
                                 f"{last_line(r.stderr.decode(errors='replace'))}",
                                 where=self.spec.origin)
        if r.returncode != 0:
            raise WorkbenchError(f"gemma-workbench is not installed on {self.where} as "
                                 f"{program}", where=self.spec.origin, hint=INSTALL_HINT)

    def run_cli(self, words: str, *, timeout: float = 300) -> subprocess.CompletedProcess:
        """``<remote command> WORDS`` on the remote; a missing command is one clear line."""
        command = self.remote_command()
        r = self.ssh.run(f"{THERE} {command} {words}", timeout=timeout)
        if r.returncode in (126, 127):
            raise WorkbenchError(f"cannot run gemma-workbench on {self.where} ({command}: "
                                 f"{last_line(r.stderr.decode(errors='replace')) or 'not found'})",
                                 where=self.spec.origin, hint=INSTALL_HINT)
        return r

    def _start_engine(self) -> dict[str, Any]:
        r = self.run_cli("engine start --json", timeout=300)
        out = r.stdout.decode(errors="replace")
        status = None
        for line in reversed(out.strip().splitlines()):
            with contextlib.suppress(ValueError):
                candidate = json.loads(line)
                if isinstance(candidate, dict) and "listen" in candidate:
                    status = candidate
                    break
        if r.returncode != 0 or status is None:
            why = last_line(r.stderr.decode(errors="replace")) or last_line(out) or \
                f"exit status {r.returncode}"
            raise WorkbenchError(f"the engine on {self.where} did not start: {why}",
                                 where=self.spec.origin,
                                 hint=f"see its log there: `ssh {self.where} "
                                      f"{self.remote_command()} engine status`")
        return status

    def _read_token(self, remote_socket: str) -> str:
        token_path = str(Path(remote_socket).with_name("engine.token"))
        r = self.ssh.run(f"cat -- {shlex.quote(token_path)}", timeout=60)
        token = r.stdout.decode(errors="replace").strip()
        if r.returncode != 0 or not token:
            raise WorkbenchError(f"cannot read the engine token on {self.where}: "
                                 f"{last_line(r.stderr.decode(errors='replace'))}",
                                 where=token_path)
        return token

    def _handshake(self, *, interactive: bool) -> None:
        from workbench import __version__

        self.ssh.ensure_master(interactive=interactive)
        command = self.remote_command()
        status = self._start_engine()
        problem = version_problem(status, self.where, api.API_VERSION, __version__)
        if problem:
            raise problem
        remote_socket = status["listen"]["socket"]
        old = self._load_cache().get("remote_socket")
        if old and old != remote_socket:
            self.ssh.cancel_forward(old)
        self.token = self._read_token(remote_socket)
        self.ssh.forward(remote_socket)
        self.info = {"host": self.spec.host, "remote_command": command,
                     "remote_socket": remote_socket, "token": self.token,
                     "data_dir": status.get("data_dir"), "version": status.get("version")}
        try:
            self.status = self._probe()
        except httpx.HTTPError as e:
            raise WorkbenchError(f"the engine on {self.where} does not answer through the "
                                 f"forwarded socket ({brief(e)})", where=self.spec.origin,
                                 hint="the ssh server must allow socket forwarding "
                                      "(sshd_config: AllowTcpForwarding and "
                                      "AllowStreamLocalForwarding yes, the defaults)") from None
        _write_private(self.cache_path, json.dumps(self.info) + "\n")

    def refresh_token(self) -> None:
        """The engine answered 401: it restarted with a new token; read it again."""
        with self._lock:
            self.token = self._read_token(self.info.get("remote_socket")
                                          or self._start_engine()["listen"]["socket"])
            self.info["token"] = self.token
            _write_private(self.cache_path, json.dumps(self.info) + "\n")
