"""Record the real engine's answers for the test fake: ``python tests/record_engine_replies.py``.

Starts a real engine (8 simulated CPU devices, a fresh GEMMA_WORKBENCH_HOME), plays
``engine_scenario.play`` with two 40-step demo runs (LoRA rank 8 and 16), and writes every
answer to ``tests/recorded/engine_replies.json`` (the file ``tests/engine_fake.py`` serves).
Temporary paths are rewritten to fixed ones, so the recording reads the same wherever it was
made. Takes a few minutes on 2 cores; run it again when the API changes
(``tests/test_engine_contract.py`` says when).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS.parent))

HOME = "/home/user/.gemma-workbench"
WORK = "/home/user/work"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=TESTS / "recorded" / "engine_replies.json")
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args(argv)
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("KAGGLEHUB_CACHE", "/nonexistent-kagglehub-cache")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from engine_scenario import play, run_config
    from fixtures_engine import EngineProcess

    with tempfile.TemporaryDirectory(prefix="wb-record-") as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        engine = EngineProcess(home, env={"HOME": str(Path(tmp) / "user")})
        t0 = time.monotonic()
        client = engine.start()
        try:
            answers = play(client, work, runs=(run_config(args.steps, 8, "demo"),
                                               run_config(args.steps, 16, "demo-r16")))
        finally:
            engine.stop()
        text = json.dumps(answers, indent=1, sort_keys=True, allow_nan=True)
        for real, fixed in ((str(work), WORK), (str(home), HOME), (tmp, "/tmp/wb-record")):
            text = text.replace(real, fixed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"recorded {len(answers)} answers in {time.monotonic() - t0:.0f} s → {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
