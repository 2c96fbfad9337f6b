"""GSM8K chat on the real Gemma 3 270M: useful tokens/s against ref-gemma (padding to the
longest), and logits only where the loss is against every position (ours both sides).

Measures ``real_270m_gsm8k`` (f32) and ``real_270m_gsm8k_bf16`` (registered in ``bench.real_270m``,
which loads the model once per process).
"""

from __future__ import annotations

from bench.measures import SHARED_DATA, _gsm8k_examples, _row
from bench.real_270m_steps import _ref_runner, _runner, _steps, _train_cfg
from bench.report import Row, median_alternating


def gsm8k_rows(loaded, quick: bool, dtype: str) -> list[Row]:
    """GSM8K useful tokens/s vs ref-gemma in ``dtype`` (weights and compute; the reference's LoRA
    weights too, as in the train rows), and (f32, not ``--quick``: one more 270M program to
    compile) logits only where the loss is vs every position."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.data import build_pipeline
    from bench.refs import RefGemmaTrainer, ref_chat_batches

    bf16 = dtype == "bfloat16"
    label = " (GSM8K chat, real 270M" + (", bf16)" if bf16 else ")")
    if not (SHARED_DATA / "gsm8k" / "train.jsonl").is_file():
        return [Row(measure="useful tokens/s" + label, note="skipped: ../shared/data/gsm8k missing")]
    b, seq, n_steps, reps = 2, 512, 1, (2 if quick else 5)
    params = jax.tree.map(lambda x: x.astype(jnp.bfloat16), loaded.params) if bf16 else loaded.params
    cfg = _train_cfg(b, seq, dtype, path=str(SHARED_DATA / "gsm8k" / "train.jsonl"), format="qa",
                     packing=True, eval_fraction=0.0)
    pipe = build_pipeline(cfg.data, loaded.tokenizer, batch_size=b, seed=0)
    batches = [pipe.train_batch(i) for i in range(n_steps)]
    useful = sum(float(x["loss_mask"].sum()) for x in batches)
    gathered, state = _steps(cfg, loaded, params, seq)
    slots = gathered.slots_for(batches[0])
    sides = {"ours": _runner(gathered, state, batches)}
    twin = not bf16 and not quick  # the full-logits twin: python -m bench (not --quick)
    if twin:
        full, full_state = _steps(cfg, loaded, params, seq, gather_loss=False)
        sides["full"] = _runner(full, full_state, batches)

    # the reference: same data, template and loss; padded; ~ as many examples as ours packs
    # (≈ 3 per 512-token row)
    ref_batches, ref_useful = ref_chat_batches(loaded.tokenizer, _gsm8k_examples(b * n_steps * 3), b,
                                               n_steps * 3, seq)
    ref = RefGemmaTrainer(model=loaded.model.clone(dtype=jnp.bfloat16) if bf16 else loaded.model,
                          base_params=params, rank=8, dtype=jnp.dtype(dtype))
    sides["ref"] = _ref_runner(ref, ref_batches)
    for run in sides.values():  # compile (the reference once per padded width)
        run()
    med = median_alternating(sides, reps)
    widths = sorted({x[0].shape[1] for x in ref_batches})
    rows = [
        _row("useful tokens/s" + label, useful / med["ours"], ref_useful / med["ref"],
             unit="tok/s", target="≥ 3×", ref_name="ref-gemma",
             note=f"real weights, LoRA r8, {dtype} weights+compute; ours: {n_steps} step × batch {b}, packed "
                  f"to {seq} (useful {useful:.0f} tok), logits at {slots} gathered slots/row; ref: {len(ref_batches)} steps × "
                  f"batch {b} padded to the longest (widths {widths}, useful {ref_useful:.0f} tok); {reps} reps"),
    ]
    if not twin:
        return rows
    return rows + [
        _row("logits only where the loss is vs every position (GSM8K, real 270M)", useful / med["ours"],
             useful / med["full"], unit="tok/s", target="", ref_name="ours, full logits",
             note=f"the same packed batch {b}×{seq}, ours both sides: {slots} loss slots/row gathered before "
                  f"the 262,144×640 projection vs all {seq} (useful tokens/s both sides); {reps} reps"),
    ]
