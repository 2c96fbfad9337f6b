"""``python -m adapters_lib.engine``: the engine process.

Start-up order (fast to ready: JAX is imported after the socket answers):
1. take an exclusive lock (``engine.lock`` in ``<state dir>/run``, where logout does not
   remove it; ``locations``): one engine per user/home;
2. log to ``<state dir>/engine.log`` (fds 1 and 2 too, so native libraries never write to a
   terminal), write ``engine.pid``;
3. write a fresh random token to ``engine.token`` (0600), bind ``engine.sock`` (0600) and,
   only when asked, a TCP address (still with the token); write ``engine.json``;
4. mark runs a dead engine left behind as ``interrupted``; import JAX in the background.
SIGTERM/SIGINT or ``POST /v1/shutdown`` stop it: the active run is asked to stop at its next
step (it stays resumable), then the process exits and removes its socket and pid file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import fcntl
import json
import logging
import logging.handlers
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from adapters_lib import __version__, paths
from adapters_lib.engine import locations
from adapters_lib.errors import WorkbenchError
from adapters_lib.import_shields import tf_deferred

if TYPE_CHECKING:
    from adapters_lib.engine.service import Engine

log = logging.getLogger("adapters_lib.engine")


def files() -> dict[str, Path]:
    """The engine's files (``locations.engine_files``: the state dir, never the runtime dir)."""
    return locations.engine_files()


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 from the first byte (no readable window)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def parse_tcp(text: str, *, any_address: bool = False) -> tuple[str, int]:
    return locations.parse_tcp(text, any_address=any_address)


def _setup_logging(log_path: Path, foreground: bool) -> None:
    paths.ensure_private_dir(log_path.parent)
    os.close(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
    handler = logging.handlers.RotatingFileHandler(log_path, maxBytes=10 << 20, backupCount=3)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
    handler.setFormatter(fmt)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    if foreground:
        console = logging.StreamHandler(sys.stderr)
        console.setFormatter(fmt)
        root.addHandler(console)
    else:  # native code (XLA, TF, absl) writes to fds 1/2: send them to the log too
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
    for noisy in ("aiohttp.access", "absl", "jax._src", "orbax"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _sample_stacks(log_path: Path) -> None:
    """With ``GEMMA_WORKBENCH_STACKS_EVERY_S`` > 0: a ``StackSampler`` writes to ``stacks.log``
    beside the engine log how long each of its wake-ups waited for the GIL, and every thread's
    stack after a long wait: what a stall between steps was spent on."""
    every = paths.env_number("GEMMA_WORKBENCH_STACKS_EVERY_S")
    if every > 0:
        from adapters_lib.engine.stack_sampler import StackSampler

        StackSampler(log_path.with_name("stacks.log"), every).start()
        log.info("thread stacks every %.2f s to %s", every, log_path.with_name("stacks.log"))


SWITCH_INTERVAL_S = 0.0005
"""The engine's thread switch interval unless ``GEMMA_WORKBENCH_SWITCH_INTERVAL_S`` says
otherwise (Python's default is 5 ms)."""


def _switch_interval(text: str) -> None:
    """The interpreter's thread switch interval: ``GEMMA_WORKBENCH_SWITCH_INTERVAL_S``, else
    ``SWITCH_INTERVAL_S``. A thread that wants the GIL waits up to that long each time it takes
    it back while another thread computes in Python (a compile job's trace beside a run's
    steps, or beside an ``eval``). On the v5e, while a job traced beside the 1B's steps, the
    stack sampler woke 2–16 ms late (0 before and after) and the steps took 1.5–3.1 s instead
    of 0.31 s. On this CPU (``bench.gil_waits --dry``, 9 processes), beside a Python-busy
    thread, the 1B's reduced-shape step took 25–205 ms at 5 ms and 20–26 ms at 0.5 ms
    (14–17 ms alone), and the demo's ``eval --run`` 516–600 and 132–164 ms (65–83 ms alone).
    Switches happen only when a thread waits, so a short interval costs nothing when none
    does."""
    seconds = SWITCH_INTERVAL_S
    if text:
        try:
            seconds = float(text)
            if not 0 < seconds <= 1:
                raise ValueError
        except ValueError:
            log.warning("GEMMA_WORKBENCH_SWITCH_INTERVAL_S is %r, not seconds in (0, 1]; %.2g ms is kept",
                        text, SWITCH_INTERVAL_S * 1e3)
            seconds = SWITCH_INTERVAL_S
    sys.setswitchinterval(seconds)
    log.info("thread switch interval %.2g ms%s", seconds * 1e3,
             " (GEMMA_WORKBENCH_SWITCH_INTERVAL_S)" if text and seconds != SWITCH_INTERVAL_S else "")


def _lock(path: Path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


async def _exit_when_idle(engine, stop: asyncio.Event, idle_exit: float) -> None:
    while not stop.is_set():
        await asyncio.sleep(min(5.0, idle_exit / 4))
        if engine.idle_for() >= idle_exit:
            log.info("idle for %.0f s with no run and no client: exiting", idle_exit)
            stop.set()


async def serve(*, foreground: bool, tcp: str | None, warm: bool, idle_exit: float = 0,
                engine_factory: Callable[..., Engine] | None = None,
                tcp_any_address: bool = False) -> int:
    """Serve the API until asked to stop. ``engine_factory(handlers=, warm=)`` makes the engine
    (default ``service.Engine``; the multi-host leader passes its ``LeaderEngine``).

    Whatever ends it (a stop, a port already taken, a crash), its socket, token and info
    files go with it: a client never finds a token for an engine that is not there."""
    f = files()
    address = parse_tcp(tcp, any_address=tcp_any_address) if tcp else None
    locations.check_socket_path(f["socket"])
    try:
        return await _serve(f, foreground=foreground, address=address, warm=warm,
                            idle_exit=idle_exit, engine_factory=engine_factory)
    finally:
        for key in ("socket", "token", "info", "pid"):
            with contextlib.suppress(FileNotFoundError):
                f[key].unlink()


async def _serve(f: dict[str, Path], *, foreground: bool, address: tuple[str, int] | None,
                 warm: bool, idle_exit: float,
                 engine_factory: Callable[..., Engine] | None) -> int:
    from aiohttp import web

    from adapters_lib.engine.handlers import HANDLERS
    from adapters_lib.engine.server import STOP_KEY, make_app
    from adapters_lib.engine.service import Engine

    t0 = time.perf_counter()
    engine = (engine_factory or Engine)(handlers=HANDLERS, warm=warm)
    token = secrets.token_urlsafe(32)
    write_private(f["token"], token + "\n")
    app = make_app(engine, token)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    with contextlib.suppress(FileNotFoundError):
        f["socket"].unlink()  # stale: we hold the lock, so no engine is using it
    old_umask = os.umask(0o077)
    try:
        await web.UnixSite(runner, str(f["socket"])).start()
    finally:
        os.umask(old_umask)
    os.chmod(f["socket"], 0o600)
    engine.listen = {"socket": str(f["socket"])}
    if address is not None:
        site = web.TCPSite(runner, *address)
        try:
            await site.start()
        except OSError as e:
            await runner.cleanup()
            raise WorkbenchError(f"cannot listen on TCP {address[0]}:{address[1]}: "
                                 f"{e.strerror or e}", where="--tcp",
                                 hint="choose another port (0 picks a free one)") from None
        sock = site._server.sockets[0]  # the real port when 0 was asked
        bound = sock.getsockname()
        engine.listen["tcp"] = f"{bound[0]}:{bound[1]}"
        log.warning("listening on TCP %s as asked (token required)", engine.listen["tcp"])
    write_private(f["info"], json.dumps({"pid": os.getpid(), "version": __version__,
                                         "started": time.time(), **engine.listen}) + "\n")
    engine.start()
    from adapters_lib.engine.gc_policy import IdleCollector

    collector = IdleCollector(engine.idle_for,  # full collections while idle, not in runs
                              young_poll_s=paths.env_number("GEMMA_WORKBENCH_GC_POLL_S")).start()
    _switch_interval(os.environ.get("GEMMA_WORKBENCH_SWITCH_INTERVAL_S", ""))
    log.info("engine %s ready in %.2f s (pid %d) on %s", __version__, time.perf_counter() - t0,
             os.getpid(), f["socket"])

    stop = app[STOP_KEY]
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    if idle_exit > 0:
        idle_task = asyncio.ensure_future(_exit_when_idle(engine, stop, idle_exit))
    await stop.wait()
    if idle_exit > 0:
        idle_task.cancel()
    log.info("engine stopping")
    collector.stop()
    await asyncio.to_thread(engine.shutdown)
    await asyncio.sleep(0.1)  # let the shutdown response go out
    await runner.cleanup()
    log.info("engine stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m adapters_lib.engine",
                                     description="The gemma-workbench engine process.")
    parser.add_argument("--foreground", action="store_true",
                        help="also log to this terminal (default: only to the log file)")
    parser.add_argument("--tcp", metavar="HOST:PORT",
                        help="also listen on TCP, on a loopback address (token still "
                             "required); port 0 picks one")
    parser.add_argument("--tcp-any-address", action="store_true",
                        help="allow --tcp on a non-loopback address (plain HTTP: the token "
                             "crosses the network in clear text)")
    parser.add_argument("--idle-exit", type=float, default=0, metavar="SECONDS",
                        help="exit after this long with no run, no job and no client "
                             "(0 = never; engines started on demand use "
                             "GEMMA_WORKBENCH_ENGINE_IDLE_EXIT, default 1800)")
    parser.add_argument("--no-warm", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    tf_deferred.install()  # gemma's model code imports TensorFlow, which this process never runs
    f = files()
    try:  # a mistake in the arguments: one line, and nothing made
        if args.tcp:
            parse_tcp(args.tcp, any_address=args.tcp_any_address)
        locations.check_socket_path(f["socket"])
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    lock, held_by = take_lock(f)
    if lock is None:
        print(f"engine already running (pid {held_by}); socket {f['socket']}", file=sys.stderr)
        return 3
    try:
        _setup_logging(f["log"], args.foreground)
        faulthandler.enable(all_threads=True)  # a fatal signal's stacks go to fd 2: the log
        _sample_stacks(f["log"])
        write_private(f["pid"], f"{os.getpid()}\n")
        return asyncio.run(serve(foreground=args.foreground, tcp=args.tcp,
                                 tcp_any_address=args.tcp_any_address,
                                 warm=not args.no_warm, idle_exit=args.idle_exit))
    except WorkbenchError as e:
        log.error("engine not started: %s", e)
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception:
        log.exception("engine crashed")
        return 1
    finally:
        for held in lock:
            os.close(held)


def take_lock(f: dict[str, Path]) -> tuple[list[int] | None, str]:
    """The engine lock (one engine per user and device set), and the lock of an engine of an
    earlier version (in the runtime dir), so neither runs beside this one. ``(None, pid)``
    when another engine holds one of them."""
    paths.ensure_private_dir(f["socket"].parent)
    os.chmod(f["socket"].parent, 0o700)
    held: list[int] = []
    for path in (f["lock"], locations.legacy_lock()):
        if path is None or (path != f["lock"] and not path.exists()):
            continue
        fd = _lock(path)
        if fd is None:
            for other in held:
                os.close(other)
            pid_file = path.with_name("engine.pid")
            return None, pid_file.read_text().strip() if pid_file.exists() else "?"
        held.append(fd)
    return held, ""
