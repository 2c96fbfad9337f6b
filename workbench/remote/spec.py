"""Which remote engine to use: ``--remote`` > ``GEMMA_WORKBENCH_REMOTE`` > ``settings.toml``.

A ``RemoteSpec`` names the SSH destination (``[user@]host``, or a ``Host`` alias of the
user's ``~/.ssh/config``: keys, agent, ``ProxyJump`` all come from ssh itself), the command
that runs gemma-workbench there (``--remote-command`` > ``GEMMA_WORKBENCH_REMOTE_COMMAND`` >
``remote_command`` in settings.toml; empty = look for it), and the ssh program with its
options (``GEMMA_WORKBENCH_SSH_COMMAND``, like git's ``GIT_SSH_COMMAND``; default ``ssh``).
An empty ``--remote ''`` (or an empty ``GEMMA_WORKBENCH_REMOTE``) means this machine.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from dataclasses import dataclass

from adapters_lib.errors import WorkbenchError

ENV_REMOTE = "GEMMA_WORKBENCH_REMOTE"
ENV_COMMAND = "GEMMA_WORKBENCH_REMOTE_COMMAND"
ENV_SSH = "GEMMA_WORKBENCH_SSH_COMMAND"
DEFAULT_COMMAND = "gemma-workbench"
# where `make setup` / `pip install --user` put it when the remote PATH of a
# non-interactive ssh session lacks it (tried in this order when no command is given)
FALLBACK_COMMANDS = ("gemma-workbench", "$HOME/.local/bin/gemma-workbench",
                     "$HOME/gemma-workbench/.venv/bin/gemma-workbench")
_DESTINATION = re.compile(r"^(ssh://)?([A-Za-z0-9._%+-]+@)?[A-Za-z0-9._:\[\]-]+(:\d+)?$")


@dataclass(frozen=True)
class RemoteSpec:
    host: str
    """The ssh destination as the user typed it: ``user@host``, ``host``, a config alias."""
    command: str = ""
    """Shell text that runs gemma-workbench on the remote (a path, ``env VAR=… path``);
    empty: ``gemma-workbench`` on the remote PATH, else the usual install places."""
    ssh: tuple[str, ...] = ("ssh",)
    """The ssh program and options before the destination."""
    origin: str = "--remote"
    """Where the host came from (for messages): ``--remote``, the env var, settings.toml."""

    @property
    def key(self) -> str:
        """A short stable name for this destination's control files."""
        text = "\0".join((self.host, *self.ssh))
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def check_destination(host: str, origin: str) -> str:
    host = host.strip()
    if host.startswith("-") or not _DESTINATION.match(host):
        raise WorkbenchError(f"{host!r} is not an ssh destination", where=origin,
                             hint="give [user@]host or a Host alias from ~/.ssh/config, "
                                  "e.g. --remote me@tpu-vm")
    return host


def ssh_program() -> tuple[str, ...]:
    text = os.environ.get(ENV_SSH, "").strip()
    if not text:
        return ("ssh",)
    try:
        argv = tuple(shlex.split(text))
    except ValueError as e:
        raise WorkbenchError(f"{ENV_SSH} is not a command line ({e})", where=ENV_SSH,
                             hint='e.g. GEMMA_WORKBENCH_SSH_COMMAND="ssh -F ~/.ssh/tpu_config"') from None
    return argv or ("ssh",)


def resolve(flag: str | None = None, command_flag: str | None = None) -> RemoteSpec | None:
    """The remote engine asked for, or None for this machine's engine.

    ``flag``: the ``--remote`` value (None when not given; ``""`` forces this machine).
    """
    origin = "--remote"
    host = flag
    if host is None and ENV_REMOTE in os.environ:
        host, origin = os.environ[ENV_REMOTE], ENV_REMOTE
    settings = None
    if host is None:
        from workbench.settings import load_settings, settings_path

        settings = load_settings()
        host, origin = settings.remote, f"{settings_path()} (remote)"
    if not host or not host.strip():
        return None
    host = check_destination(host, origin)
    command = command_flag
    if command is None:
        command = os.environ.get(ENV_COMMAND)
    if command is None:
        if settings is None:
            from workbench.settings import load_settings

            settings = load_settings()
        command = settings.remote_command
    return RemoteSpec(host=host, command=(command or "").strip(), ssh=ssh_program(),
                      origin=origin)
