"""download: without network it ends fast with one line; offline, a cached copy is used."""

from __future__ import annotations

import time

import pytest

from adapters_lib.download import check_reachable, download, parse_handle
from adapters_lib.errors import WorkbenchError


def _fails_fast(handle: str, limit_s: float = 6.0) -> str:
    t0 = time.monotonic()
    with pytest.raises(WorkbenchError) as err:
        download(handle)
    assert time.monotonic() - t0 < limit_s
    text = str(err.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("handle", ["google/gemma-3/flax/gemma3-1b-it", "hf:google/gemma-3-1b-it"])
def test_download_without_network_ends_with_one_line_in_seconds(handle, monkeypatch):
    # a proxy on a closed local port stands for "no network" on any machine
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    text = _fails_fast(handle)
    assert "no network" in text and "127.0.0.1:9" in text and handle in text


def test_download_on_this_offline_machine_fails_fast():
    if check_reachable("https://www.kaggle.com", 2.0) is None:
        pytest.skip("this machine has network access")
    assert "no network" in _fails_fast("google/gemma-3/flax/gemma3-1b-it")


def test_unreachable_host_gives_a_cause_within_the_limit(monkeypatch):
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    t0 = time.monotonic()
    cause = check_reachable("https://10.255.255.1", timeout=1.0)  # non-routable: never answers (or a middlebox answers with the wrong certificate)
    assert cause is not None and time.monotonic() - t0 < 2.5


def test_offline_download_returns_the_cached_kaggle_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("KAGGLEHUB_CACHE", str(tmp_path))
    for version in ("1", "3"):
        folder = tmp_path / "models" / "google" / "gemma-3" / "flax" / "tiny" / version
        folder.mkdir(parents=True)
        (folder / "tokenizer.model").write_bytes(b"x")
    assert download("google/gemma-3/flax/tiny") == tmp_path / "models/google/gemma-3/flax/tiny/3"
    assert download("google/gemma-3/flax/tiny/1") == tmp_path / "models/google/gemma-3/flax/tiny/1"


@pytest.mark.parametrize("bad", ["gemma", "google/gemma-3", "hf:gemma", "hf:a/b/c", "a/b/c/d/latest"])
def test_malformed_handles_are_named_with_the_expected_forms(bad):
    with pytest.raises(WorkbenchError, match="not a model handle.*owner/model/framework/variation"):
        parse_handle(bad)


def test_handles_parse_revision_and_version():
    assert parse_handle("hf:google/gemma-3-1b-it@main").revision == "main"
    assert parse_handle("google/gemma-3/flax/gemma3-1b-it/2").kind == "kaggle"


def test_models_download_cli_without_network_prints_one_line_and_exits_fast():
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "HTTPS_PROXY": "http://127.0.0.1:9"}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "workbench", "models", "download", "google/gemma-3/flax/gemma3-1b-it"],
                         cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    if "invalid choice: 'models'" in out.stderr:
        pytest.skip("the models command is not in this build")
    assert time.monotonic() - t0 < 20  # interpreter start + CLI import + a refused connect
    assert out.returncode == 2
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no network" in lines[0]
