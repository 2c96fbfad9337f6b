"""Every checkpoint of a run scored on one data set: ``eval --run R --all-checkpoints``.

``score_checkpoints(run, data="", metrics=(), ...)`` loads the run's base model once, then
for the base (the model before training) and each complete checkpoint restores the trained
tree and scores:

- ``loss``/``perplexity`` over the **whole** data set (``perplexity.score_tokens``: the
  chunked cross-entropy the training uses; chat data scores the model turns only), so they
  differ from the run's ``eval_loss``, which covers its first ``train.eval_batches`` batches;
- the generated metrics over ``train.eval_examples`` examples that have an answer (evenly
  spaced over the split: ``task.spread``),
  answered greedily (``metrics.GENERATION``).

The data: ``data`` (a file or folder, read with the run's ``[data]`` rules), else the run's
own eval split (``data.eval_path``, or the ``eval_fraction`` held out by the run's seed: the
examples it never trained on). The metrics: ``metrics``, else the run's (``plan_for``).
The result names the best checkpoint by the run's selection metric (``loss`` when none).
Gemma route only (a Keras run: export it and score the export with ``eval --model``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.evals.metrics import METRICS, best_index
from adapters_lib.evals.plan import plan_for
from adapters_lib.evals.task import TaskSet, likelihood

log = logging.getLogger(__name__)


def _pipeline(cfg: Any, tokenizer: Any, data: str) -> tuple[Any, list[dict[str, Any]], str]:
    """(eval TokenizedSet, eval chat examples, what was scored) for the run or for ``data``."""
    from pathlib import Path

    from adapters_lib.data.pipeline import build_pipeline

    if data:
        from adapters_lib.dataset_refs import is_dataset_ref

        dataset = is_dataset_ref(data)
        if not dataset and not Path(data).exists():
            raise WorkbenchError(f"data file {data!r} not found", where="--data",
                                 hint="a .jsonl/.json/.csv/.parquet/.txt file or a folder of them, "
                                      "a saved dataset folder[@SPLIT], or hf:NAME / tfds:NAME")
        where = data if dataset else str(Path(data).resolve())
        spec = dataclasses.replace(cfg.data, path=where, eval_path=where, eval_fraction=0.0,
                                   streaming=False)
        what = data
    else:
        spec = cfg.data
        what = f"the run's eval split ({cfg.data.eval_path or cfg.data.path})"
    pipe = build_pipeline(spec, tokenizer, batch_size=cfg.train.batch_size, seed=cfg.train.seed)
    if len(pipe.eval) == 0:
        raise WorkbenchError("no eval data to score: the run has no eval split", where="--data",
                             hint="give a file with --data")
    return pipe.eval, list(pipe.eval_examples), what


def score_checkpoints(run: str, *, data: str = "", metrics: Sequence[str] = (),
                      batch_size: int = 4) -> dict[str, Any]:
    """The table (see the module doc): ``{"run", "data", "metrics", "metric", "best_step",
    "rows": [{"step", "phase", "<metric>": value, ..., "tokens"}, ...]}``."""
    import jax

    from adapters_lib import evaluate, runs
    from adapters_lib.evals import perplexity
    from adapters_lib.lora import targeted as lora
    from adapters_lib.lora import traced_shapes
    from adapters_lib.models.loader import load_model
    from adapters_lib.train import checkpoints

    t0 = time.perf_counter()
    for name in metrics:
        if name not in METRICS:
            from adapters_lib.config.checks import closest

            raise WorkbenchError(f"unknown metric {name!r}", where="--metrics",
                                 hint=f"{closest(name, list(METRICS))} (metrics are {', '.join(METRICS)})")
    run_dir = runs.find_run(run)
    cfg = run_dir.config()
    if cfg.model.backend == "keras":
        raise WorkbenchError("eval scores gemma-route runs; this run used the Keras route",
                             where="--run", hint=f"export it (gemma-workbench export {run_dir.run_id} "
                             "--format hf) and eval the export with --model")
    steps = run_dir.checkpoints()
    if not steps:
        raise WorkbenchError(f"run {run_dir.run_id} has no checkpoint yet", where="--run",
                             hint="wait for the first checkpoint (train.checkpoint_every)")
    plan = plan_for(cfg)
    if metrics:
        plan = dataclasses.replace(plan, metrics=tuple(dict.fromkeys(metrics)), ends_only=(),
                                   examples=plan.examples or cfg.train.eval_examples)
    loaded = load_model(cfg.model_spec(), param_dtype=cfg.train.param_dtype)
    tset, examples, what = _pipeline(cfg, loaded.tokenizer, data)
    tasks = TaskSet(loaded.tokenizer, examples, plan, max_length=cfg.data.max_length,
                    where="--metrics") if plan.generated else None
    model = lora.wrap(loaded.model, cfg.lora) if cfg.lora.enabled else loaded.model
    apply_fn = evaluate.model_apply_fn(model)
    abstract = checkpoints.abstract_trainable(loaded, cfg) if steps else None
    length = cfg.data.max_length

    def score(phase: str, step: int, trainable: Any) -> dict[str, Any]:
        if cfg.lora.enabled:
            nll, count = perplexity.score_tokens(
                loaded.model, loaded.params, tset, max_length=length, batch_size=batch_size,
                adapters=trainable, lora_spec=cfg.lora if trainable is not None else None)
            params = lora.merge_lora(loaded.params, trainable) if trainable is not None else None
        else:
            tree = trainable if trainable is not None else loaded.params
            nll, count = perplexity.score_tokens(loaded.model, tree, tset, max_length=length,
                                                 batch_size=batch_size)
            params = tree
        row: dict[str, Any] = {"step": step, "phase": phase,
                               **likelihood(nll / max(count, 1), plan.likelihood)}
        if tasks is not None:
            if params is None:  # the base of a LoRA run: its adapters are zero, so the base
                base_tree = traced_shapes.init_lora(loaded.model, cfg.lora, loaded.params, jax.random.key(0))
                params = lora.merge_lora(loaded.params, base_tree)
            row.update(tasks.score(apply_fn, params).values)
        row["tokens"] = count
        log.info("eval %s step %d: %s", phase, step,
                 " ".join(f"{k} {v:.4f}" for k, v in row.items() if k in plan.metrics))
        return row

    rows = [score("base", 0, None)]
    for step in steps:
        trainable = checkpoints.restore_params(run_dir.checkpoints_dir, step, abstract)
        rows.append(score("tuned", step, trainable))
    select = plan.select or ("loss" if "loss" in plan.metrics else plan.metrics[0])
    tuned = [r for r in rows if r["phase"] == "tuned"]
    i = best_index(select, [r.get(select) for r in tuned])
    return {"run": run_dir.run_id, "data": what, "metrics": list(plan.metrics), "metric": select,
            "best_step": tuned[i]["step"] if i is not None else None, "rows": rows,
            "examples": len(tasks) if tasks is not None else 0,
            "seconds": round(time.perf_counter() - t0, 3)}
