"""Test-session set-up shared by every test.

- Every test session gets its own GEMMA_WORKBENCH_HOME (data, state, runtime dirs), so
  nothing touches the user's real directories.
- JAX sees 8 simulated CPU devices (set before jax is imported anywhere); code that wants
  one device says so (``[mesh] devices = 1`` or ``jax.devices()[:1]``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("KAGGLEHUB_CACHE", "/nonexistent-kagglehub-cache")
os.environ.setdefault("OLLAMA_MODELS", "/nonexistent-ollama-models")  # the catalog's stores:
os.environ.setdefault("LMSTUDIO_MODELS", "/nonexistent-lmstudio-models")  # none of the user's
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parent.parent

# Fixture modules per area (tests/fixtures_<area>.py) are loaded as plugins.
sys.path.insert(0, str(Path(__file__).resolve().parent))
pytest_plugins = sorted(p.stem for p in Path(__file__).resolve().parent.glob("fixtures_*.py"))
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session", autouse=True)
def workbench_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("wb-home")
    os.environ["GEMMA_WORKBENCH_HOME"] = str(home)
    os.environ.pop("GEMMA_WORKBENCH_RUNS", None)
    # A CLI command run in-process by a test may start an engine on demand (the computing
    # commands go through it): it exits when idle, and is shut down when the session ends.
    os.environ.setdefault("GEMMA_WORKBENCH_ENGINE_IDLE_EXIT", "300")
    yield home
    _stop_engine(home)


def _stop_engine(home: Path) -> None:
    from workbench.client import EngineClient

    run = home / "run"
    if not (run / "engine.sock").exists():
        return
    try:
        with EngineClient(socket_path=run / "engine.sock", token_path=run / "engine.token") as c:
            if c.ping():
                c.shutdown()
    except Exception:  # noqa: BLE001 - best effort at the end of the session
        pass


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable
