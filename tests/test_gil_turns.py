"""While a run's steps run, other threads hand the GIL back sooner (``train.gil_turns``; a run's
steps with it: ``test_train_loop``'s hook test)."""

from __future__ import annotations

import sys

from adapters_lib.train import gil_turns


def test_the_switch_interval_is_short_while_any_run_steps_and_restored_after():
    before = sys.getswitchinterval()
    first = gil_turns.steps_running()
    assert sys.getswitchinterval() == gil_turns.STEPS_INTERVAL
    second = gil_turns.steps_running()  # a second run (nested): the interval stays short
    first()
    first()  # idempotent: the count drops once
    assert sys.getswitchinterval() == gil_turns.STEPS_INTERVAL
    second()
    assert sys.getswitchinterval() == before
