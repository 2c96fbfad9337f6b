"""The real Gemma 3 270M (the starter model), loaded once per test session.

``real_270m`` assembles the starter package into the session's data dir (sha256 checked)
and loads it in float32 on the first device: every real-weights test shares that one
load (~1.1 GB of params). ``shared_real_load`` makes ``load_model`` hand that same object
to code that loads the starter itself (the train loop, ``tuned.load_checkpoint``, adapters),
when it asks for what the session holds (float32, the first device, no other
tokenizer); anything else loads as usual.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

STARTER = "starter:gemma-3-270m"


@pytest.fixture(scope="session")
def real_270m(workbench_home):
    from adapters_lib.config import ModelSpec
    from adapters_lib.models import starter
    from adapters_lib.models.loader import load_model

    if not starter.installed():
        pytest.fail(f"the starter package {starter.DISTRIBUTION} is not installed: it is a "
                    "dependency (pyproject.toml); run `make test`, which installs it")
    t0 = time.perf_counter()
    loaded = load_model(ModelSpec(source=STARTER))
    import jax

    jax.block_until_ready(loaded.params)
    loaded.load_seconds = time.perf_counter() - t0  # type: ignore[attr-defined]
    return loaded


def _first_device_only(sharding: Any) -> bool:
    import jax

    if sharding is None:
        return True
    first = {jax.devices()[0]}
    if isinstance(sharding, jax.sharding.Sharding):
        return sharding.device_set == first
    probe = sharding((jax.tree_util.DictKey("embedder"), jax.tree_util.DictKey("input_embedding")),
                     jax.ShapeDtypeStruct((262_144, 640), jax.numpy.float32))
    return probe.device_set == first


@pytest.fixture
def shared_real_load(real_270m, monkeypatch):
    from adapters_lib.models import loader

    original = loader.load_model

    def load_model(spec, *, param_dtype="float32", sharding=None, generation_dtype=""):
        if spec.source in (STARTER, "gemma-3-270m") and not spec.tokenizer and \
                spec.quantize == "none" and param_dtype == "float32" and _first_device_only(sharding):
            return loader.generation_copy(real_270m, generation_dtype) if generation_dtype else real_270m
        return original(spec, param_dtype=param_dtype, sharding=sharding, generation_dtype=generation_dtype)

    monkeypatch.setattr(loader, "load_model", load_model)
    return real_270m
