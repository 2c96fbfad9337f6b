"""Commands that run on the remote machine itself, and the dataset upload.

``relay(spec, words)``: ``gemma-workbench WORDS`` there, through the ssh master, with this
terminal's stdin/stdout/stderr (a tty when this is one) and its exit status — for the
commands about that machine's own files and processes (``engine``, ``doctor``, ``data``,
``models``), so their paths are the engine machine's and their output is what they print
there.

``upload(spec, path)``: copy a local dataset into ``<engine data dir>/uploads/`` through the
same connection (``cat`` into a temporary name, size checked, renamed: a cut copy never
looks complete); the name carries the content's hash, so the same file is sent once.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

from adapters_lib.errors import WorkbenchError
from workbench.remote.link import INSTALL_HINT, THERE
from workbench.remote.spec import RemoteSpec

UPLOAD_SCRIPT = r'''set -e
d=$1; f=$2; size=$3; mode=$4
if [ "$mode" = check ]; then
  if [ -f "$d/$f" ] && [ "$(wc -c < "$d/$f" | tr -d ' ')" = "$size" ]; then echo present; fi
  exit 0
fi
mkdir -p "$d"; chmod 700 "$d"
part="$d/.$f.part.$$"
trap 'rm -f "$part"' EXIT
cat > "$part"
got=$(wc -c < "$part" | tr -d ' ')
[ "$got" = "$size" ] || { echo "received $got of $size bytes" >&2; exit 3; }
chmod 600 "$part"; mv -f "$part" "$d/$f"; trap - EXIT; echo copied
'''


def relay(spec: RemoteSpec, words: list[str]) -> int:
    """Run ``gemma-workbench WORDS`` on ``spec.host``; return its exit status."""
    from workbench.remote import link_for

    link = link_for(spec)
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    link.ssh.ensure_master(interactive=sys.stdin.isatty())
    command = link.remote_command()
    line = f"{THERE} {command} {' '.join(shlex.quote(w) for w in words)}"
    argv = [*link.ssh.argv("-t" if tty else "-T"), "--", line]
    sys.stdout.flush()
    rc = subprocess.call(argv)
    if rc in (126, 127):
        print(f"error: {spec.origin}: cannot run gemma-workbench on {spec.host} ({command}); "
              f"{INSTALL_HINT}", file=sys.stderr)
        return 2
    return rc


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def upload(spec: RemoteSpec, local: str) -> str:
    """Copy ``local`` into the remote engine's data dir; return its path there."""
    from workbench.remote import link_for

    path = Path(local).expanduser()
    if not path.is_file():
        raise WorkbenchError(f"{local!r} is not a file here", where="--upload",
                             hint="give the local dataset file to copy (.jsonl, .txt, …)")
    link = link_for(spec)
    link.open(interactive=sys.stdin.isatty())
    data_dir = (link.status.data_dir if link.status is not None else "") or link.info.get("data_dir")
    if not data_dir:
        raise WorkbenchError(f"the engine on {spec.host} does not say where its data dir is",
                             where="--upload", hint=f"upgrade gemma-workbench on {spec.host}")
    size = path.stat().st_size
    stem, suffix = path.name.split(".", 1) if "." in path.name else (path.name, "")
    name = f"{stem}-{_digest(path)[:12]}" + (f".{suffix}" if suffix else "")
    folder = f"{data_dir.rstrip('/')}/uploads"
    target = f"{folder}/{name}"
    check = link.ssh.run_sh(UPLOAD_SCRIPT, folder, name, str(size), "check", timeout=60)
    if check.returncode == 0 and b"present" in check.stdout:
        print(f"upload: {spec.host}:{target} is already there", file=sys.stderr)
        return target
    t0 = time.monotonic()
    print(f"upload: {path} ({size / 2**20:.1f} MiB) → {spec.host}:{target}", file=sys.stderr,
          flush=True)
    r = link.ssh.run_sh(UPLOAD_SCRIPT, folder, name, str(size), "copy", stdin_path=path,
                        timeout=max(600, size / 100_000))
    if r.returncode != 0 or b"copied" not in r.stdout:
        why = r.stderr.decode(errors="replace").strip().splitlines()
        raise WorkbenchError(f"copying {path} to {spec.host} failed: "
                             f"{why[-1] if why else f'exit status {r.returncode}'}",
                             where="--upload", hint="check the space and permissions there")
    print(f"upload: done in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return target


def data_path_override(remote_path: str) -> str:
    """The ``--set`` that points a config at the uploaded file (a TOML string)."""
    return f"data.path={json.dumps(remote_path)}"
