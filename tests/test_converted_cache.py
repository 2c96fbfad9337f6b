"""Converted weights kept on disk across engines: a GGUF is dequantized once per dtype,
read back memory-mapped (the same values), capped in size, and shown by doctor."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from adapters_lib.config import ModelSpec
from adapters_lib.models import converted_cache
from adapters_lib.models.gguf import gguf_weights
from adapters_lib.models.loader import load_model


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMA_WORKBENCH_WEIGHTS_CACHE", str(tmp_path / "converted"))
    monkeypatch.setenv("GEMMA_WORKBENCH_MODEL_CACHE", "0")  # every load reads the files
    conversions: list[str] = []
    real = gguf_weights.gemma_leaves

    def counted(info, arch, param_dtype):
        conversions.append(param_dtype)
        yield from real(info, arch, param_dtype)

    monkeypatch.setattr(gguf_weights, "gemma_leaves", counted)
    return tmp_path / "converted", conversions


def _leaves(tree):
    return {jax.tree_util.keystr(k): np.asarray(v.astype(np.float32))
            for k, v in jax.tree_util.tree_leaves_with_path(tree)}


def test_a_gguf_is_converted_once_per_dtype_and_read_back_the_same(gguf_env, cache_dir):
    folder, conversions = cache_dir
    source = ModelSpec(source=str(gguf_env.files["q8"]))
    first = _leaves(load_model(source).params)
    again = load_model(source)
    assert conversions == ["float32"]  # the second load read the converted leaves back
    assert _leaves(again.params).keys() == first.keys()
    for k, v in _leaves(again.params).items():
        np.testing.assert_array_equal(v, first[k], err_msg=k)
    half = load_model(source, param_dtype="bfloat16")
    half_again = load_model(source, param_dtype="bfloat16")
    assert conversions == ["float32", "bfloat16"]
    assert half_again.params["embedder"]["input_embedding"].dtype == jax.numpy.bfloat16
    np.testing.assert_array_equal(_leaves(half_again.params)["['embedder']['input_embedding']"],
                                  _leaves(half.params)["['embedder']['input_embedding']"])
    report = converted_cache.report()
    assert report["path"] == str(folder) and report["enabled"]
    assert sorted(e["dtype"] for e in report["entries"]) == ["bfloat16", "float32"]
    assert all(e["source"] == gguf_env.files["q8"].name for e in report["entries"])
    assert report["bytes"] == sum(e["bytes"] for e in report["entries"]) > 0


def test_the_cache_keeps_under_its_cap_dropping_the_least_recently_used(gguf_env, cache_dir, monkeypatch):
    _, conversions = cache_dir
    source = ModelSpec(source=str(gguf_env.files["q8"]))
    load_model(source)
    one = converted_cache.report()["bytes"]
    monkeypatch.setenv("GEMMA_WORKBENCH_WEIGHTS_CACHE_GB", str(1.2 * one / 2**30))  # room for one f32, not f32 + bf16
    load_model(source, param_dtype="bfloat16")  # f32 (used longest ago) must go to fit the cap
    assert [e["dtype"] for e in converted_cache.report()["entries"]] == ["bfloat16"]
    load_model(source)
    assert conversions == ["float32", "bfloat16", "float32"]


def test_doctor_shows_the_converted_weights(gguf_env, cache_dir):
    from adapters_lib import doctor
    from workbench.commands.doctor import render

    load_model(ModelSpec(source=str(gguf_env.files["q8"])))
    report = doctor.collect()
    assert report["converted_weights"]["entries"][0]["dtype"] == "float32"
    text = render(report)
    assert "converted    1 model(s)" in text and gguf_env.files["q8"].name in text
