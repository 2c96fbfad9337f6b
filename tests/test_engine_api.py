"""The engine's API against a real engine process: access control, bounds, errors, status.

One engine for the module (its last test trains a run on it and stops it with ``engine stop
--force``); one more, stopped at once, for the cold start; short ones without JAX (``--no-warm``)
for the TCP opt-in, the idle exit, ``engine stop`` and the logout.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from workbench.client import EngineClient
from workbench.engine_wire import EngineRequestError


def _raw(engine_process, token: str | None = "good") -> httpx.Client:
    """An httpx client on the engine's socket with the real token, a wrong one, or none."""
    headers = {}
    if token == "good":
        token = (engine_process.runtime / "engine.token").read_text().strip()
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    transport = httpx.HTTPTransport(uds=str(engine_process.runtime / "engine.sock"))
    return httpx.Client(base_url="http://engine", transport=transport, headers=headers,
                        timeout=30)


def _still_serving(engine: EngineClient) -> None:
    assert engine.status().api_version == 1


def test_socket_token_and_runtime_dir_are_private(engine_process):
    run = engine_process.runtime
    sock = run / "engine.sock"
    token = run / "engine.token"
    assert stat.S_ISSOCK(os.stat(sock).st_mode)
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(token).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(run).st_mode) == 0o700
    assert len(token.read_text().strip()) >= 32


def test_request_without_token_is_refused_and_engine_keeps_serving(engine_process, engine):
    with _raw(engine_process, token=None) as http:
        r = http.get("/v1/status")
    assert r.status_code == 401
    assert "token" in r.json()["error"]["message"]
    _still_serving(engine)


def test_request_with_wrong_token_is_refused(engine_process, engine):
    with _raw(engine_process, token="not-the-token") as http:
        r = http.get("/v1/runs")
        r2 = http.post("/v1/runs", json={"config": {}})
    assert (r.status_code, r2.status_code) == (401, 401)
    assert engine.list_runs() == []  # the refused create made nothing
    _still_serving(engine)


def test_malformed_body_gets_400_with_a_json_error(engine_process, engine):
    with _raw(engine_process) as http:
        not_json = http.post("/v1/runs", content=b"{not json", headers={
            "Content-Type": "application/json"})
        not_object = http.post("/v1/runs", json=[1, 2])
        wrong_type = http.post("/v1/runs", json={"overrides": "train.steps=3"})
        unknown_key = http.post("/v1/runs", json={"confg": {}})
    for r in (not_json, not_object, wrong_type, unknown_key):
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["message"] and "where" in err and "hint" in err
    assert "not valid JSON" in not_json.json()["error"]["message"]
    assert "did you mean 'config'" in unknown_key.json()["error"]["hint"]
    _still_serving(engine)


def test_ten_megabyte_body_is_refused_with_413(engine_process, engine):
    big = b'{"config_toml": "' + b"x" * (10 * 1024 * 1024) + b'"}'
    with _raw(engine_process) as http:
        r = http.post("/v1/runs", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert "too large" in r.json()["error"]["message"]
    _still_serving(engine)


def test_bad_config_is_refused_with_where_and_hint(engine):
    with pytest.raises(EngineRequestError) as info:
        engine.create_run(config_toml="[train]\nsteps = 0\n", source="my.toml")
    err = info.value
    assert err.status == 400
    assert err.where == "my.toml:2 [train] steps"
    assert "positive" in (err.hint or "")
    with pytest.raises(EngineRequestError, match="invalid TOML"):
        engine.create_run(config_toml="[train\n")
    assert engine.list_runs() == []


@pytest.mark.parametrize(("toml", "where", "needle"), [
    ('[model]\nquantize = "gguf"\n', "[model] quantize", "needs a GGUF base"),
    ('[model]\nquantize = "nf4"\nquantize_tile_size = 48\n', "[model] quantize_tile_size",
     "48 does not divide"),
], ids=["gguf-on-demo", "tile-48"])
def test_a_quantize_the_base_cannot_take_is_refused_before_a_run_exists(engine, toml, where,
                                                                        needle):
    """The load would refuse it after the run was queued (a failed run left behind): the launch
    refuses it, and the estimate (Configure, `train --estimate`) says it, naming the key."""
    with pytest.raises(EngineRequestError) as info:
        engine.create_run(config_toml=toml + "[train]\nsteps = 2\n")
    assert info.value.status == 400 and info.value.where == where
    assert needle in str(info.value) and "\n" not in str(info.value)
    assert engine.list_runs() == []
    reply = engine.estimate(config_toml=toml)
    assert not reply.ok
    [error] = [p for p in reply.mesh_problems if p.level == "error"]
    assert error.where == where and needle in error.message


def test_unknown_run_and_route_are_404(engine_process, engine):
    with pytest.raises(EngineRequestError) as info:
        engine.get_run("no-such-run")
    assert info.value.status == 404
    with _raw(engine_process) as http:
        assert http.get("/v1/nothing-here").status_code == 404
        assert http.get("/v2/status").status_code == 404


def test_status_reports_versions_devices_and_idle(engine):
    s = engine.status(wait=True)
    assert s.api_version == 1 and s.version
    assert s.jax.ready and s.backend == "cpu"
    assert len(s.devices) >= 1
    assert {"id", "platform", "kind", "memory_bytes"} <= set(s.devices[0].to_json())
    assert s.busy is False and s.active_run is None
    assert "tcp" not in s.listen  # never on a network interface unless asked


def test_second_engine_in_the_same_home_refuses_to_start(engine_process, engine):
    env = {**os.environ, "GEMMA_WORKBENCH_HOME": str(engine_process.home)}
    out = subprocess.run([sys.executable, "-m", "adapters_lib.engine"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 3
    assert "already running" in out.stderr
    _still_serving(engine)


def test_cli_engine_status_json_talks_to_the_engine(engine_process, engine):
    env = {**os.environ, "GEMMA_WORKBENCH_HOME": str(engine_process.home)}
    out = subprocess.run([sys.executable, "-m", "workbench", "engine", "status", "--json"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["pid"] == engine_process.pid


def test_tcp_only_on_explicit_request_and_still_with_token(engine_factory):
    proc = engine_factory(args=["--tcp", "127.0.0.1:0", "--no-warm"])
    info = json.loads((proc.runtime / "engine.json").read_text())
    host, port = info["tcp"].rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    url = f"http://{host}:{port}"
    with httpx.Client(base_url=url, timeout=10) as http:
        assert http.get("/v1/status").status_code == 401
        wrong = http.get("/v1/status", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
    token = (proc.runtime / "engine.token").read_text().strip()
    with EngineClient(url=url, token=token) as client:
        assert client.status().listen["tcp"] == info["tcp"]


def test_models_lists_the_demo_model(engine):
    models = engine.models()
    demo = [m for m in models if m.id == "demo"]
    assert demo and demo[0].status == "ok"


def test_estimate_gives_memory_params_and_mesh_problems_without_training(engine):
    from fixtures_engine import demo_run_config

    good = engine.estimate(demo_run_config())
    assert good.ok and good.mesh_problems == []
    assert good.estimate["total"] > 0 and good.trainable_params > 0
    assert good.device_count == 1
    assert [row.verdict for row in good.devices] == [good.estimate["verdict"]]
    # the demo model has 1 KV head: a 4-way tensor axis replicates it (said, not fatal)
    warn = engine.estimate(demo_run_config(), overrides=["mesh.devices=4", "mesh.tensor=4"])
    assert warn.ok and "num_kv_heads" in warn.mesh_problems[0].message
    bad = engine.estimate(demo_run_config(), overrides=["mesh.devices=4", "mesh.data=3",
                                                        "mesh.tensor=1"])
    assert not bad.ok and bad.estimate is None
    assert any(p.level == "error" for p in bad.mesh_problems)
    assert engine.status().active_run is None and engine.list_runs() == []


def test_data_check_reports_problems_in_a_file(engine, tmp_path):
    good = {"messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": "hello"}]}
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps(good) + "\n" + "{broken\n" + json.dumps(good) + "\n")
    report = engine.data_check(str(path))
    assert report.records >= 2
    assert report.error_count >= 1  # the broken line, with its line number
    with pytest.raises(EngineRequestError) as info:
        engine.data_check(str(tmp_path / "missing.jsonl"))
    assert info.value.status == 400


def test_an_engine_started_on_demand_exits_when_idle(engine_factory):
    proc = engine_factory(args=["--idle-exit", "1", "--no-warm"])
    assert proc.client.status().busy is False
    proc.proc.wait(timeout=30)  # nobody uses it: it goes, and frees the devices
    assert not (proc.runtime / "engine.sock").exists()
    assert "idle for" in proc.log_text()


def test_cli_engine_stop_ends_the_engine_and_removes_its_socket(engine_factory):
    proc = engine_factory(args=["--no-warm"])
    env = {**os.environ, "GEMMA_WORKBENCH_HOME": str(proc.home)}
    out = subprocess.run([sys.executable, "-m", "workbench", "engine", "stop", "--json"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"running": False, "stopped_pid": proc.pid}
    assert proc.proc.wait(timeout=30) == 0
    assert not (proc.runtime / "engine.sock").exists()
    status = subprocess.run([sys.executable, "-m", "workbench", "engine", "status"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 1 and "not running" in status.stdout


def test_replies_are_typed_records_that_still_read_like_dicts(engine):
    from adapters_lib.engine import api

    s = engine.status(wait=True)
    assert isinstance(s, api.EngineStatus)
    assert s.api_version == api.API_VERSION == 1
    assert s.jax.ready and s.health.device_thread == "alive"
    dev = s.devices[0]
    assert isinstance(dev, api.DeviceInfo) and dev.platform == "cpu"
    assert "bytes_in_use" in dev.to_json()  # null on CPU, but always said
    assert not isinstance(s, dict)  # typed replies only: no dict view to index
    assert api.EngineStatus.from_json(s.to_json()) == s
    runs = engine.list_runs()
    assert isinstance(runs, list) and all(isinstance(r, api.RunSummary) for r in runs)


def test_deep_nesting_and_huge_integers_in_a_body_are_400_not_500(engine_process, engine):
    deep = b'{"config": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    huge = b'{"prompt": "hi", "seed": ' + b"9" * 5000 + b"}"
    big = b'{"prompt": "hi", "seed": ' + b"9" * 30 + b"}"
    nan = b'{"prompt": "hi", "temperature": NaN}'
    with _raw(engine_process) as http:
        answers = {name: http.post(path, content=body, headers={
            "Content-Type": "application/json"}) for name, path, body in (
            ("deep", "/v1/runs", deep), ("huge", "/v1/sample", huge),
            ("big", "/v1/sample", big), ("nan", "/v1/sample", nan))}
    for name, r in answers.items():
        assert r.status_code == 400, (name, r.status_code, r.text[:300])
        assert r.json()["error"]["message"], name
    assert "nested too deeply" in answers["deep"].json()["error"]["message"]
    assert "64 bits" in answers["big"].json()["error"]["message"]
    assert "finite" in answers["nan"].json()["error"]["message"]
    _still_serving(engine)


def test_a_deep_or_huge_config_toml_and_an_uncreatable_run_dir_are_400_not_500(engine, tmp_path):
    before = {r.id for r in engine.list_runs()}
    deep = "[data]\nfield_map = " + "{a=" * 3000 + '"x"' + "}" * 3000 + "\n"
    huge = "[run]\nname = 'x'\n[train]\nsteps = " + "9" * 5000 + "\n"
    afile = tmp_path / "a-file"
    afile.write_text("not a folder\n", encoding="utf-8")
    cases = {"deep": dict(config_toml=deep, source="deep.toml"),
             "huge": dict(config_toml=huge, source="huge.toml"),
             "file": dict(config={"run": {"dir": str(afile)}}),
             "proc": dict(config={"run": {"dir": "/proc"}})}  # exists; nothing can be made there
    errors = {}
    for name, kwargs in cases.items():
        with pytest.raises(EngineRequestError) as info:
            engine.create_run(**kwargs)
        errors[name] = info.value
        assert info.value.status == 400, (name, info.value.status, info.value.message)
        assert "\n" not in info.value.message and "Traceback" not in info.value.message, name
    assert "nested too deeply" in errors["deep"].message and errors["deep"].where == "deep.toml"
    assert "4300 digits" in errors["huge"].message and errors["huge"].where == "huge.toml:4"
    assert errors["file"].where.endswith("[run] dir") and errors["proc"].where == "[run] dir"
    assert "cannot create" in errors["proc"].message and "/proc" in errors["proc"].message
    assert {r.id for r in engine.list_runs()} == before  # nothing half-made
    _still_serving(engine)


def test_an_unreadable_model_says_why_and_what_to_do(engine, tmp_path):
    folder = tmp_path / "weights" / "broken-gemma"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "gemma3_text", "num_hidden_')
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    entries = [m for m in engine.models(folders=[str(tmp_path / "weights")])
               if m.path.startswith(str(tmp_path))]
    assert entries, "the catalog did not list the folder"
    bad = entries[0]
    assert bad.status != "ok"
    assert bad.reason and bad.problems == [bad.reason]
    assert bad.hint
    demo = [m for m in engine.models() if m.id == "demo"][0]
    assert demo.problems == [] and demo.arch and demo.arch["num_layers"] >= 1


def test_the_engine_starts_without_tensorflow_for_the_gemma_route(engine_process, engine):
    """gemma's orbax checkpoint helpers (``gm.ckpts``: kauldron → clu → TensorFlow) are
    resolved on first use, not at start-up: the heavy imports end with TensorFlow deferred."""
    t0 = time.monotonic()
    while "engine modules imported" not in engine_process.log_text():
        assert time.monotonic() - t0 < 300, engine_process.log_text()[-3000:]
        time.sleep(0.2)
    log = engine_process.log_text()
    start_up = log[:log.index("engine modules imported")]
    assert "JAX ready" in start_up
    assert "TensorFlow imported on first use" not in start_up, start_up[-2000:]


def test_an_engine_that_ends_before_it_answers_is_said_to_have_exited(tmp_path, monkeypatch):
    """``wait_ready`` given the engine's process: one that ends before it answers is reported
    with its status (and after how long), not as "did not become ready in 60 s" (on the TPU VM
    a start said that ~20 s after the engine had died)."""
    from workbench.engine_process import EngineNotRunning

    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(7)"])
    t0 = time.monotonic()
    with EngineClient(socket_path=tmp_path / "engine.sock", token="t") as client:
        with pytest.raises(EngineNotRunning, match=r"the engine exited with status 7 \d+ s after"):
            client.wait_ready(timeout=60, proc=proc)
    assert time.monotonic() - t0 < 30  # at once, not after the timeout


def test_the_catalog_and_runs_are_answered_before_jax_is_warm(engine_factory):
    """A fresh engine answers the catalog and the runs while JAX and gemma import. It samples
    its threads' stacks meanwhile (``GEMMA_WORKBENCH_STACKS_EVERY_S``): on the TPU VM the
    engine died within seconds of being ready when faulthandler's watchdog read them (without
    the GIL) during that import; the sampler reads them with the GIL, and the engine lives."""
    proc = engine_factory(env={"GEMMA_WORKBENCH_STACKS_EVERY_S": "0.05"})  # JAX imports behind
    t0 = time.monotonic()
    models = proc.client.models()
    runs = proc.client.list_runs()
    seconds = time.monotonic() - t0
    warm = "engine modules imported" in proc.log_text()
    assert [m for m in models if m.id == "demo"] and runs == []
    if warm:
        proc.stop()
        pytest.skip(f"the heavy imports were done before the catalog was asked ({seconds:.1f} s)")
    status = proc.client.status()
    assert not status.jax.modules_ready  # answered while gemma was still importing
    print(f"catalog + runs on a cold engine in {seconds:.2f} s")
    stacks = proc.log_path.with_name("stacks.log")
    deadline = time.monotonic() + 30
    while not (stacks.exists() and stacks.read_text().count(" late ") >= 3):
        assert time.monotonic() < deadline and proc.proc.poll() is None, proc.log_text()[-2000:]
        time.sleep(0.05)
    assert proc.client.status().version and proc.proc.poll() is None
    proc.stop()  # now: the rest of its imports would only cost CPU (2 cores shared by the suite)


def test_long_generations_do_not_hold_the_threads_that_answer_status(engine):
    """More generations than the server has threads: status and runs still answer at once
    (each generation waits for the device thread as a future, holding no thread)."""
    streams = 10
    done: list[str] = []

    def generate() -> None:
        done.append(list(engine.sample("Tell me a long story.", model="demo",
                                       max_new_tokens=48))[-1].type)

    threads = [threading.Thread(target=generate) for _ in range(streams)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    while engine.status().pending_jobs < streams - 1:  # all but the one on the device
        assert time.monotonic() - t0 < 120, "the generations did not reach the engine"
        time.sleep(0.05)
    slowest = 0.0
    for _ in range(5):
        t1 = time.monotonic()
        engine.status()
        engine.list_runs()
        slowest = max(slowest, time.monotonic() - t1)
    pending = engine.status().pending_jobs
    for t in threads:
        t.join(600)
    assert done == ["done"] * streams
    assert pending >= 1, "the generations were over before status was asked"
    assert slowest < 5.0, f"status waited {slowest:.1f} s behind generations"
    print(f"status + runs while {streams} generations queued: slowest {slowest * 1000:.0f} ms")


def _leftovers(run_dir) -> list[str]:
    return sorted(p.name for p in run_dir.glob("engine.*") if p.name != "engine.lock")


@pytest.mark.parametrize("value", ["nonsense", "127.0.0.1:http", "127.0.0.1:70000", "::1:80",
                                   "0.0.0.0:0", "example.com:8765"])
def test_a_bad_tcp_value_is_one_line_and_leaves_no_socket_or_token(tmp_path, value):
    env = {**os.environ, "GEMMA_WORKBENCH_HOME": str(tmp_path)}
    for argv in (["-m", "workbench", "engine", "start", "--tcp", value],
                 ["-m", "adapters_lib.engine", "--tcp", value]):
        out = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 2, (argv, out.stdout, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and "--tcp" in lines[0], lines
        assert "Traceback" not in out.stderr
        assert _leftovers(tmp_path / "run") == []
    if value.startswith("0.0.0.0"):
        assert "loopback" in lines[0] and "--tcp-any-address" in lines[0]


def test_a_tcp_port_already_taken_ends_the_engine_in_words_and_cleans_up(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "GEMMA_WORKBENCH_HOME": str(tmp_path)}
        out = subprocess.run([sys.executable, "-m", "adapters_lib.engine", "--no-warm",
                              "--tcp", f"127.0.0.1:{port}"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    log = (tmp_path / "state" / "engine.log").read_text()  # a detached engine's stderr is its log
    assert "engine not started: --tcp: cannot listen on TCP" in log and "Traceback" not in log
    assert _leftovers(tmp_path / "run") == []


def test_logout_does_not_hide_the_engine_and_a_second_one_refuses(short_tmp):
    """The engine's lock and socket are in the state dir: removing the runtime dir (what
    logind does at logout) leaves both, so the next client finds the engine that runs."""
    import shutil

    tmp_path = short_tmp
    base = {k: v for k, v in os.environ.items() if k != "GEMMA_WORKBENCH_HOME"}
    xdg = {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    first_runtime, later_runtime = tmp_path / "xdg-1", tmp_path / "xdg-2"
    for d in (first_runtime, later_runtime):
        d.mkdir(mode=0o700)
    env = {**base, **xdg, "XDG_RUNTIME_DIR": str(first_runtime)}
    proc = subprocess.Popen([sys.executable, "-m", "adapters_lib.engine", "--no-warm"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=(tmp_path / "engine-stderr.txt").open("w"), start_new_session=True)
    try:
        sock = tmp_path / "state" / "gemma-workbench" / "run" / "engine.sock"
        t0 = time.monotonic()
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() - t0 < 60, \
                "the engine did not start: " + (tmp_path / "engine-stderr.txt").read_text()[-2000:]
            time.sleep(0.05)
        shutil.rmtree(first_runtime)  # logout
        later = {**base, **xdg, "XDG_RUNTIME_DIR": str(later_runtime)}
        found = subprocess.run([sys.executable, "-m", "workbench", "engine", "status", "--json"],
                               env=later, capture_output=True, text=True, timeout=120)
        assert found.returncode == 0, found.stdout + found.stderr
        assert json.loads(found.stdout)["pid"] == proc.pid
        second = subprocess.run([sys.executable, "-m", "adapters_lib.engine", "--no-warm"],
                                env=later, capture_output=True, text=True, timeout=120)
        assert second.returncode == 3 and "already running" in second.stderr
    finally:
        proc.terminate()
        proc.wait(60)


@pytest.mark.slow  # ~40-90 s on 2 cores: a real run must be training when the stop comes
def test_engine_stop_force_checkpoints_and_stops_the_run_it_trains(engine_process):
    """`engine stop --force` (SIGTERM takes the same path: test_engine_faults) says why it
    waits, and the run is checkpointed where it stopped.

    It stops the module's engine (warm, its demo model loaded by the tests above), so it is the
    file's last test: a test added after it that uses ``engine`` would find no engine."""
    from fixtures_engine import demo_run_config

    from adapters_lib import runs

    proc = engine_process
    client = proc.client
    run = client.create_run(demo_run_config(steps=500, checkpoint_every=1000))
    t0 = time.monotonic()
    while client.get_run(run.id, metrics=False, events=False).step < 2:
        assert time.monotonic() - t0 < 300, "the run did not start training"
        time.sleep(0.2)
    env = {**os.environ, "GEMMA_WORKBENCH_HOME": str(proc.home)}
    out = subprocess.run([sys.executable, "-m", "workbench", "engine", "stop", "--force"],
                         env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert out.stderr == f"run {run.id} stops at its next step (it checkpoints, resumable); " \
                         "the engine exits after it\n"
    assert out.stdout == f"engine stopped (pid {proc.pid})\n"
    assert proc.proc.wait(60) == 0, proc.log_text()[-3000:]
    on_disk = runs.RunDir(Path(run.dir))
    status = on_disk.status()
    assert status["state"] == "stopped", status
    assert 2 <= status["step"] < 500
    assert on_disk.checkpoints()[-1] == status["step"]  # saved where it stopped
    assert not (proc.runtime / "engine.sock").exists()
    assert not (proc.runtime / "engine.token").exists()
