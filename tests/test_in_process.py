"""``--in-process``: the engine's own handlers, served inside the command's process.

No second implementation: a computing command with ``--in-process`` sends its command to an
``EmbeddedEngine`` (the daemon's ``Engine`` and API on a private socket), so the handler table
answers it — checked by wrapping the table's entry — and the engine leaves no socket, token or
lock where the user's engine keeps them.
"""

from __future__ import annotations

import json

import pytest

from adapters_lib.engine import api
from adapters_lib.engine.handlers import HANDLERS
from adapters_lib.engine.locations import engine_files
from workbench.cli import main


@pytest.fixture(autouse=True)
def own_home(short_tmp, monkeypatch):
    """A home no engine serves: an on-demand engine that an earlier CLI test of this process
    started in the session's home would refuse ``--in-process``."""
    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(short_tmp))
    return short_tmp


def test_an_in_process_command_is_answered_by_the_engines_handler(monkeypatch, capsys):
    seen = []
    real = HANDLERS[api.Estimate]

    def estimate(engine, cmd):
        seen.append(type(engine).__name__)
        return real(engine, cmd)

    monkeypatch.setitem(HANDLERS, api.Estimate, estimate)
    assert main(["train", "--in-process", "--estimate", "--json", "--set", "mesh.devices=1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert seen == ["Engine"] and out["ok"] is True and out["total_bytes"] > 0
    files = engine_files()
    assert not files["socket"].exists() and not files["token"].exists()


def test_detach_and_in_process_together_are_one_line(capsys):
    assert main(["train", "--in-process", "--detach", "--set", "mesh.devices=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--detach" in err[0] and "drop one of the two" in err[0]
