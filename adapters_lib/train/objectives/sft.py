"""Supervised fine-tuning: the token cross-entropy on the answer tokens.

Loss = Σ CE·loss_mask / Σ loss_mask over the global batch (all micro-batches). The data
pipeline produces packed or padded prompt/answer rows (``data.pipeline``): ``tokens``,
``targets``, ``loss_mask`` (1 on answer tokens), ``positions``, ``segment_ids``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters_lib.train.objectives import Forward

BATCH_KEYS = ("tokens", "targets", "loss_mask", "positions", "segment_ids")


class SFT:
    name = "sft"
    batch_keys = BATCH_KEYS
    data = "examples"
    metrics: tuple[str, ...] = ()
    needs_reference = False

    def loss(self, forward: Forward, batch: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        return forward.policy(batch), {}

    def weight(self, batch: Mapping[str, Any]) -> Any:
        import jax.numpy as jnp

        return jnp.sum(batch["loss_mask"].astype(jnp.float32))


def make(spec: Any = None) -> SFT:
    return SFT()
