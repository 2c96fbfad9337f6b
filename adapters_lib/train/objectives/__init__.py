"""Training objectives: one module each (``sft.py``, ``dpo.py``), chosen by ``[train] objective``.

An objective is what the jitted step (``train.step.build_steps``) asks of the loss:

- ``name``: the ``train.objective`` value;
- ``batch_keys``: the arrays of one batch (each ``[rows, L]``) that the step places on the
  mesh and passes to ``loss``;
- ``data``: what the data pipeline must produce (``"examples"``: prompt/answer rows;
  ``"pairs"``: chosen/rejected rows, two per pair);
- ``metrics``: the names of the per-step metrics ``loss`` adds beside ``loss``;
- ``needs_reference``: whether ``loss`` calls ``forward.reference`` (a frozen model);
- ``loss(forward, batch) -> (sum, {metric: sum})``: sums over the batch's rows;
- ``weight(batch)``: what the sums are divided by (SFT: the loss tokens; DPO: the pairs),
  after all micro-batches, so a gradient-accumulated step equals the one-batch step.

``forward.policy(batch, per_row=False)`` is the cross-entropy Σ at the loss positions under
the trained params (a scalar, or one value per row), ``forward.reference(batch)`` the same per
row under the reference (no gradient). A new objective is a module here plus its name in
``NAMES``; the config, the step, the loop and the metrics take it from there (docs/architecture.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

NAMES = ("sft", "dpo")


@dataclass(frozen=True)
class Forward:
    """The model as an objective's loss sees it (made by the step inside its jitted function)."""

    policy: Callable[..., Any]
    """``policy(batch, per_row=False)``: Σ CE over the loss positions under the trained params."""
    reference: Callable[[Mapping[str, Any]], Any] | None = None
    """``reference(batch)``: per-row Σ CE under the reference model (adapters off, or another
    run's adapters), without gradient; None when the objective needs none."""


class Objective(Protocol):
    name: str
    batch_keys: tuple[str, ...]
    data: str
    metrics: tuple[str, ...]
    needs_reference: bool

    def loss(self, forward: Forward, batch: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]: ...

    def weight(self, batch: Mapping[str, Any]) -> Any: ...


def get(name: str, spec: Any = None) -> Objective:
    """The objective called ``name`` (``NAMES``), made from the ``[train]`` section ``spec``."""
    if name not in NAMES:
        raise ValueError(f"unknown objective {name!r}; one of {', '.join(NAMES)}")
    module = importlib.import_module(f"adapters_lib.train.objectives.{name}")
    return module.make(spec)


def for_config(cfg: Any) -> Objective:
    """The objective of a run config (``train.objective``, default ``sft``)."""
    return get(getattr(cfg.train, "objective", "sft"), cfg.train)
