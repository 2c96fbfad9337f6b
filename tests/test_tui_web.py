"""``gemma-workbench web`` in a real browser: headless Chromium opens the served TUI, the
Models screen is screenshotted and its text read back from the browser's terminal.

Chromium is the Debian package (installed here with apt-get when missing and possible);
the test is skipped, saying why, only when it cannot be installed. The page's terminal
draws on a canvas, so the text is read from the xterm.js buffer through the DevTools
protocol: a script added before the page loads keeps a handle on the terminal object.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

EXE = Path(sys.executable).parent / "gemma-workbench"

pytestmark = pytest.mark.slow  # ~30–60 s: a browser, a served TUI and its engine start

KEEP_TERMINAL = """
(() => {
  const seen = [];
  Object.defineProperty(Object.prototype, '_core', {
    configurable: true,
    get() { return undefined; },
    set(v) {
      Object.defineProperty(this, '_core', {value: v, writable: true, configurable: true});
      seen.push(this);
    },
  });
  window.__screenText = () => {
    for (const t of seen) {
      const b = t.buffer && t.buffer.active;
      if (b && typeof b.getLine === 'function') {
        const out = [];
        for (let i = 0; i < t.rows; i++) {
          const line = b.getLine(b.viewportY + i);
          out.push(line ? line.translateToString(true) : '');
        }
        return out.join('\\n');
      }
    }
    return '';
  };
})();
"""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("chromium is not installed and apt-get cannot install it here "
                    "(needs root and apt-get): apt-get install -y chromium")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "install", "-y", "-q", "chromium"],
                ["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if done.returncode == 0 and cmd[1] == "install":
            break
    found = shutil.which("chromium")
    if not found:
        pytest.skip(f"apt-get could not install chromium: {done.stderr.strip()[-300:]}")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DevTools:
    """The few DevTools-protocol calls the test needs, over the page's websocket."""

    def __init__(self, ws_url: str):
        from websockets.sync.client import connect

        self.ws = connect(ws_url, max_size=64 << 20, open_timeout=30).__enter__()
        self.n = 0

    def call(self, method: str, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def text(self) -> str:
        r = self.call("Runtime.evaluate", expression="window.__screenText ? __screenText() : ''",
                      returnByValue=True)
        return r.get("result", {}).get("value") or ""

    def close(self) -> None:
        self.ws.close()


@pytest.fixture
def served(tmp_path):
    """``gemma-workbench web`` on a free port (its TUI starts its own engine)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(GEMMA_WORKBENCH_HOME=str(tmp_path / "home"), JAX_PLATFORMS="cpu")
    proc = subprocess.Popen([str(EXE), "web", "--port", str(port)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = None
    t0 = time.monotonic()
    while url is None and time.monotonic() - t0 < 60:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        m = re.search(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", line)
        url = m.group(1) if m else None
    assert url, "gemma-workbench web printed no address"
    yield url, env
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
    subprocess.run([str(EXE), "engine", "stop", "--force"], env=env, capture_output=True,
                   timeout=120)


def test_the_web_view_serves_the_tui_and_refuses_a_request_without_the_token(served, tmp_path):
    url, _ = served
    bare = url.split("?")[0]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(bare, timeout=10)
    assert refused.value.code == 403
    browser = chromium()
    profile = tmp_path / "chromium"
    chrome = subprocess.Popen([browser, "--headless=new", "--no-sandbox", "--disable-gpu",
                               f"--user-data-dir={profile}", "--remote-debugging-port=0",
                               "--window-size=1200,800", "about:blank"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        port_file = profile / "DevToolsActivePort"
        t0 = time.monotonic()
        while not port_file.exists() and time.monotonic() - t0 < 60:
            time.sleep(0.2)
        devtools_port = int(port_file.read_text().split()[0])
        pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{devtools_port}/json/list",
                                                 timeout=10))
        page = DevTools(next(p for p in pages if p["type"] == "page")["webSocketDebuggerUrl"])
        page.call("Page.enable")
        page.call("Page.addScriptToEvaluateOnNewDocument", source=KEEP_TERMINAL)
        page.call("Page.navigate", url=url)
        text, t0 = "", time.monotonic()
        while time.monotonic() - t0 < 120:
            text = page.text()
            if "1 Models" in text and "demo" in text and "builtin" in text:
                break
            time.sleep(0.5)
        shot = base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"])
        (tmp_path / "models.png").write_bytes(shot)
        page.close()
    finally:
        os.killpg(chrome.pid, signal.SIGTERM)
        chrome.wait(timeout=30)
    assert "1 Models" in text and "2 Configure" in text, text
    assert "demo" in text and "builtin" in text, text  # the catalog is listed
    from PIL import Image

    image = Image.open(io.BytesIO(shot)).convert("RGB")
    assert image.size[0] >= 800
    colours = image.getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 8  # a drawn screen, not a blank page
