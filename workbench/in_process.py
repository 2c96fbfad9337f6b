"""``--in-process``: a client of an engine inside this process.

``InProcessClient`` starts ``adapters_lib.engine.embedded.EmbeddedEngine`` (the engine's own
handlers and API on a private socket) and talks to it like to any engine; closing the client
ends that engine (its active run checkpoints and stops). So a computing command has one code
path whether its engine is the user's service, a remote one, or this process. Imports the
engine, hence JAX on first use: only the computing commands import this module.
"""

from __future__ import annotations

from workbench.client import EngineClient


class InProcessClient(EngineClient):
    """A client of an engine started in this process (see the module doc)."""

    def __init__(self) -> None:
        from adapters_lib.engine.embedded import EmbeddedEngine

        self.embedded = EmbeddedEngine().start()
        super().__init__(socket_path=self.embedded.socket, token=self.embedded.token, timeout=3600)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.embedded.close()


