"""Where the suite's time goes, per test file: printed at the end of every run (CI's log too).

Each test's setup, call and teardown is timed in the process that runs it (an xdist worker or
the only one): wall seconds (pytest's own ``report.duration``) and CPU seconds (user + system of
that process and of the children it waited for, ``getrusage`` deltas: a CLI run with
``subprocess.run`` counts, a detached engine does not). The CPU figure travels to the controller
in ``report.user_properties``; the controller adds them up per file and prints the costliest
files, the totals, each worker's CPU outside its tests (start-up, collection) and peak memory,
the machine's CPU use over the run (``/proc/stat``: other processes' load shows there), the
least memory it had available and its major page faults (memory pressure without swap).
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections import defaultdict
from collections.abc import Iterator

import pytest

ROWS = 25
_KEY = "timing_cpu_s"


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _own_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _machine_ticks() -> tuple[int, int, int] | None:
    """(busy, stolen, total) jiffies of all CPUs since boot, or None off Linux. Stolen: time a
    virtual machine's CPUs waited for the host (other guests), counted in neither."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    steal = fields[7] if len(fields) > 7 else 0
    return sum(fields) - idle - steal, steal, sum(fields)


def _meminfo_mib(field: str) -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return None


def _major_faults() -> int | None:
    """The machine's major page faults since boot: pages read back from disk. With no swap,
    memory pressure shows here, as code pages of the shared libraries evicted and read again."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("pgmajfault "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


class _MemoryWatch(threading.Thread):
    """The least memory available over the run (``MemAvailable``, sampled every 2 s)."""

    def __init__(self) -> None:
        super().__init__(name="timing-memory", daemon=True)
        self.least = _meminfo_mib("MemAvailable")
        self.faults = _major_faults()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(2.0):
            now = _meminfo_mib("MemAvailable")
            if now is not None and (self.least is None or now < self.least):
                self.least = now

    def line(self) -> str | None:
        self.done.set()
        total, faults = _meminfo_mib("MemTotal"), _major_faults()
        if self.least is None or total is None:
            return None
        line = f"memory: at least {self.least / 1024:.1f} GiB of {total / 1024:.1f} available"
        if self.faults is not None and faults is not None:
            line += f"; {faults - self.faults} major page faults on the machine"
        return line


class _Timing:
    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)
        self.workers: dict[str, tuple[float, ...]] = {}  # id: (process CPU, CPU in tests, peak MiB)
        self.memory: _MemoryWatch | None = None
        self.started = time.monotonic()
        self.ticks = _machine_ticks()
        self.in_tests = 0.0  # this process's CPU inside tests (a worker's own figure)
        self.own_cpu = _cpu()

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """How many processes run the tests, said first: ``-n auto`` counts physical cores."""
        config = session.config
        if getattr(config, "workerinput", None) is not None:
            return
        workers = getattr(config.option, "numprocesses", None) or 0
        self.memory = _MemoryWatch()
        self.memory.start()
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"timing: {workers or 'no'} xdist workers, {os.cpu_count()} CPUs"
                                f" (load average {', '.join(f'{v:.1f}' for v in os.getloadavg())})")

    # --- in the process that runs the test -------------------------------------------------
    def _phase(self, item: pytest.Item) -> Iterator[None]:
        before = _cpu()
        yield
        spent = _cpu() - before
        self.in_tests += spent
        item.stash[_phase_cpu] = spent

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        yield from self._phase(item)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        yield from self._phase(item)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        yield from self._phase(item)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
        outcome = yield
        report = outcome.get_result()
        report.user_properties.append((_KEY, round(item.stash.get(_phase_cpu, 0.0), 3)))
        item.stash[_phase_cpu] = 0.0

    # --- in the controller (or the only process) -------------------------------------------
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = report.nodeid.split("::", 1)[0]
        self.wall[name] += report.duration
        self.cpu[name] += sum(v for k, v in report.user_properties if k == _KEY)
        if report.when == "call":
            self.tests[name] += 1

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        output = getattr(session.config, "workeroutput", None)
        if output is not None:  # an xdist worker: its totals go back with it
            output["timing_cpu"] = (_cpu(), self.in_tests, _peak_mib())

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        figures = getattr(node, "workeroutput", {}).get("timing_cpu")
        if figures:
            gateway = getattr(node, "gateway", None)
            self.workers[getattr(gateway, "id", str(len(self.workers)))] = figures

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.wall:
            return
        write = terminalreporter.write_line
        elapsed = time.monotonic() - self.started
        terminalreporter.section(f"time per test file (costliest {ROWS} by CPU)")
        write(f"{'cpu s':>8} {'wall s':>8} {'cpu/wall':>8} {'tests':>6}  file")
        ranked = sorted(self.wall, key=lambda n: (-self.cpu[n], -self.wall[n]))
        for name in ranked[:ROWS]:
            wall, cpu = self.wall[name], self.cpu[name]
            write(f"{cpu:8.1f} {wall:8.1f} {cpu / wall if wall else 0:8.2f} {self.tests[name]:6d}  {name}")
        rest = ranked[ROWS:]
        if rest:
            write(f"{sum(self.cpu[n] for n in rest):8.1f} {sum(self.wall[n] for n in rest):8.1f}"
                  f" {'':8} {sum(self.tests[n] for n in rest):6d}  ({len(rest)} other files)")
        write(f"{sum(self.cpu.values()):8.1f} {sum(self.wall.values()):8.1f} {'':8}"
              f" {sum(self.tests.values()):6d}  all {len(self.wall)} files (in tests)")
        for worker, (total, in_tests, *peak) in sorted(self.workers.items()):
            write(f"worker {worker}: {total:.1f} s CPU, {total - in_tests:.1f} s of it outside tests"
                  f" (start-up, collection, session teardown); peak RSS {peak[0] if peak else 0:.0f} MiB")
        ticks, now = self.ticks, _machine_ticks()
        write(f"session: {elapsed:.1f} s wall, {len(self.workers) or 'no'} xdist workers,"
              f" {os.cpu_count()} CPUs; load average now {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
        if ticks and now and now[2] > ticks[2]:
            hz = os.sysconf("SC_CLK_TCK")
            busy, stolen, total = ((b - a) / hz for a, b in zip(ticks, now, strict=True))
            # the workers' own figures, or the controller's children (the workers, once reaped,
            # with theirs): whichever counts more, never both
            ours = max(sum(figures[0] for figures in self.workers.values()) + _own_cpu(),
                       _cpu()) - self.own_cpu
            write(f"machine: {busy:.0f} CPU-s busy of {total:.0f} ({busy / total:.0%}), {stolen:.0f}"
                  f" stolen by the host; this run's processes {ours:.0f} CPU-s (waited-for children"
                  f" included), others {max(busy - ours, 0):.0f}")
        memory = self.memory.line() if self.memory is not None else None
        if memory:
            write(memory)


_phase_cpu = pytest.StashKey[float]()


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Timing(), "timing")
