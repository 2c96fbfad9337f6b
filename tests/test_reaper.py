"""``train.reaper``: a step's donated state dies on the reaper's thread, not the device thread's
(what that saves a step beside a busy thread is measured in ``bench.gil_waits``, not here)."""

from __future__ import annotations

import threading

from adapters_lib.train import reaper


class _Noted:
    died_on: list[str] = []

    def __del__(self) -> None:
        _Noted.died_on.append(threading.current_thread().name)


def test_what_is_handed_over_dies_on_the_reapers_thread():
    _Noted.died_on = []
    obj = [_Noted(), _Noted()]
    reaper.drop(obj)
    del obj
    assert reaper.settle()
    assert _Noted.died_on == [reaper.THREAD_NAME] * 2


def test_a_run_hands_each_donated_state_to_the_reaper(tmp_path, monkeypatch):
    """The gemma route's step loop drops the state it donated, and the step's batch, through
    the reaper (each step's); the live state stays with the trainer."""
    from fixtures_runs import train_demo

    from adapters_lib.train import loop

    handed: list = []
    real = reaper.drop

    def noting(obj):
        handed.append(type(obj[0]).__name__)
        real(obj)

    monkeypatch.setattr(loop.reaper, "drop", noting)
    _, result = train_demo(tmp_path, "reaped", train__steps=3)
    assert result.state == "completed"
    assert handed == ["TrainState"] * 3
