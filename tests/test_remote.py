"""``--remote``: the engine on another machine over a real ssh (a loopback sshd, see
fixtures_sshd.py), and the parts of it that need no server (which host, the settings, the
version line, the flags on every sub-command).

The flow test is the issue's: the remote engine starts; a detached run (on a dataset copied
with ``--upload``) is created through ``--remote``; ``runs attach --remote`` follows it; the
ssh master is killed mid-stream and the client reconnects and follows to the end (the CLI
and the client API the TUI uses, with its link events); compare streams base and tuned
through the tunnel; the remote engine's token is in no file another user can read.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fixtures_sshd import REPO, Sshd, remote_command

from workbench import cli, remote
from workbench.remote.link import version_problem
from workbench.remote.spec import ENV_COMMAND, ENV_REMOTE, RemoteSpec, resolve
from workbench.settings import Settings, load_settings, save_settings, settings_path

GW = [sys.executable, "-m", "workbench"]


# --------------------------------------------------------------------------- no server


def test_remote_comes_from_the_flag_then_the_env_then_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(tmp_path))  # its own settings.toml
    monkeypatch.delenv(ENV_REMOTE, raising=False)
    monkeypatch.delenv(ENV_COMMAND, raising=False)
    assert resolve(None) is None
    save_settings(Settings(theme="workbench-dark", remote="me@from-settings",
                           remote_command="~/wb/.venv/bin/gemma-workbench"))
    try:
        spec = resolve(None)
        assert (spec.host, spec.command) == ("me@from-settings", "~/wb/.venv/bin/gemma-workbench")
        assert "settings.toml" in spec.origin
        monkeypatch.setenv(ENV_REMOTE, "env-host")
        assert resolve(None).host == "env-host"
        assert resolve("flag-host", "/opt/gw").host == "flag-host"
        assert resolve("flag-host", "/opt/gw").command == "/opt/gw"
        assert resolve("") is None  # an empty --remote forces this machine
        monkeypatch.setenv(ENV_REMOTE, "")
        assert resolve(None) is None
    finally:
        settings_path().unlink()


def test_saving_tui_settings_keeps_the_remote_the_user_wrote(monkeypatch, tmp_path):
    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(tmp_path))
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('remote = "me@tpu-vm"\nremote_command = "/opt/gw"\n\n[tui]\ntheme = "x"\n')
    try:
        save_settings(Settings(theme="workbench-light").with_prompt("hello"))  # the TUI's save
        loaded = load_settings()
        assert (loaded.remote, loaded.remote_command) == ("me@tpu-vm", "/opt/gw")
        assert (loaded.theme, loaded.prompt_history) == ("workbench-light", ("hello",))
    finally:
        path.unlink()


@pytest.mark.parametrize("bad", ["-oProxyCommand=touch /tmp/x", "me@host name", "a;b"])
def test_a_destination_that_is_not_one_is_refused_in_one_line(bad, capsys):
    rc = cli.main(["--remote", bad, "runs"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "not an ssh destination" in err


def test_remote_is_accepted_before_and_after_every_sub_command():
    parser = cli.build_parser()
    for argv in (["--remote", "h", "runs", "attach", "X"], ["runs", "attach", "X", "--remote", "h"],
                 ["runs", "--remote", "h"], ["engine", "status", "--remote=h"],
                 ["data", "check", "f.jsonl", "--remote", "h"], ["models", "--remote", "h"], ["models", "download", "x", "--remote", "h"],
                 ["train", "c.toml", "--detach", "--remote", "h"], ["doctor", "--remote", "h"]):
        assert parser.parse_args(argv).remote == "h", argv
    assert parser.parse_args(["runs"]).remote is None
    args = parser.parse_args(["--remote", "h", "runs", "--remote-command", "/x/gw"])
    assert (args.remote, args.remote_command) == ("h", "/x/gw")
    assert cli._strip_remote_options(["--remote", "h", "data", "check", "f", "--remote=h",
                                      "--remote-command", "/x"]) == ["data", "check", "f"]


def test_which_commands_reach_the_engine_and_which_run_over_there():
    parser = cli.build_parser()

    def route(*argv):
        return cli.remote_route(parser.parse_args(list(argv)))

    assert route("runs", "attach", "X") == "tunnel"
    assert route("web") == "tunnel"
    assert route("sweep", "run", "c.toml", "--grid", "train.learning_rate=1e-3,1e-4") == "tunnel"
    assert route("sweep", "show") == "tunnel"
    for argv in (["sample", "--prompt", "p"], ["compare", "--run", "x", "--prompt", "p"],
                 ["export", "x", "--out", "o"], ["train", "c.toml"]):
        if hasattr(parser.parse_args(argv), "in_process"):  # through the engine
            assert route(*argv) == "tunnel", argv
    assert route("train", "c.toml", "--detach") == "tunnel"
    assert route("train", "--print-config") == "here"
    for argv in (["engine", "start"], ["doctor"], ["data", "check", "f"], ["models"]):
        assert route(*argv) == "relay", argv
    from adapters_lib.errors import WorkbenchError

    args = parser.parse_args(["train", "c.toml"])
    if not hasattr(args, "in_process"):  # until foreground train follows through the engine
        with pytest.raises(WorkbenchError, match="--detach"):
            cli.remote_route(args)


def test_a_version_mismatch_says_which_side_to_upgrade():
    older = version_problem({"api_version": 0, "version": "0.0.9"}, "me@tpu", 1, "0.1.0")
    assert "upgrade gemma-workbench on me@tpu" in str(older) and "\n" not in str(older)
    newer = version_problem({"api_version": 2, "version": "0.3.0"}, "me@tpu", 1, "0.1.0")
    assert "upgrade gemma-workbench on this machine" in str(newer)
    assert version_problem({"api_version": 1}, "me@tpu", 1, "0.1.0") is None


# --------------------------------------------------------------------------- real sshd


@pytest.fixture(scope="module")
def laptop(tmp_path_factory) -> Path:
    """The local GEMMA_WORKBENCH_HOME of the client side (its control dir is in there)."""
    return tmp_path_factory.mktemp("laptop")


@pytest.fixture(scope="module")
def server(sshd_server: Sshd, laptop: Path):
    yield sshd_server
    env = sshd_server.client_env(laptop)
    subprocess.run([*GW, "--remote", sshd_server.host, "engine", "stop", "--force"], env=env,
                   capture_output=True, timeout=120)
    pid_file = sshd_server.remote_wb_home / "run" / "engine.pid"
    if pid_file.exists():  # a stop that did not get through: never leave an engine behind
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    for ctl in (laptop / "run" / "remote").glob("*/ctl"):
        subprocess.run(["ssh", "-F", str(sshd_server.ssh_config), "-o", f"ControlPath={ctl}",
                        "-O", "exit", sshd_server.host], capture_output=True, timeout=30)


def gw(server: Sshd, laptop: Path, *argv: str, timeout: float = 300, **env: str):
    return subprocess.run([*GW, *argv], env=server.client_env(laptop, **env), cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def control_dir(laptop: Path, host: str) -> Path:
    """The laptop's control dir of ``host`` (the one whose link.json names it)."""
    (found,) = [d for d in (laptop / "run" / "remote").iterdir()
                if (d / "link.json").exists()
                and json.loads((d / "link.json").read_text())["host"] == host]
    return found


def master_pid(server: Sshd, laptop: Path) -> int:
    ctl = control_dir(laptop, server.host) / "ctl"
    r = subprocess.run(["ssh", "-F", str(server.ssh_config), "-o", f"ControlPath={ctl}",
                        "-O", "check", server.host], capture_output=True, text=True, timeout=30)
    return int(re.search(r"pid=(\d+)", r.stderr).group(1))


def test_proxyjump_from_the_users_ssh_config_is_honoured(server, laptop):
    r = gw(server, laptop, "--remote", "wb-jump", "runs", "--json")  # through a jump host
    assert r.returncode == 0, r.stderr
    assert isinstance(json.loads(r.stdout), list)
    jump = f"-W [127.0.0.1]:{server.port} wb-remote"
    assert any(jump in line for line in _command_lines())  # ssh's own jump, under our master
    assert stat.S_IMODE(control_dir(laptop, "wb-jump").stat().st_mode) == 0o700


def test_a_missing_remote_command_is_one_line_saying_what_to_install(server, laptop):
    for argv in (["runs"], ["doctor"]):  # through the engine, and run over there
        r = gw(server, laptop, "--remote", server.host, *argv,
               GEMMA_WORKBENCH_REMOTE_COMMAND="/nonexistent/bin/gemma-workbench")
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stderr
        assert "not installed on wb-remote" in lines[0] and "--remote-command" in lines[0]


def test_an_engine_of_another_api_version_is_refused_in_one_line(server, laptop, tmp_path):
    old = tmp_path / "old-gemma-workbench"  # what an old install answers to `engine start --json`
    old.write_text('#!/bin/sh\necho \'{"version": "0.0.1", "api_version": 0, '
                   '"listen": {"socket": "/nonexistent/engine.sock"}}\'\n')
    old.chmod(0o755)
    r = gw(server, laptop, "runs", "--remote", server.host, "--remote-command", str(old))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "API v0" in lines[0] and "upgrade gemma-workbench on wb-remote" in lines[0]


def _dataset(path: Path) -> Path:
    """Sums, each answered in a sentence: every batch of 4 rows of 64 tokens then has at most 16
    loss positions a row (``train.loss.loss_slots``), as the demo data's batches of the engine
    tests have, so the run compiles one train step and one eval step (bare answers, one digit
    or two, made batches of 8 and of 16: two train steps)."""
    rows = [{"prompt": f"What is {a} plus {b}?", "response": f"It is {a + b}."}
            for a in range(12) for b in range(12)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _config(path: Path, steps: int) -> Path:
    """The shapes and schedule of the engine tests' demo runs (``demo_run_config``): the remote
    engine finds that train step in the session's compile cache instead of compiling it."""
    path.write_text(f"""[data]
max_length = 64
[lora]
rank = 4
[mesh]
devices = 1
[train]
steps = {steps}
batch_size = 4
log_every = 1
checkpoint_every = {steps}
eval_every = 1000
eval_batches = 1
eval_exact_match = 0
warmup_steps = 2
schedule = "constant"
""")
    return path


def _command_lines() -> list[str]:
    """Every process's full command line (``ps`` cuts them)."""
    lines = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return lines


def _token_files(root: Path, token: str) -> list[Path]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            try:
                if token.encode() in p.read_bytes():
                    hits.append(p)
            except OSError:
                pass
    return hits


def _private(p: Path) -> bool:
    """Nobody but the owner can read ``p``: the file and every folder up to the root dir."""
    return stat.S_IMODE(p.stat().st_mode) & 0o077 == 0


@pytest.mark.slow  # ~1 min: the one end-to-end check of the whole ssh path (a real run)
def test_remote_flow_detach_attach_cut_reconnect_compare(server, laptop, tmp_path, monkeypatch):
    host, steps = server.host, 40
    t0 = time.monotonic()
    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        phases[name] = round(time.monotonic() - t0 - sum(phases.values()), 1)

    r = gw(server, laptop, "--remote", host, "engine", "start", "--json")
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout)
    assert status["listen"]["socket"] == str(server.remote_wb_home / "run" / "engine.sock")

    data = _dataset(tmp_path / "sums.jsonl")
    r = gw(server, laptop, "train", str(_config(tmp_path / "run.toml", steps)), "--detach",
           "--remote", host, "--upload", str(data))
    assert r.returncode == 0, r.stderr
    run_id = r.stdout.strip().splitlines()[-1]
    phase("engine start, upload, detach")
    run_dir = server.remote_wb_home / "data" / "runs" / run_id
    uploaded = server.remote_wb_home / "data" / "uploads"
    (copy,) = uploaded.glob("sums-*.jsonl")
    assert copy.read_bytes() == data.read_bytes()
    assert f'path = "{copy}"' in (run_dir / "config.toml").read_text()

    # a remote config's paths are the engine machine's: a relative one is refused there
    rel = _config(tmp_path / "relative.toml", 2)
    rel.write_text(rel.read_text().replace("[data]\n", '[data]\npath = "sums.jsonl"\n'))
    r = gw(server, laptop, "train", str(rel), "--detach", "--remote", host)
    assert r.returncode == 2 and "relative path" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr

    # runs attach --remote, and the client API (what the TUI uses), both follow the run
    attach = subprocess.Popen([*GW, "--remote", host, "runs", "attach", run_id],
                              env=server.client_env(laptop), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(laptop))  # share the laptop's ssh master
    spec = RemoteSpec(host=host, command=remote_command(), ssh=("ssh", "-F", str(server.ssh_config)))
    client = remote.connect(spec, interactive=False)
    assert client.where == host
    events, api_steps = [], []
    client.on_link(events.append)

    def follow():
        for item in client.stream_run(run_id):
            if item.type == "metrics":
                api_steps.append(item.data["step"])

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    lines: list[str] = []
    while not any(ln.startswith("step ") for ln in lines):
        line = attach.stdout.readline()
        assert line, f"attach ended early: {attach.stderr.read()}"
        lines.append(line.rstrip("\n"))
    state_at_cut = json.loads((run_dir / "status.json").read_text())
    phase("run set-up to first step")
    os.kill(master_pid(server, laptop), signal.SIGKILL)  # the link drops mid-stream
    try:  # its few KB of output wait in the pipes meanwhile
        attach.wait(600)
    finally:
        if attach.poll() is None:
            attach.kill()
    # read on through the buffer readline() filled: communicate() reads the pipe itself and
    # loses the lines readline() had buffered (a step that arrived with the first one)
    out, err = attach.stdout.read(), attach.stderr.read()
    follower.join(600)
    lines += out.splitlines()
    phase("cut, reconnect, follow to the end")

    assert state_at_cut["state"] == "running" and state_at_cut["step"] < steps
    assert attach.returncode == 0, err
    assert "reconnecting" in err and "reconnected to wb-remote" in err, err
    got = [int(ln.split()[1]) for ln in lines if ln.startswith("step ")]
    assert got == list(range(1, steps + 1))  # every step once: resumed with since_step
    assert f"run {run_id} completed" in err
    assert api_steps == list(range(1, steps + 1))
    assert [e.kind for e in events][:1] == ["down"] and events[-1].kind == "up"
    client.close()

    # compare through the tunnel: both sides stream
    client = remote.connect(spec, interactive=False)
    sides = {"base": "", "tuned": ""}
    done = None
    for item in client.compare("What is 3 plus 4?", run_id, max_new_tokens=4):
        if item.type == "token":
            sides[item.data.side] += item.data.text
        elif item.type == "done":
            done = item.data
    client.close()
    assert done is not None and done.base == sides["base"] and done.tuned == sides["tuned"]
    assert sides["base"] and sides["tuned"]
    phase("compare")
    argv = ["compare", "--run", run_id, "--prompt", "What is 3 plus 4?", "--max-new-tokens", "8"]
    if hasattr(cli.build_parser().parse_args(argv), "in_process"):  # through the engine
        r = gw(server, laptop, "--remote", host, *argv)
        assert r.returncode == 0 and "base" in r.stdout and "tuned" in r.stdout, r.stderr

    # the token: in memory, and cached only in 0600 files inside 0700 folders
    token = (server.remote_wb_home / "run" / "engine.token").read_text().strip()
    assert _private(server.remote_wb_home / "run" / "engine.token")
    hits = _token_files(laptop, token) + _token_files(tmp_path, token)
    for hit in hits:
        assert _private(hit), f"{hit} holds the token and others can read it"
        assert all(_private(d) for d in hit.parents if laptop in (d, *d.parents) and d != laptop)
    assert hits and {h.name for h in hits} == {"link.json"}
    assert not any(token in line for line in _command_lines())  # never on a command line
    print(f"remote flow: {time.monotonic() - t0:.1f} s {phases}", file=sys.stderr)
