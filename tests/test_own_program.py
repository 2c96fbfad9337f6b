"""``train.own_program``: a LoRA family run's own program compiles only when the run has more
left than a compile takes, judged from its measured step time."""

from __future__ import annotations

from adapters_lib.train import own_program


def test_a_run_longer_than_a_compile_starts_its_own_after_its_first_measured_steps():
    started: list[int] = []
    later = own_program.OwnProgramLater(lambda: started.append(1), total_steps=1000, worth=120.0)
    assert not later.due(1, now=0.0)  # before step 1
    assert not later.due(2, now=10.0)  # step 1 took 10 s (its compile): left out, the clock starts
    assert not later.due(3, now=10.5)  # one step measured: not yet judged
    assert later.due(4, now=11.0) and started == [1]  # 0.5 s a step, 997 steps left: ~498 s
    assert later.due(5, now=11.5) and started == [1]  # started once


def test_a_short_run_whose_first_step_compiled_does_not_start_its_own():
    """A cold 10-step run: step 1 waits ~120 s for its compile, the others take 0.3 s."""
    started: list[int] = []
    later = own_program.OwnProgramLater(lambda: started.append(1), total_steps=10, worth=120.0)
    times = [0.0, 120.0] + [120.0 + 0.3 * k for k in range(1, 9)]
    assert not any(later.due(step, now=t) for step, t in zip(range(1, 11), times, strict=True))
    assert not started


def test_a_run_shorter_than_a_compile_never_starts_its_own(caplog):
    import logging

    started: list[int] = []
    later = own_program.OwnProgramLater(lambda: started.append(1), total_steps=100, worth=120.0)
    with caplog.at_level(logging.INFO, logger="adapters_lib"):
        for step in range(1, 101):
            assert not later.due(step, now=step * 0.3)  # 0.3 s a step: 30 s in all
    assert not started
    assert caplog.text.count("the run's own program is not compiled") == 1  # said once


def test_the_setting_zero_starts_at_once_and_a_bad_value_keeps_the_default(monkeypatch, caplog):
    started: list[int] = []
    monkeypatch.setenv(own_program.ENV, "0")
    assert own_program.later(lambda: started.append(1), 10) is None and started == [1]
    monkeypatch.setenv(own_program.ENV, "soon")
    assert own_program.worth_s() == own_program.DEFAULT_WORTH_S and "not seconds" in caplog.text
    monkeypatch.setenv(own_program.ENV, "30")
    later = own_program.later(lambda: started.append(2), 10)
    assert later is not None and later.worth == 30.0 and started == [1]
