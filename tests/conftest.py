"""Test-session set-up shared by every test.

- Every test session gets its own GEMMA_WORKBENCH_HOME (data, state, runtime dirs), so
  nothing touches the user's real directories.
- JAX sees 8 simulated CPU devices (set before jax is imported anywhere); code that wants
  one device says so (``[mesh] devices = 1`` or ``jax.devices()[:1]``). XLA:CPU compiles
  without its expensive LLVM passes (the suite is mostly compiles of small programs).
- TensorFlow is imported on first use, as in the engine (``adapters_lib.import_shields.tf_deferred``).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the fixture modules below, xla_flags
from xla_flags import FAST_XLA  # noqa: E402 - a constant, no import of jax

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8 " + FAST_XLA)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("KAGGLEHUB_CACHE", "/nonexistent-kagglehub-cache")
os.environ.setdefault("OLLAMA_MODELS", "/nonexistent-ollama-models")  # the catalog's stores:
os.environ.setdefault("LMSTUDIO_MODELS", "/nonexistent-lmstudio-models")  # none of the user's
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# no Compare warm-up after each run: measured, it does not slow the engine test files
# (test_engine_api 31.7 vs 28.3 s, test_engine_faults 34.4 vs 34.4 s, load ~1.3), but it would
# compile in the engines' idle time, between requests whose compiles and logs tests check;
# tests/test_warm_compare.py turns it on in its engines
os.environ.setdefault("GEMMA_WORKBENCH_WARM_COMPARE", "0")

from adapters_lib.import_shields import tf_deferred  # noqa: E402 - after the environment above

# Python's cyclic GC less often (default 700, 10, 10): a worker holds millions of objects (JAX,
# Keras, TensorFlow, XLA's executables) and each collection of the older generations walks them;
# refcounting still frees everything that is not in a cycle at once. Measured alone on 2 cores:
# tests/test_keras_route.py 37.1 -> 34.1 s CPU (GC 3.4 -> 0.7 s), test_gemma4_kv_sharing.py
# 81.9 -> 78.7 s (GC 6.6 -> 2.0 s), peak RSS +2 %.
gc.set_threshold(50_000, 20, 20)


def pytest_configure(config: pytest.Config) -> None:
    """One full collection when a worker ends, not pytest's five (``unraisableexception``):
    with these heaps each took ~2 s a worker (py-spy), at the end of every CI run. Unraisable
    exceptions from ``__del__`` are still reported."""
    try:
        from _pytest.unraisableexception import gc_collect_iterations_key
    except ImportError:  # another pytest: its own default
        return
    config.stash[gc_collect_iterations_key] = 1

tf_deferred.install()  # as the engine's processes do: TensorFlow only on first use

REPO = Path(__file__).resolve().parent.parent

# Fixture modules per area (tests/fixtures_<area>.py) are loaded as plugins.
pytest_plugins = [*sorted(p.stem for p in Path(__file__).resolve().parent.glob("fixtures_*.py")),
                  "timing_plugin"]  # time and CPU per test file, printed at the end
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session", autouse=True)
def workbench_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("wb-home")
    os.environ["GEMMA_WORKBENCH_HOME"] = str(home)
    os.environ.pop("GEMMA_WORKBENCH_RUNS", None)
    # A CLI command run in-process by a test may start an engine on demand (the computing
    # commands go through it): it exits when idle, and is shut down when the session ends.
    os.environ.setdefault("GEMMA_WORKBENCH_ENGINE_IDLE_EXIT", "300")
    _share_compile_cache(_session_root(tmp_path_factory) / "compile-cache")
    yield home
    _stop_engine(home)


def _session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder all of this test session's processes share: the base temp folder, or under
    pytest-xdist (``make test`` runs ``-n auto``) the one above each worker's own."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _share_compile_cache(folder: Path) -> None:
    """One JAX compile cache for the whole session: every engine process (each test module's
    own home), every CLI subprocess, this process and the other xdist workers. The demo
    model's programs (init, train step, sampler) are the same in most tests; compiled once,
    the next engine loads them from disk instead of compiling again (on 2 cores: ~90 s of
    set-up and ~40 s of step-1 compile down to ~10 s each). The programs are the same ones; only the compile is skipped.
    A caller's own ``GEMMA_WORKBENCH_COMPILE_CACHE`` (empty: off) is kept."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    chosen = os.environ.setdefault("GEMMA_WORKBENCH_COMPILE_CACHE", str(folder))
    if not chosen:
        return
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", chosen)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    if "jax" in sys.modules:  # imported during collection: its config already read the environment
        import jax

        jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs",
                          float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))


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


@pytest.fixture(autouse=True)
def _sigint_kept(request: pytest.FixtureRequest) -> Iterator[None]:
    """Ctrl-C as a shell gives it, around every test: SIGINT handled and not blocked. Whatever
    left it ignored or blocked (a test, or a library it drove) is named in a warning and
    undone: the worker's later subprocesses inherit both, and a CLI's Ctrl-C test then waits
    for a signal that never comes (one full run lost 10 tests to it)."""
    _sigint_restored(f"before {request.node.nodeid}")
    yield
    _sigint_restored(f"by {request.node.nodeid}")


def _sigint_restored(when: str) -> None:
    import signal
    import threading
    import warnings

    if threading.current_thread() is not threading.main_thread():
        return
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if ignored or blocked:
        warnings.warn(f"SIGINT left {'ignored' if ignored else 'blocked'} {when}; undone", stacklevel=1)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temp folder with a short path, for an engine's socket under it: a Unix socket's path
    must stay under ~100 bytes, which pytest's per-test folders pass under xdist
    (``.../popen-gw0/test_<long name>0/...``)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="wb-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable


# Under `make test` (pytest-xdist, `--dist loadfile`) a file runs on one worker, and each
# worker holds its own session fixtures. The files that share an expensive session fixture run
# on one worker too (one work unit), so the fixture is made once per session, not once a worker.
SHARED_FIXTURE_FILES = {
    "real_270m": ("test_real_270m.py", "test_dpo.py"),  # the real 270M load (~1.1 GB)
    "trained_demo_run": ("test_train_loop.py", "test_eval.py", "test_resume.py", "test_export.py",
                         "test_eval_run.py", "test_compare.py", "test_export_gguf.py",
                         "test_export_target.py", "test_export_gguf_llama.py"),  # a 40-step run
    "keras_presets": ("test_keras_gemma4.py", "test_gemma4_kv_sharing.py", "test_keras_presets.py"),
}
_UNIT = {name: "+".join(files) for files in SHARED_FIXTURE_FILES.values() for name in files}

# The files that take longest (seconds under `make test` on 2 cores, 2 workers, measured
# 2026-12-07 on a quiet machine: each file's setup, call and teardown), and the other files of
# a shared fixture's unit: their work units are handed out first, so no worker is left alone
# with one of them at the end of the suite. Order within a file is kept.
HEAVY_FILES = {"test_real_270m.py": 58, "test_gemma4_kv_sharing.py": 57, "test_dpo.py": 56,
               "test_lora_family.py": 47, "test_multihost.py": 45, "test_keras_gemma4.py": 43,
               "test_quantize_gptq.py": 41, "test_step.py": 41, "test_tpu_device_script.py": 37,
               "test_cli_train.py": 32, "test_engine_runs.py": 32, "test_tui_tmux.py": 32,
               "test_attention.py": 26, "test_program_store.py": 26,
               "test_keras_gemma4_parity.py": 25, "test_quantize.py": 25,
               "test_generation_engine.py": 25, "test_multihost_leader.py": 25,
               "test_engine_faults.py": 24, "test_compare.py": 23, "test_keras_route.py": 22,
               "test_readme_commands.py": 21, "test_quantize_run.py": 20, "test_tui_engine.py": 20,
               "test_engine_api.py": 19, "test_sweep_engine.py": 19,
               "test_compile_ahead_engine.py": 18, "test_slot_major_mlp.py": 17,
               "test_sample.py": 17, "test_sampler_family.py": 17, "test_family_engine.py": 16,
               "test_remote.py": 16, "test_warm_compare.py": 16, "test_decode_int8.py": 15,
               "test_tf_deferred.py": 15, "test_tui_keys.py": 15, "test_keras_presets.py": 14,
               "test_export.py": 13, "test_resume.py": 10, "test_train_loop.py": 5,
               "test_eval.py": 5, "test_eval_run.py": 10, "test_export_gguf.py": 3,
               "test_export_target.py": 1, "test_export_gguf_llama.py": 0}


def _unit_seconds(file_name: str) -> int:
    unit = _UNIT.get(file_name, file_name)
    return sum(HEAVY_FILES.get(name, 0) for name in unit.split("+"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: (-_unit_seconds(item.path.name), _UNIT.get(item.path.name, "")))


@pytest.hookimpl(optionalhook=True)  # known only with pytest-xdist loaded (not under -p no:xdist)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadfile`` with the files of ``SHARED_FIXTURE_FILES`` as one unit each, handed
    out in collection order (heaviest first, above) rather than xdist's default order by the
    number of tests, which would leave the heavy files with few tests (multihost, the device
    script) to the end."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFixtureFiles(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            unit = _UNIT.get(Path(path).name)
            return f"{Path(path).parent}/{{{unit}}}" if unit else path

    config.option.loadscopereorder = False
    return SharedFixtureFiles(config, log)
