"""``python -m adapters_lib.multihost train RUN_DIR --coordinator HOST:PORT --num-processes N
--process-id I [--resume]``: train one run directory as one process of N (tests and scripts;
the engine uses ``adapters_lib.engine.multihost``). The memory-plan table of
docs/multihost.md is ``python -m bench.multihost_plan``.

Exit status: 0 trained, 2 a mistake (one line), 75 a process of the job was lost (the run is
``interrupted``: restart every process, then resume), as the watchdog exits."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from adapters_lib.errors import WorkbenchError
from adapters_lib.import_shields import tf_deferred
from adapters_lib.multihost.distributed import initialize, process_count, process_index
from adapters_lib.multihost.training import lost_peer, train_one
from adapters_lib.multihost.watchdog import Watchdog


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m adapters_lib.multihost")
    sub = p.add_subparsers(dest="action", required=True)
    t = sub.add_parser("train", help="train a run directory as one process of a multi-host job")
    t.add_argument("run_dir")
    t.add_argument("--coordinator")
    t.add_argument("--num-processes", type=int)
    t.add_argument("--process-id", type=int)
    t.add_argument("--resume", action="store_true")
    t.add_argument("--timeout", type=int, default=300, help="seconds to wait for all processes")
    t.add_argument("--heartbeat", type=int, default=100,
                   help="seconds without a heartbeat before a process is taken as dead")
    t.add_argument("--watchdog", type=float, default=None, metavar="SECONDS",
                   help="a process silent this long is lost (default 30, or "
                        "GEMMA_WORKBENCH_MULTIHOST_TIMEOUT)")
    return p


def main(argv: list[str] | None = None, *, control: Callable[..., Any] | None = None,
         args: argparse.Namespace | None = None) -> int:
    """Train as one process of the job and print ``{"process", "state", "step", "losses"}``.

    ``control(bus, inner)`` makes the training control (default ``SyncedControl``; tests
    pass one that stalls, as a wedged host would)."""
    args = args or parser().parse_args(argv)
    tf_deferred.install()  # gemma's model code imports TensorFlow, which training never runs
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(name)s: %(message)s")
    for noisy in ("absl", "jax._src", "orbax"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        initialize(coordinator=args.coordinator, num_processes=args.num_processes,
                   process_id=args.process_id, timeout_s=args.timeout,
                   heartbeat_timeout_s=args.heartbeat)
        try:
            result = train_one(Path(args.run_dir), resume=args.resume, control=control,
                               watchdog_s=args.watchdog)
        except WorkbenchError:
            raise
        except Exception as e:
            if process_count() > 1 and lost_peer(e):
                _exit_lost(e)
            raise
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = {"process": process_index(), "state": result.state, "step": result.step,
           "losses": {str(k): v for k, v in sorted(result.losses.items())}}
    print(json.dumps(out), flush=True)
    return 0


def _exit_lost(err: BaseException) -> NoReturn:
    """End this process now: a process of the job is gone (``train_one`` marked the run
    ``interrupted``). A normal exit would wait in ``jax.distributed``'s shutdown barrier until
    the lost process's heartbeat times out (``--heartbeat``, 100 s by default), then abort."""
    traceback.print_exception(err, file=sys.stderr)
    logging.getLogger("adapters_lib.multihost").error(
        "multi-host: a process of the job was lost; exiting (restart every process, then resume)")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(Watchdog.LOST_EXIT)


if __name__ == "__main__":
    sys.exit(main())
