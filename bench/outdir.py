"""Where a measure writes its raw logs and JSON when no ``--out`` is given: ``bench/NAME`` in the
data dir (``adapters_lib.paths.data_dir``), or ``$OUT`` when set (the device script sets it).
Raw output never goes into the repository; the few figures BENCHMARKS.md cites are copied to
``bench/results/`` by hand, named by what they measure."""

from __future__ import annotations

import os


def default_out(name: str) -> str:
    if os.environ.get("OUT"):
        return os.environ["OUT"]
    from adapters_lib import paths

    return str(paths.data_dir() / "bench" / name)
