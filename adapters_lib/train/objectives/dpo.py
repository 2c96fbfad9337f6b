"""Direct preference optimisation (DPO) on LoRA adapters, the base as its own reference.

A batch holds ``train.batch_size`` preference pairs: ``chosen_<key>`` and ``rejected_<key>``
for each of SFT's row keys (``tokens``, ``targets``, ``loss_mask``, ``positions``,
``segment_ids``), each ``[pairs, L]``: row i of both is pair i (so a data-sharded or
micro-batched step keeps a pair together). The loss mask covers the answer tokens only
(the answer and its end-of-turn marker; the prompt is context). The data pipeline makes
them (``data.preference``) from ``prompt``/``chosen``/``rejected`` records or chat lists.

For pair i with answer log-probs ``πc, πr`` under the trained params and ``ρc, ρr`` under
the reference (the same base params with the adapters off — no second copy of the weights;
or another run's adapters, ``train.reference = "run:ID[@STEP]"``, which the trained adapters
then start from: DPO after an SFT run), the margin is
``δ = β·((πc − ρc) − (πr − ρr))`` and the loss
``−(1 − ε)·log σ(δ) − ε·log σ(−δ)`` (``β = train.beta``, ``ε = train.label_smoothing``):
``gm.losses.DpoLoss``'s, tested equal on the same log-probs. With ``train.sft_weight = w > 0``
(default 1) the loss adds ``w·(−πc / |c|)``, the chosen answer's cross-entropy per token
(LLaMA-Factory's ``pref_ftx``, TRL's ``rpo_alpha``, RPO): it keeps raising the chosen answer
and its end-of-turn marker after the margin saturates. Plain DPO (w = 0) saturates the margin
by pushing a long rejected answer down a little on each of its many tokens: on the real 270M
the reward accuracy reached 1.0 within 5 steps while the marker after a short chosen answer
stayed at log-prob −11 and no answer ended its turn (docs/dpo.md). With
``train.length_norm`` the margin compares per-token means (``π/|answer|``) instead of sums.

Metrics (means over the batch's pairs): ``reward_margin`` (δ), ``reward_accuracy`` (δ > 0),
``chosen_logp``/``rejected_logp`` (πc, πr: summed over the answer tokens), and
``chosen_reward``/``rejected_reward`` (β·(π − ρ), per token with ``length_norm``). Pairs with no answer tokens (the padding
of a short last batch) weigh 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters_lib.train.objectives import Forward
from adapters_lib.train.objectives.sft import BATCH_KEYS as ROW_KEYS

BATCH_KEYS = tuple(f"{side}_{k}" for side in ("chosen", "rejected") for k in ROW_KEYS)
METRICS = ("reward_margin", "reward_accuracy", "chosen_logp", "rejected_logp",
           "chosen_reward", "rejected_reward")


def dpo_loss(policy_chosen: Any, policy_rejected: Any, ref_chosen: Any, ref_rejected: Any, *,
             beta: float, label_smoothing: float = 0.0) -> tuple[Any, Any]:
    """(per-pair loss, margin δ) from summed answer log-probs (see the module)."""
    import jax

    delta = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))
    loss = -(jax.nn.log_sigmoid(delta) * (1.0 - label_smoothing)
             + jax.nn.log_sigmoid(-delta) * label_smoothing)
    return loss, delta


def rows(batch: Mapping[str, Any], side: str) -> dict[str, Any]:
    """One side's rows (``chosen`` / ``rejected``) under SFT's key names."""
    return {k: batch[f"{side}_{k}"] for k in ROW_KEYS}


class DPO:
    name = "dpo"
    batch_keys = BATCH_KEYS
    data = "pairs"
    metrics = METRICS
    needs_reference = True

    def __init__(self, beta: float = 0.1, label_smoothing: float = 0.0, sft_weight: float = 1.0,
                 length_norm: bool = False):
        self.beta = float(beta)
        self.label_smoothing = float(label_smoothing)
        self.sft_weight = float(sft_weight)
        self.length_norm = bool(length_norm)

    def loss(self, forward: Forward, batch: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        import jax.numpy as jnp

        # pair i's chosen and rejected rows side by side ([P, 2, L] → [2P, L]): one forward,
        # and the reshape keeps each pair on the device that holds its rows
        both = {k: jnp.stack([batch[f"chosen_{k}"], batch[f"rejected_{k}"]], axis=1).reshape(
            -1, batch[f"chosen_{k}"].shape[-1]) for k in ROW_KEYS}
        policy = -forward.policy(both, per_row=True).reshape(-1, 2)
        reference = -forward.reference(both).reshape(-1, 2)
        pc, pr, rc, rr = policy[:, 0], policy[:, 1], reference[:, 0], reference[:, 1]
        nc, nr = (jnp.maximum(jnp.sum(batch[f"{s}_loss_mask"], axis=-1), 1) for s in ("chosen", "rejected"))
        # the log-probs the margin compares: sums, or per-token means (``length_norm``)
        sc, sr, qc, qr = (pc / nc, pr / nr, rc / nc, rr / nr) if self.length_norm else (pc, pr, rc, rr)
        loss, delta = dpo_loss(sc, sr, qc, qr, beta=self.beta, label_smoothing=self.label_smoothing)
        if self.sft_weight:
            loss = loss + self.sft_weight * (-pc / nc)
        w = self._valid(batch)
        metrics = {"reward_margin": delta, "reward_accuracy": (delta > 0).astype(jnp.float32),
                   "chosen_logp": pc, "rejected_logp": pr,
                   "chosen_reward": self.beta * (sc - qc), "rejected_reward": self.beta * (sr - qr)}
        return jnp.sum(loss * w), {k: jnp.sum(v * w) for k, v in metrics.items()}

    def weight(self, batch: Mapping[str, Any]) -> Any:
        import jax.numpy as jnp

        return jnp.sum(self._valid(batch))

    @staticmethod
    def _valid(batch: Mapping[str, Any]) -> Any:
        import jax.numpy as jnp

        has = (jnp.sum(batch["chosen_loss_mask"], axis=-1) > 0) & (jnp.sum(batch["rejected_loss_mask"], axis=-1) > 0)
        return has.astype(jnp.float32)


def make(spec: Any = None) -> DPO:
    if spec is None:
        return DPO()
    return DPO(beta=spec.beta, label_smoothing=spec.label_smoothing,
               sft_weight=getattr(spec, "sft_weight", 1.0), length_norm=getattr(spec, "length_norm", False))


def load_reference_adapters(cfg: Any, reference: str, like: Any) -> Any:
    """The adapters of ``reference`` ("run:ID[@STEP]": that run's checkpoint, its latest when
    no step is given), shaped like ``like`` (this run's adapters); a run that is not there,
    has no such checkpoint or adapts other layers is one ``WorkbenchError``."""
    import jax

    from adapters_lib.config.checks import REFERENCE
    from adapters_lib.errors import WorkbenchError
    from adapters_lib.runs import find_run
    from adapters_lib.runs.checkpoints import latest_complete
    from adapters_lib.runs.registry import runs_root
    from adapters_lib.train.checkpoints import restore_params

    m = REFERENCE.match(reference)
    if m is None:
        raise WorkbenchError(f"train.reference is {reference!r}", where="[train] reference",
                             hint='use "base" or "run:ID[@STEP]"')
    run_id, step = m.group(1), m.group(2)
    try:
        run = find_run(run_id, runs_root(cfg.run.dir) if cfg.run.dir else None)
    except WorkbenchError as e:
        raise WorkbenchError(f"reference run {run_id!r}: {e.message}", where="[train] reference",
                             hint="name a run listed by `gemma-workbench runs`") from None
    at = int(step) if step is not None else latest_complete(run.checkpoints_dir)
    if at is None or not (run.checkpoints_dir / str(at)).is_dir():
        raise WorkbenchError(f"reference run {run_id!r} has no checkpoint"
                             + (f" {at}" if at is not None else ""), where="[train] reference",
                             hint="name a step it saved, or leave @STEP out (its latest)")
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), like)
    try:
        return restore_params(run.checkpoints_dir, at, abstract)
    except (ValueError, KeyError, TypeError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:160]
        raise WorkbenchError(f"reference run {run_id!r}'s adapters do not fit this run's ({first})",
                             where="[train] reference",
                             hint="use a run of the same model, lora.targets and lora.rank") from None
