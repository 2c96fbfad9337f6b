"""The test fake answers like the real engine: same requests, same shapes of answers.

``engine_scenario.play`` sends every route once; played against a real engine process and
against ``EngineFake`` (which serves ``tests/recorded/engine_replies.json``), the answers
must have the same keys and types everywhere: that test is
``tests/test_generation_engine.py::test_the_fake_answers_every_route_in_the_real_engines_shapes``,
on that module's engine (its run, samplers and export are the ones the scenario needs: ~20 s of
CPU on 2 cores less than an engine of its own). When it fails after an API change, record
again: ``python tests/record_engine_replies.py``. Here: the fake alone, through the API types.
"""

from __future__ import annotations

import pytest
from engine_fake import EngineFake

from adapters_lib.engine import api
from workbench.engine_wire import EngineRequestError


def test_the_fake_reads_every_recorded_answer_through_the_api_types():
    fake = EngineFake()
    assert isinstance(fake.status(), api.EngineStatus) and len(fake.status().devices) == 8
    models = fake.models()
    assert all(isinstance(m, api.ModelInfo) for m in models)
    broken = [m for m in models if m.status != "ok"]
    assert broken and broken[0].problems and broken[0].hint  # the unreadable folder says why
    assert len(fake.run_ids) == 2
    run = fake.get_run(fake.run_ids[0])
    assert isinstance(run, api.RunDetail) and run.state == "completed"
    assert len(run.metrics) == run.total_steps and run.checkpoints
    items = list(fake.stream_run(run.id))
    assert items[-1].type == "end" and isinstance(items[-1].data, api.RunEnd)
    assert [i.type for i in fake.compare("hi", run.id)][-1] == "done"
    assert isinstance(fake.estimate({"mesh": {"tensor": 4}}).mesh_problems[0], api.MeshProblem)
    with pytest.raises(EngineRequestError) as info:
        fake.get_run("no-such-run")
    assert info.value.status == 404
