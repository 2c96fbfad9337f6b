"""Keep native libraries' start-up lines off the user's terminal.

TensorFlow (imported by gemma through kauldron, and by keras-hub) writes absl lines such as
"oneDNN custom operations are on" and "Could not find cuda drivers" straight to fd 2 when its
shared libraries load, before any Python logging is set up. A CLI command that computes in the
foreground imports JAX with fd 2 pointed at /dev/null, then restores it; TensorFlow is imported
only on first use, silenced the same way (``adapters_lib.import_shields.tf_deferred``, which also holds
``preimport_quietly``, the CLI's quiet JAX import).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def fd2_silenced() -> Iterator[None]:
    """Point fd 2 at /dev/null inside the block (Python exceptions still surface after it)."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)

