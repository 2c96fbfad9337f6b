"""One SSH connection to the engine's machine, shared by everything: OpenSSH ControlMaster.

``SshControl(spec)`` keeps its files in a 0700 directory of this user's runtime dir
(``<runtime>/remote/<key>/``): ``ctl`` (the master's control socket), ``engine.sock`` (the
remote engine's socket, forwarded here, 0600), ``ssh.log`` (the master's messages). Only the
system ``ssh`` is called, so the user's keys, agent, known_hosts and ``~/.ssh/config``
(``ProxyJump``, ``User``, ``Port``) apply as in a terminal. The master is started once
(``-M -N -f``, ``ControlPersist``) and reused by every later command, forward and copy;
a dead master's stale control socket is removed before a new one starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from adapters_lib import paths
from adapters_lib.errors import WorkbenchError
from workbench.remote.spec import RemoteSpec

PERSIST_S = 3600  # the master outlives its last user by this much (the next command reuses it)
ALIVE_S = 5  # keepalive probes: a dead link is noticed in ~ALIVE_S * 3 s
CONNECT_TIMEOUT_S = 20
# sun_path is 108 bytes; ssh adds ".XXXXXXXXXXXXXXXX" to the control path while binding
MAX_SOCKET_PATH = 90


def _private_dir(path: Path) -> Path:
    """``path`` as a directory owned by this user with mode 0700 (refuse anything else)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise WorkbenchError(f"{path} is not a directory of this user", where=str(path),
                             hint="remove it; gemma-workbench makes it again")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def control_dir(spec: RemoteSpec) -> Path:
    """``<runtime dir>/remote/<key>``, or ``/tmp/gemma-workbench-UID/<key>`` when that path
    is too long for a Unix socket."""
    base = paths.runtime_dir() / "remote"
    if len(os.fsencode(base / spec.key / "ctl")) > MAX_SOCKET_PATH:
        base = Path(tempfile.gettempdir()) / f"gemma-workbench-{os.getuid()}"
    else:
        _private_dir(base.parent)
    return _private_dir(_private_dir(base) / spec.key)


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("Warning: Permanently added", "debug"))]
    return lines[-1] if lines else ""


class SshControl:
    """The ssh master for one destination, and commands/forwards through it."""

    def __init__(self, spec: RemoteSpec):
        if shutil.which(spec.ssh[0]) is None:
            raise WorkbenchError(f"{spec.ssh[0]!r} is not installed here: --remote uses the "
                                 "system OpenSSH client", where=spec.origin,
                                 hint="install it (apt-get install openssh-client, or your "
                                      "system's package), or set GEMMA_WORKBENCH_SSH_COMMAND")
        self.spec = spec
        self.dir = control_dir(spec)
        self.ctl = self.dir / "ctl"
        self.local_socket = self.dir / "engine.sock"
        self.log = self.dir / "ssh.log"

    def argv(self, *extra: str, batch: bool = True, master: bool = False) -> list[str]:
        """ssh with our options, ``extra`` options, then the destination."""
        opts = ["-o", f"ControlPath={self.ctl}", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}"]
        if not master:  # never let a user's `ControlMaster auto` turn a command into a master
            opts += ["-o", "ControlMaster=no"]
        if batch:
            opts += ["-o", "BatchMode=yes"]
        return [*self.spec.ssh, *opts, *extra, self.spec.host]

    # ------------------------------------------------------------------ the master

    def master_pid(self) -> int | None:
        """The pid of a live master, or None."""
        if not self.ctl.exists():
            return None
        r = subprocess.run(self.argv("-O", "check"), capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=30)
        m = re.search(r"pid=(\d+)", r.stderr)
        return int(m.group(1)) if r.returncode == 0 and m else None

    def ensure_master(self, *, interactive: bool = False) -> int:
        """Start the master unless one is alive; return its pid.

        ``interactive``: ssh may ask on this terminal (passphrase, host key); otherwise
        ``BatchMode`` (the TUI owns the terminal, reconnects are unattended)."""
        pid = self.master_pid()
        if pid is not None:
            return pid
        # one starter at a time (a second `ssh -M` on a taken path would stay as a plain
        # connection nobody uses)
        fd = os.open(self.dir / "master.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            pid = self.master_pid()
            return pid if pid is not None else self._start_master(interactive)
        finally:
            os.close(fd)

    def _start_master(self, interactive: bool) -> int:
        with contextlib.suppress(FileNotFoundError):
            self.ctl.unlink()  # left by a master that was killed
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as log:
            # -f: ssh forks after authenticating; its stdout/stderr must not be our pipes
            # (a caller capturing our output would wait for the master to exit)
            r = subprocess.run(
                self.argv("-M", "-N", "-f", "-o", "ControlMaster=yes",
                          "-o", f"ControlPersist={PERSIST_S}",
                          "-o", f"ServerAliveInterval={ALIVE_S}", "-o", "ServerAliveCountMax=3",
                          "-o", "ExitOnForwardFailure=yes", "-o", "StreamLocalBindUnlink=yes",
                          "-o", "StreamLocalBindMask=0177", batch=not interactive, master=True),
                stdin=None if interactive else subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=log, timeout=CONNECT_TIMEOUT_S * 3)
        pid = self.master_pid() if r.returncode == 0 else None
        if pid is None:
            why = last_line(self.log.read_text(errors="replace")) or f"ssh exited {r.returncode}"
            raise WorkbenchError(f"cannot reach {self.spec.host} over ssh: {why}",
                                 where=self.spec.origin,
                                 hint=f"check that `ssh {self.spec.host}` works here "
                                      "(keys or agent, ~/.ssh/config, the host name)")
        return pid

    def exit_master(self) -> None:
        """Stop the master (and with it every forward); nothing on the remote changes."""
        if self.ctl.exists():
            subprocess.run(self.argv("-O", "exit"), capture_output=True, timeout=30,
                           stdin=subprocess.DEVNULL)
        with contextlib.suppress(FileNotFoundError):
            self.ctl.unlink()

    # ------------------------------------------------------------------ through it

    def run(self, command: str, *, input_bytes: bytes | None = None, stdin_path: Path | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
        """Run shell text on the remote through the master (``ssh host -- command``)."""
        argv = [*self.argv(), "--", command]
        if stdin_path is not None:
            with open(stdin_path, "rb") as f:
                return subprocess.run(argv, stdin=f, capture_output=True, timeout=timeout)
        return subprocess.run(argv, input=input_bytes if input_bytes is not None else b"",
                              capture_output=True, timeout=timeout)

    def run_sh(self, script: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
        """Run a POSIX sh script on the remote whatever the user's login shell is."""
        words = " ".join(shlex.quote(a) for a in args)
        return self.run(f"sh -c {shlex.quote(script)} sh {words}".rstrip(), **kwargs)

    def forward(self, remote_socket: str) -> Path:
        """Forward ``local_socket`` to the remote engine's socket (idempotent)."""
        spec = f"{self.local_socket}:{remote_socket}"
        r = subprocess.run(self.argv("-O", "forward", "-L", spec), capture_output=True,
                           text=True, stdin=subprocess.DEVNULL, timeout=30)
        if r.returncode != 0:
            raise WorkbenchError(f"cannot forward the engine socket from {self.spec.host}: "
                                 f"{last_line(r.stderr) or 'ssh -O forward failed'}",
                                 where=self.spec.origin,
                                 hint="the server must allow it (sshd: AllowStreamLocalForwarding "
                                      "yes, the default)")
        return self.local_socket

    def cancel_forward(self, remote_socket: str) -> None:
        subprocess.run(self.argv("-O", "cancel", "-L", f"{self.local_socket}:{remote_socket}"),
                       capture_output=True, stdin=subprocess.DEVNULL, timeout=30)
