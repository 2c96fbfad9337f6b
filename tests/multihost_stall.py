"""One process of a multi-host training job that hangs after step K, as a wedged host would:
``python tests/multihost_stall.py --stall-at-step K train RUN_DIR --coordinator ...``
(the arguments of ``python -m adapters_lib.multihost train`` after ``--stall-at-step K``).

The other processes must notice (the watchdog) and the run must end ``interrupted``; see
tests/test_multihost.py.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapters_lib import multihost  # noqa: E402
from adapters_lib.multihost.__main__ import main  # noqa: E402


class StallControl(multihost.SyncedControl):
    """Hangs this process before step ``at + 1`` (after saying so on stdout)."""

    def __init__(self, bus: multihost.Bus, inner: Any = None, *, at: int):
        super().__init__(bus, inner)
        self.at = at
        self.steps = 0

    def between_steps(self) -> None:
        super().between_steps()
        self.steps += 1
        if self.steps == self.at:
            print(json.dumps({"stalled_at": self.at, "process": multihost.process_index()}),
                  flush=True)
            while True:
                time.sleep(60)


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 2 or args[0] != "--stall-at-step":
        sys.exit("usage: multihost_stall.py --stall-at-step K train RUN_DIR ...")
    at = int(args[1])
    sys.exit(main(args[2:], control=lambda bus, inner: StallControl(bus, inner, at=at)))
