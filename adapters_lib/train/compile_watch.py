"""What a run waits for: its own steps' foreground compiles (``CompileWatch``).

A run's train or eval step that compiles its program in the foreground — or waits for one
compiling behind — is a job of the compile queue (``compile_queue``, ``where = "foreground"``).
The trainer watches those of its own programs on its own thread and

- writes each as a ``compile`` run event (``program``: "train step"/"eval step", ``state``:
  compiling, then ready or failed, ``seconds``): the Train screen says "compiling the train
  step (n s)" instead of a speed;
- hands the seconds to the step they belong to (``take``): its metrics record carries
  ``compile_s``, and the step-time figures leave it out.
"""

from __future__ import annotations

import threading
from typing import Any


class CompileWatch:
    def __init__(self, session: Any, steps: Any):
        from adapters_lib.train import step_programs

        self.session = session
        self.names = {steps._train.what, steps._eval.what}
        self.thread = threading.get_ident()
        self.seconds = 0.0
        self._stop = step_programs.listen(self._on_job)

    def _on_job(self, job: dict[str, Any]) -> None:
        if job["where"] != "foreground" or job["what"] not in self.names or threading.get_ident() != self.thread:
            return
        seconds = round(float(job["seconds"] or 0.0), 3)
        if job["state"] != "compiling":
            self.seconds += seconds
        self.session.event("compile", program=job["what"], state=job["state"], seconds=seconds)

    def take(self) -> float:
        """Foreground compile seconds since the last ``take`` (0.0: none)."""
        seconds, self.seconds = self.seconds, 0.0
        return seconds

    def close(self) -> None:
        self._stop()
