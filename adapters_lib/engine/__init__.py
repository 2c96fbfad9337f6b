"""The engine: one long-lived process that owns JAX and the devices.

Training runs (one at a time), sampling, A/B and export happen here; the TUI and the CLI are
clients (``workbench/client.py``) speaking the versioned HTTP/JSON API of ``server.py`` over
a Unix socket with a token. ``commands.py`` holds the commands, ``service.py`` the ``Engine``,
``daemon.py`` the process entry (``python -m adapters_lib.engine``). See docs/engine-api.md.
Importing this package is cheap (no JAX, no aiohttp).
"""
