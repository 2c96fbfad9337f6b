"""The trainer's hook interface, ``TrainHook``, in a module of its own.

Hooks (``adapters_lib.evals.hooks``) subclass it; the trainer's caller makes them and hands
them to ``run_training(hooks=)``, so the trainer never imports the evaluation area. A hook
gets the run's context (a ``train.session.RunSession``; typed ``Any`` here, since the
session module builds on this one) in ``on_start`` and returns metric
fields (a dict, or None) from ``on_start`` and ``on_eval``: the trainer puts them into its
records; a hook does not change the trainer's result.
"""

from __future__ import annotations

from typing import Any, ClassVar


class TrainHook:
    """Per-step/per-eval/per-checkpoint behaviour added to a run; every method is optional."""

    name: ClassVar[str] = ""

    def on_setup(self, session: Any) -> None:
        """The route is set up (the model on the devices, its own compiles queued), before the
        first step's program compiles: a hook may queue compiles of its own behind."""

    def on_start(self, session: Any, step: int) -> dict[str, Any] | None:
        """Before the first step (``step`` > 0 on a resume); the run's start fields."""

    def on_step(self, step: int, metrics: dict[str, Any]) -> None:
        """A metrics record was written (every ``log_every`` steps, eval steps, the last)."""

    def on_eval(self, step: int, results: dict[str, Any]) -> dict[str, Any] | None:
        """The route's eval results at ``step`` (``{"eval_loss": x, …}``); fields for the
        step's metrics record."""

    def on_checkpoint(self, step: int) -> None:
        """A checkpoint of ``step`` was handed to the writer."""

    def should_stop(self) -> bool:
        """True ends the run early (checkpointed, ``completed``)."""
        return False

    def on_end(self, result: Any) -> None:
        """The run ended (completed, stopped); not called when it failed."""
