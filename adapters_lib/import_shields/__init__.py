"""Shields against what third-party libraries do when they are imported.

- ``tf_deferred`` — TensorFlow imported on first use, not when gemma's model code is imported
  (``install``; ``preimport_quietly``: the CLI's quiet JAX import);
- ``tf_absent`` — where TensorFlow is not installed, gemma's model code still imports;
- ``native_logs`` — native libraries' start-up lines kept off the terminal (``fd2_silenced``);
- ``trace_context`` — JAX's trace context made complete before the first program is traced
  (``complete``), so no later import makes every kept program trace again.

Each is installed by a process that computes (the engine, a foreground CLI command, ``python -m
bench``, the test session), never by importing a module. Importing the package is cheap
(standard library only).
"""

from adapters_lib.import_shields import native_logs as native_logs
from adapters_lib.import_shields import tf_absent as tf_absent
from adapters_lib.import_shields import tf_deferred as tf_deferred
from adapters_lib.import_shields import trace_context as trace_context
from adapters_lib.import_shields.native_logs import fd2_silenced as fd2_silenced
