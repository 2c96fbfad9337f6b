"""Training throughput of the Keras route on the demo model (for bench/ and the docs).

``train_tokens_per_s(cfg, steps=20, warmup=3)``: full rows of random tokens (no padding), the
run's distribution, LoRA and optimizer, timed over ``steps`` fit steps after ``warmup`` steps
(compile). Returns tokens/s (batch_size × max_length × steps / seconds).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np


def train_tokens_per_s(cfg: Any, *, steps: int = 20, warmup: int = 3) -> dict[str, float]:
    from adapters_lib.config import check_backend_options
    from adapters_lib.keras_route.backbones import model_inputs
    from adapters_lib.keras_route.layout import make_distribution, plan_for
    from adapters_lib.keras_route.model import (
        _nullcontext,
        build_model,
        import_keras,
        keras_source,
        model_dims,
    )
    from adapters_lib.keras_route.train import make_optimizer

    check_backend_options(cfg)
    t = cfg.train
    source = keras_source(cfg)  # the model source, resolved once
    plan = plan_for(cfg, model_dims(cfg, source))
    keras = import_keras()
    dist = make_distribution(plan)
    model = build_model(cfg, dist, source)
    b, length, vocab = t.batch_size, cfg.data.max_length, model.dims.vocab
    rng = np.random.default_rng(0)

    class Data(keras.utils.PyDataset):
        def __init__(self, n: int):
            super().__init__()
            self.n = n

        def __len__(self) -> int:
            return self.n

        def __getitem__(self, i: int):
            tokens = rng.integers(107, vocab, (b, length), dtype=np.int32)
            x = model_inputs(model.backbone, tokens, np.ones((b, length), np.int32))
            return x, np.roll(tokens, -1, axis=1), np.full((b, length), 1.0 / (b * length), np.float32)

    with dist.scope() if dist is not None else _nullcontext():
        opt, _ = make_optimizer(keras, t)
        lm = model.causal_lm
        lm.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum"),
                   weighted_metrics=[])
        keras.Model.fit(lm, Data(warmup), epochs=1, verbose=0)
        t0 = time.perf_counter()
        keras.Model.fit(lm, Data(steps), epochs=1, verbose=0)
        seconds = time.perf_counter() - t0
    return {"tokens_per_s": b * length * steps / seconds, "step_time_s": seconds / steps,
            "devices": plan.data * plan.tensor, "trainable_params": float(sum(np.prod(v.shape) for v in lm.trainable_variables))}
