"""Multi-host (multi-controller) JAX: one process per host, all running the same program.

- ``distributed``: ``initialize(coordinator=, num_processes=, process_id=)``
  (``jax.distributed``; no arguments on a TPU VM slice), ``is_primary()``,
  ``process_index()``, ``process_count()``, ``local_device_count()``, ``describe()``.
- ``bus``: ``Bus`` — messages from process 0 to every process through JAX's collectives
  (``broadcast_one_to_all`` of length-prefixed JSON): the engine's commands, as
  ``command.to_json()``.
- ``control``: ``SyncedControl`` — process 0's stop decision, taken by every process at the
  same step.
- ``rundirs``: ``run_dir_for(path)`` — the plain ``RunDir`` on process 0, a ``FollowerRunDir``
  (no metrics, events or status written; the shared ``checkpoints/``) on the others.
- ``watchdog``: ``Watchdog`` — notices a lost process; the job then ends (restart, resume).
- ``hosts``: ``per_host_summary``, ``validate_hosts`` — what the estimate says per host.
- ``training``: ``train_one`` — one run directory as this process of the job;
  ``lost_peer``, ``mark_interrupted``.

``python -m adapters_lib.multihost train RUN_DIR ...`` trains one run directory as one process
of N (tests and scripts); the engine on every host is ``adapters_lib.engine.multihost``.
Nothing here imports jax at module level.
"""

from adapters_lib.multihost.bus import HEADER, MIN_BUCKET, Bus, decode, encode
from adapters_lib.multihost.control import SyncedControl
from adapters_lib.multihost.distributed import (
    describe,
    initialize,
    is_primary,
    local_device_count,
    on_tpu_vm,
    parse_coordinator,
    process_count,
    process_index,
)
from adapters_lib.multihost.hosts import per_host_summary, validate_hosts
from adapters_lib.multihost.rundirs import FollowerRunDir, run_dir_for
from adapters_lib.multihost.training import lost_peer, mark_interrupted, train_one
from adapters_lib.multihost.watchdog import Watchdog

__all__ = [
    "HEADER", "MIN_BUCKET", "Bus", "decode", "encode", "SyncedControl", "describe",
    "initialize", "is_primary", "local_device_count", "on_tpu_vm", "parse_coordinator",
    "process_count", "process_index", "per_host_summary", "validate_hosts", "FollowerRunDir",
    "run_dir_for", "lost_peer", "mark_interrupted", "train_one", "Watchdog",
]
