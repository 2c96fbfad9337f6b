"""Configure's readiness line: the next run's programs compiled ahead while the user decides.

About a second after the last change of a valid config (and so when a model is picked), the
config goes to the engine's ``compile_ahead`` (a worker; a newer config replaces the older
one's queued compiles there). While something is queued, setting up or compiling, the jobs
are read every ``POLL_S`` (``compile_jobs``) and the line under the form says each program's
state: ready / compiling (n s) / queued. A CPU engine compiles nothing ahead: the line says
the programs compile at launch, and nothing more is sent. Handlers never wait on the engine.
"""

from __future__ import annotations

from typing import Any

from textual import work

from adapters_lib.engine import api
from workbench.messages import CompileJobsRead
from workbench.screens.base import error_text
from workbench.widgets.readiness import ProgramReadiness, readiness_text, settled

AHEAD_DEBOUNCE_S = 1.0
POLL_S = 1.0


class ConfigAheadMixin:
    """For ``ConfigureScreen``: ``ahead_changed(cfg)`` after each valid config; the rest is here."""

    ahead_jobs: api.CompileJobs | None = None
    _ahead_timer: Any = None
    _ahead_sent = ""
    _ahead_off = False
    """The engine said it compiles nothing ahead (a CPU): nothing more is sent."""

    def start_ahead(self) -> None:
        self.set_interval(POLL_S, self.poll_ahead)  # type: ignore[attr-defined]

    def ahead_changed(self, cfg: Any) -> None:
        if self._ahead_off:
            return
        if self._ahead_timer is not None:
            self._ahead_timer.stop()
        if self.ahead_jobs is None and not self._ahead_sent:  # the first: at once
            self.send_ahead(cfg)
            return
        self._ahead_timer = self.set_timer(  # type: ignore[attr-defined]
            AHEAD_DEBOUNCE_S, lambda: self.send_ahead(cfg))

    @work(thread=True, exclusive=True, group="compile-ahead")
    def send_ahead(self, cfg: Any) -> None:
        text = cfg.to_toml()
        if text == self._ahead_sent:
            return
        self._ahead_sent = text
        try:
            reply = self.client.compile_ahead(cfg.to_dict())  # type: ignore[attr-defined]
        except Exception as err:  # noqa: BLE001 - a line under the form, not a pop-up per keystroke
            self.post_message(CompileJobsRead(None, self._unknown(err)))  # type: ignore[attr-defined]
            return
        jobs = api.CompileJobs(ahead=reply.ahead, backend=reply.backend, message=reply.message,
                               latest=reply.request)
        self.post_message(CompileJobsRead(jobs))  # type: ignore[attr-defined]

    def poll_ahead(self) -> None:
        if self.is_current and self.ahead_jobs is not None and not settled(self.ahead_jobs):  # type: ignore[attr-defined]
            self.read_ahead(self.ahead_jobs.latest.request if self.ahead_jobs.latest else 0)

    @work(thread=True, exclusive=True, group="compile-jobs")
    def read_ahead(self, request: int) -> None:
        try:
            jobs = self.client.compile_jobs(request)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - the next poll tries again; the nav strip says when it is gone
            return
        self.post_message(CompileJobsRead(jobs))  # type: ignore[attr-defined]

    def on_compile_jobs_read(self, message: CompileJobsRead) -> None:
        jobs = message.jobs
        if jobs is not None:
            known = self.ahead_jobs.latest.request if self.ahead_jobs and self.ahead_jobs.latest else 0
            if jobs.latest is not None and jobs.latest.request < known:
                return  # an answer about an older request
            self._ahead_off = not jobs.ahead and jobs.latest is None
            self.ahead_jobs = jobs
        text = readiness_text(jobs, message=message.message)
        self.query_one(ProgramReadiness).update(text)  # type: ignore[attr-defined]

    @staticmethod
    def _unknown(err: Exception) -> str:
        """An engine without the command (older) says nothing; anything else in a few words."""
        if isinstance(err, NotImplementedError) or getattr(err, "status", None) in (404, 501):
            return ""
        return f"not compiled ahead: {error_text(err)}"
