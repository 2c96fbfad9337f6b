"""The engine's request handlers, one module per concern, registered by command type.

- ``engine_info``: status, shutdown, the catalog, data check, estimate;
- ``run_commands``: create, list, get, stop, resume, delete, stream a run;
- ``generation``: sample, compare, export, eval (device jobs);
- ``evals``: the evaluation area's sweeps and checkpoint scoring;
- ``compiles``: compile a config's programs ahead, the compile queue's jobs.

``HANDLERS`` (``table.py``) maps each command class to its handler; an area that adds a
command adds its handler with ``@handles(TheCommand)`` in a module of its own (imported
below).
"""

from adapters_lib.engine.handlers import (  # noqa: F401
    compiles,
    engine_info,
    evals,
    generation,
    run_commands,
)
from adapters_lib.engine.handlers.table import HANDLERS, GenerationStream, handles, then

__all__ = ["HANDLERS", "GenerationStream", "handles", "then"]
