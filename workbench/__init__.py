"""gemma-workbench's terminal UI and CLI: a client of the engine (``adapters_lib``).

Nothing here imports JAX, gemma, keras or tensorflow at start-up; commands that compute in
the foreground import ``adapters_lib``'s heavy modules inside their handlers.
"""

__version__ = "0.2.0"
