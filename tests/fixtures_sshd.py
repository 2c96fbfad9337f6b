"""A real OpenSSH server on 127.0.0.1 for the remote-engine tests.

``sshd_server`` (module scope): installs ``openssh-server`` when it is missing (root and
apt-get: ``apt-get install -y openssh-server``, services kept from starting), makes a host
key and a user key in a temp dir, and runs ``sshd -D`` on a free loopback port with its own
config (no PAM, no passwords, only that user key, ``StrictModes no``). The "remote user" is
this Unix user with its own HOME and GEMMA_WORKBENCH_HOME (``SetEnv`` in sshd_config), and
the repository on PYTHONPATH, so the remote side runs this checkout's code. The client side
gets an ssh config file (``Host wb-remote``: port, key, known_hosts with the host key,
``StrictHostKeyChecking yes``) through ``GEMMA_WORKBENCH_SSH_COMMAND="ssh -F FILE"``.
The tests skip, saying why, only where sshd cannot be installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from xla_flags import FAST_XLA

SSHD = Path("/usr/sbin/sshd")
REPO = Path(__file__).resolve().parent.parent
ALIAS = "wb-remote"
JUMP_ALIAS = "wb-jump"


def _install_sshd() -> str | None:
    """Install openssh-server if missing; the reason it cannot be, else None."""
    if SSHD.exists():
        return None
    if os.geteuid() != 0:
        return "sshd is not installed and the tests do not run as root (apt-get needs it)"
    if not shutil.which("apt-get"):
        return "sshd is not installed and there is no apt-get to install openssh-server"
    lock_path = Path("/tmp/gemma-workbench-sshd-install.lock")
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time on a shared machine
        if SSHD.exists():
            return None
        policy = Path("/usr/sbin/policy-rc.d")  # keep the package from starting a system sshd
        made_policy = not policy.exists()
        if made_policy:
            policy.write_text("#!/bin/sh\nexit 101\n")
            policy.chmod(0o755)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        cmd = ["apt-get", "install", "-y", "--no-install-recommends", "openssh-server"]
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
            if r.returncode != 0:
                subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=900)
                r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"installing openssh-server failed: {e}"
        finally:
            if made_policy:
                policy.unlink(missing_ok=True)
    if not SSHD.exists():
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["?"]
        return f"apt-get install openssh-server failed: {tail[0]}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True,
                   timeout=60)


def _session_compile_cache(root: Path) -> Path:
    """The compile cache every engine of the test session shares (conftest sets
    ``GEMMA_WORKBENCH_COMPILE_CACHE``), else the session home's default one."""
    shared = os.environ.get("GEMMA_WORKBENCH_COMPILE_CACHE")
    if shared:
        return Path(shared)
    home = os.environ.get("GEMMA_WORKBENCH_HOME")
    return Path(home) / "state" / "compile-cache" if home else root / "compile-cache"


def remote_command() -> str:
    """The absolute path of this venv's gemma-workbench (what the remote side runs)."""
    exe = Path(sys.executable).parent / "gemma-workbench"
    return str(exe if exe.exists() else shutil.which("gemma-workbench"))


@dataclass
class Sshd:
    root: Path
    port: int
    proc: subprocess.Popen
    ssh_config: Path
    remote_home: Path
    """HOME of the remote user (``SetEnv``)."""
    remote_wb_home: Path
    """GEMMA_WORKBENCH_HOME of the remote user: the remote engine's files are here."""
    host: str = ALIAS

    @property
    def ssh_command(self) -> str:
        return f"ssh -F {self.ssh_config}"

    def client_env(self, local_home: Path, **extra: str) -> dict[str, str]:
        """The environment of a local `gemma-workbench` that uses this server."""
        env = {**os.environ, "GEMMA_WORKBENCH_HOME": str(local_home),
               "GEMMA_WORKBENCH_SSH_COMMAND": self.ssh_command,
               "GEMMA_WORKBENCH_REMOTE_COMMAND": remote_command(),
               "PYTHONPATH": str(REPO), **extra}
        env.pop("GEMMA_WORKBENCH_REMOTE", None)
        env.pop("GEMMA_WORKBENCH_RUNS", None)
        return env

    def ssh(self, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(["ssh", "-F", str(self.ssh_config), self.host, command],
                              capture_output=True, text=True, timeout=timeout)

    def log(self) -> str:
        return (self.root / "sshd.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_sshd(root: Path) -> Sshd:
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    _keygen(root / "host_key")
    _keygen(root / "user_key")
    shutil.copy(root / "user_key.pub", root / "authorized_keys")
    remote_home, remote_wb = root / "rhome", root / "rwb"
    remote_home.mkdir(exist_ok=True)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    port = _free_port()
    env = {"HOME": remote_home, "GEMMA_WORKBENCH_HOME": remote_wb, "PYTHONPATH": REPO,
           "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8 " + FAST_XLA,
           "TF_CPP_MIN_LOG_LEVEL": "3", "KAGGLEHUB_CACHE": "/nonexistent-kagglehub-cache",
           "HF_HUB_OFFLINE": "1",
           # the session's compile cache: a remote run of the shapes other engine tests
           # compiled (demo model, 64 tokens, batch 4) skips most compiling
           "GEMMA_WORKBENCH_COMPILE_CACHE": _session_compile_cache(root)}
    (root / "sshd_config").write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {root / 'host_key'}",
        f"PidFile {root / 'sshd.pid'}", f"AuthorizedKeysFile {root / 'authorized_keys'}",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        "StrictModes no", "PermitRootLogin prohibit-password", "AllowStreamLocalForwarding yes",
        "X11Forwarding no", "PrintMotd no", "LogLevel VERBOSE",
        "MaxSessions 50", "MaxStartups 50",
        "SetEnv " + " ".join(f'"{k}={v}"' for k, v in env.items()), ""]))
    (root / "known_hosts").write_text(
        f"[127.0.0.1]:{port} {(root / 'host_key.pub').read_text().split(' ')[0]} "
        f"{(root / 'host_key.pub').read_text().split(' ')[1]}\n")
    user = pwd.getpwuid(os.getuid()).pw_name
    common = [f"  IdentityFile {root / 'user_key'}", "  IdentitiesOnly yes",
              f"  UserKnownHostsFile {root / 'known_hosts'}", "  StrictHostKeyChecking yes",
              "  BatchMode yes", "  LogLevel ERROR"]
    (root / "ssh_config").write_text("\n".join([
        f"Host {ALIAS}", "  HostName 127.0.0.1", f"  Port {port}", f"  User {user}", *common,
        # the same server again, reached through itself as a jump host (ProxyJump)
        f"Host {JUMP_ALIAS}", "  HostName 127.0.0.1", f"  Port {port}", f"  User {user}",
        f"  ProxyJump {ALIAS}", *common, ""]))
    check = subprocess.run([str(SSHD), "-t", "-f", str(root / "sshd_config")],
                           capture_output=True, text=True, timeout=30)
    if check.returncode != 0:
        raise AssertionError(f"sshd config refused: {check.stderr}")
    log = open(root / "sshd.log", "ab")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(root / "sshd_config")],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True)
    log.close()
    server = Sshd(root, port, proc, root / "ssh_config", remote_home, remote_wb)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30:
        if proc.poll() is not None:
            raise AssertionError(f"sshd exited {proc.returncode}: {server.log()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            break
        time.sleep(0.05)
    r = server.ssh("echo $HOME")
    if r.returncode != 0 or r.stdout.strip() != str(remote_home):
        server.stop()
        raise AssertionError(f"ssh to the test sshd failed: {r.stderr}\n{server.log()[-2000:]}")
    return server


@pytest.fixture(scope="module")
def sshd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    reason = _install_sshd()
    if reason:
        pytest.skip(reason)
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    try:
        yield server
    finally:
        server.stop()
