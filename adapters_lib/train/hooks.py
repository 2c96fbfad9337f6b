"""The trainer's hook interface, ``TrainHook``, in a module of its own.

Hooks (``adapters_lib.evals.hooks``) subclass it and ``train.trainer.config_hooks`` makes
them: with the class here, neither imports the other in a circle. ``train.trainer`` keeps
``TrainHook`` importable from where it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from adapters_lib.train.trainer import RunSession, TrainResult


class TrainHook:
    """Per-step/per-eval/per-checkpoint behaviour added to a run; every method is optional."""

    name: ClassVar[str] = ""

    def on_start(self, session: RunSession, step: int) -> None:
        """Before the first step (``step`` > 0 on a resume)."""

    def on_step(self, step: int, metrics: dict[str, Any]) -> None:
        """A metrics record was written (every ``log_every`` steps, eval steps, the last)."""

    def on_eval(self, step: int, results: dict[str, Any]) -> None:
        """Eval results: ``{"eval_loss": x}``, or ``{"exact_match": s, "phase": ...}``."""

    def on_checkpoint(self, step: int) -> None:
        """A checkpoint of ``step`` was handed to the writer."""

    def should_stop(self) -> bool:
        """True ends the run early (checkpointed, ``completed``)."""
        return False

    def on_end(self, result: TrainResult) -> None:
        """The run ended (completed, stopped); not called when it failed."""
