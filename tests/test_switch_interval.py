"""The engine's thread switch interval: 0.5 ms unless ``GEMMA_WORKBENCH_SWITCH_INTERVAL_S`` says
otherwise; a bad value is a warning, and the default stays (the engine still starts)."""

from __future__ import annotations

import logging
import sys

import pytest

from adapters_lib.engine import daemon


@pytest.fixture(autouse=True)
def _restore():
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


@pytest.mark.parametrize(("text", "seconds", "warned"), [("", 0.0005, False), ("0.002", 0.002, False),
                                                         ("fast", 0.0005, True), ("0", 0.0005, True),
                                                         ("2", 0.0005, True)])
def test_the_interval(text, seconds, warned, caplog):
    with caplog.at_level(logging.INFO, logger=daemon.log.name):
        daemon._switch_interval(text)
    assert sys.getswitchinterval() == pytest.approx(seconds)
    assert any(r.levelno == logging.WARNING for r in caplog.records) == warned
    assert f"thread switch interval {seconds * 1e3:.2g} ms" in caplog.text
