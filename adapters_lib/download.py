"""Download weights: Kaggle model handles through kagglehub, ``hf:org/name`` through huggingface_hub.

``download(handle)`` returns the local folder. Before any library call it checks that the
host answers (a socket connect with a short timeout, through ``HTTPS_PROXY`` if set), so a
machine without network fails in a few seconds with one line, instead of a long retry loop.
Offline, a handle already in the local cache is returned from there. Progress bars are the
libraries' own (tqdm on stderr).

Handles:
- ``google/gemma-3/flax/gemma3-1b-it`` or ``.../gemma3-1b-it/2`` (Kaggle: owner/model/framework/variation[/version]);
  gated models need ``KAGGLE_USERNAME``/``KAGGLE_KEY`` (or ~/.kaggle/kaggle.json) and the licence
  accepted on kaggle.com.
- ``hf:google/gemma-3-1b-it`` or ``hf:google/gemma-3-1b-it@<revision>``; gated repos need ``HF_TOKEN``.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from adapters_lib.errors import WorkbenchError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0
KAGGLE_ENDPOINT = "https://www.kaggle.com"
_KAGGLE = re.compile(r"^[\w.-]+/[\w.-]+/[\w.-]+/[\w.-]+(/\d+)?$")
_HF = re.compile(r"^hf:([\w.-]+/[\w.-]+)(@[\w./-]+)?$")


@dataclass(frozen=True)
class Handle:
    kind: str  # "kaggle" | "hf"
    name: str
    revision: str | None = None

    def __str__(self) -> str:
        if self.kind == "hf":
            return f"hf:{self.name}" + (f"@{self.revision}" if self.revision else "")
        return self.name


def parse_handle(text: str) -> Handle:
    text = text.strip()
    if m := _HF.match(text):
        return Handle("hf", m.group(1), m.group(2)[1:] if m.group(2) else None)
    if _KAGGLE.match(text):
        return Handle("kaggle", text)
    raise WorkbenchError(
        f"{text!r} is not a model handle", where="models download",
        hint="use owner/model/framework/variation[/version] (Kaggle, e.g. google/gemma-3/flax/gemma3-1b-it) "
             "or hf:org/name[@revision]",
    )


def endpoint(handle: Handle) -> str:
    if handle.kind == "hf":
        from huggingface_hub import constants

        return constants.ENDPOINT
    return os.environ.get("KAGGLE_API_ENDPOINT", KAGGLE_ENDPOINT)


def check_reachable(url: str, timeout: float = CONNECT_TIMEOUT_S) -> str | None:
    """None if ``url``'s host answers within ``timeout`` (a TCP connect and, without a proxy, a
    verified TLS handshake: some networks accept every connect and answer with their own
    certificate); else the cause in a few words. It runs in a thread so DNS cannot hang it."""
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    target = urlparse(proxy if proxy else url)
    host, port = target.hostname or "", target.port or (443 if target.scheme == "https" else 80)
    via = f" (via proxy {host}:{port})" if proxy else ""
    result: list[str | None] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout) as sock:
                if not proxy and port == 443:
                    sock.settimeout(timeout)
                    with ssl.create_default_context().wrap_socket(sock, server_hostname=host):
                        pass
                result.append(None)
        except ssl.SSLError as e:
            result.append(f"TLS with {host}:{port} failed ({e.reason or e})")
        except socket.gaierror as e:
            result.append(f"cannot resolve {host}{via}: {e.strerror or e}")
        except TimeoutError:
            result.append(f"no answer from {host}:{port}{via} within {timeout:g} s")
        except OSError as e:
            result.append(f"cannot connect to {host}:{port}{via}: {e.strerror or e}")

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(timeout + 0.5)
    return result[0] if result else f"no answer from {host}:{port}{via} within {timeout:g} s"


def cached_path(handle: Handle) -> Path | None:
    """The local copy of ``handle`` if a complete one is cached, else None (no network)."""
    if handle.kind == "hf":
        from huggingface_hub import snapshot_download

        try:
            return Path(snapshot_download(handle.name, revision=handle.revision, local_files_only=True))
        except Exception:  # noqa: BLE001 - any miss means "not cached"
            return None
    from adapters_lib.doctor import kagglehub_cache_dir

    parts = handle.name.split("/")
    base = kagglehub_cache_dir() / "models" / "/".join(parts[:4])
    versions = [parts[4]] if len(parts) == 5 else sorted(
        (p.name for p in base.glob("*") if p.name.isdigit()), key=int, reverse=True)
    for v in versions:
        folder = base / v
        if folder.is_dir() and any(folder.iterdir()):
            return folder
    return None


def download(text: str, *, timeout: float = CONNECT_TIMEOUT_S) -> Path:
    """Download (or find in the cache) the weights named by ``text``; return the local folder."""
    handle = parse_handle(text)
    url = endpoint(handle)
    t0 = time.monotonic()
    cause = check_reachable(url, timeout)
    if cause:
        cached = cached_path(handle)
        if cached:
            log.info("offline (%s); using the cached copy of %s", cause, handle)
            return cached
        raise WorkbenchError(
            f"cannot download {handle}: no network ({cause}, {time.monotonic() - t0:.1f} s)",
            where="models download",
            hint="run it on a machine with network access, or copy the weights here and add their folder",
        )
    return _download_hf(handle) if handle.kind == "hf" else _download_kaggle(handle)


def _download_kaggle(handle: Handle) -> Path:
    import kagglehub
    from kagglehub import exceptions as kx

    try:
        return Path(kagglehub.model_download(handle.name))
    except (kx.UnauthenticatedError, kx.CredentialError) as e:
        raise WorkbenchError(
            f"Kaggle refused {handle}: not signed in ({_first_line(e)})", where="models download",
            hint="set KAGGLE_USERNAME and KAGGLE_KEY (kaggle.com → Settings → API) and accept the model licence",
        ) from None
    except kx.KaggleApiHTTPError as e:
        status = getattr(getattr(e, "response", None), "status_code", None)
        hint = ("accept the model licence on its kaggle.com page with the account of KAGGLE_USERNAME"
                if status in (401, 403) else
                "check the handle on kaggle.com (owner/model/framework/variation[/version])")
        raise WorkbenchError(f"Kaggle refused {handle}: {_first_line(e)}", where="models download",
                             hint=hint) from None
    except kx.NotFoundError as e:
        raise WorkbenchError(f"{handle} not found on Kaggle ({_first_line(e)})", where="models download",
                             hint="check the handle on kaggle.com (owner/model/framework/variation[/version])") from None


def _download_hf(handle: Handle) -> Path:
    from huggingface_hub import errors, snapshot_download

    try:
        return Path(snapshot_download(handle.name, revision=handle.revision))
    except errors.GatedRepoError:
        raise WorkbenchError(f"{handle} is gated", where="models download",
                             hint="accept its licence on huggingface.co and set HF_TOKEN (or `hf auth login`)") from None
    except errors.RepositoryNotFoundError:
        raise WorkbenchError(f"{handle} not found on Hugging Face (or private)", where="models download",
                             hint="check the name; private repos need HF_TOKEN") from None
    except errors.RevisionNotFoundError:
        raise WorkbenchError(f"revision {handle.revision!r} not found for hf:{handle.name}",
                             where="models download", hint="use a branch, tag or commit of the repo") from None
    except errors.OfflineModeIsEnabled:
        raise WorkbenchError(f"cannot download {handle}: HF_HUB_OFFLINE is set and it is not cached",
                             where="models download", hint="unset HF_HUB_OFFLINE") from None


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
