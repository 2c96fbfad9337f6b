"""Which engine this process talks to: ``connect()`` returns a client of the remote engine
that ``--remote`` chose (``workbench.remote.select``), else of this user's engine on this
machine, started detached when none answers (``EngineClient.connect``).

The one place that chooses: the client (``workbench.client``) knows how to talk to an
engine, ``workbench.remote`` how to reach one over SSH; this module sits above both.
Never imports JAX.
"""

from __future__ import annotations

from workbench.client import EngineClient
from workbench.engine_process import START_TIMEOUT_S


def connect(*, start: bool = True, timeout: float = START_TIMEOUT_S) -> EngineClient:
    """The client of the engine this process uses (see the module doc)."""
    from workbench import remote

    spec = remote.selected()
    if spec is not None:
        return remote.connect(spec)
    return EngineClient.connect(start=start, timeout=timeout)
