"""The test fake answers like the real engine: same requests, same shapes of answers.

``engine_scenario.play`` sends every route once; played against a real engine process and
against ``EngineFake`` (which serves ``tests/recorded/engine_replies.json``), the answers
must have the same keys and types everywhere. When this fails after an API change, record
again: ``python tests/record_engine_replies.py``.
"""

from __future__ import annotations

import pytest
from engine_fake import EngineFake
from engine_scenario import differences, play, run_config, shape

from adapters_lib.engine import api
from workbench.engine_wire import EngineRequestError


def _compare(real: dict, fake: dict) -> list[str]:
    out = [f"{k}: only in the real engine's answers" for k in real.keys() - fake.keys()]
    out += [f"{k}: only in the fake's answers" for k in fake.keys() - real.keys()]
    for key in real.keys() & fake.keys():
        a, b = real[key], fake[key]
        if key == "runs":  # keyed by run id: compare one run with one run
            a, b = next(iter(a.values())), next(iter(b.values()))
        if key == "data_check":  # file_formats is keyed by the file's path: compare values
            a, b = ({**x, "file_formats": list((x.get("file_formats") or {}).values())}
                    for x in (a, b))
        out += differences(shape(a), shape(b), key)
    return out


@pytest.mark.slow  # ~2-3 min on 2 cores: a real run, sample, compare, export; the one proof
def test_the_fake_answers_every_route_in_the_real_engines_shapes(engine_factory, tmp_path):
    # 4 steps: eval every 2, so the first metrics record has no eval_loss (as recorded)
    real = play(engine_factory().client, tmp_path / "real", runs=(run_config(4),))
    fake = play(EngineFake(), tmp_path / "fake")
    problems = _compare(real, fake)
    assert problems == [], "\n".join(problems[:40])


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
