"""Ctrl-C while a command follows a stream: remembered when its exception is lost."""

from __future__ import annotations

import os
import signal

import pytest

from workbench.commands._interrupts import interrupts


class _DropsItsInterrupt:
    """An object whose finalizer receives the Ctrl-C: CPython prints and drops it there."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):  # the handler runs at one of these bytecodes
            pass


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_ctrl_c_lost_in_a_finalizer_is_raised_at_the_next_check():
    with interrupts() as ctrl_c:
        obj = _DropsItsInterrupt()
        del obj  # the KeyboardInterrupt is raised and dropped inside __del__
        assert ctrl_c.pending == 1
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.check()
        ctrl_c.taken()
        ctrl_c.check()  # taken: nothing left to raise


def test_a_ctrl_c_still_interrupts_where_it_lands_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGINT)
    with interrupts() as ctrl_c:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10_000):
                pass
        assert ctrl_c.pending == 1
    assert signal.getsignal(signal.SIGINT) is before


def test_an_ignored_sigint_stays_ignored():
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell's `cmd &` starts it
    try:
        with interrupts() as ctrl_c:
            os.kill(os.getpid(), signal.SIGINT)
            ctrl_c.check()
            assert ctrl_c.pending == 0
    finally:
        signal.signal(signal.SIGINT, before)
