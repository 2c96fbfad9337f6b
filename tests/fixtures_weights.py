"""Tiny Gemma weights on disk in every layout the catalog reads (other areas reuse them).

Builders (plain functions):
- ``tiny_params(arch, seed)``: a numpy params tree of the given architecture;
- ``write_orbax(folder, params, layout="flat"|"nested")``: an orbax checkpoint; "flat" is the
  Kaggle release layout (``transformer/layer_0/attn/q_einsum`` + ``w``), "nested" is what
  ``gm.ckpts.save_params`` writes for a ``model.init`` tree;
- ``kaggle_model(cache, handle, …)``: ``models/<owner>/<model>/flax/<variation>/<version>/``
  with the checkpoint in a ``<variation>/`` sub-folder, ``tokenizer.model`` and kagglehub's
  ``<version>.complete`` marker;
- ``hf_cache_repo(cache, repo_id, files)``: the real hub cache layout
  (``models--org--name/{blobs,refs/main,snapshots/<sha>/…}``, snapshot files are symlinks to
  blobs) that ``huggingface_hub.scan_cache_dir`` reads;
- ``hf_files(params, arch, …)``: config.json + safetensors (single or sharded) as bytes;
- ``keras_preset(folder)``: a Keras preset folder (config, metadata, weights, tokenizer).

Fixture ``weights_env`` (session): a kagglehub cache, an HF cache and a folder holding good
and broken models of the demo architecture. Fixture ``weights_cache`` (per test): the same,
with ``KAGGLEHUB_CACHE``/``HF_HUB_CACHE`` pointing at them for that test only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from adapters_lib.models import families
from adapters_lib.models.hf import hf_convert

DEMO_ARCH = families.KNOWN[("gemma3", "custom")][1]
TINY_GEMMA2 = families.Arch(
    "gemma2", 2, 64, 128, 4, 16, 2, 1024, ("local", "global"), 16, use_qk_norm=False,
    transpose_gating=False, query_pre_attn_scalar=16, final_logit_softcap=30.0,
    attn_logit_softcap=50.0)
"""A tiny Gemma 2 shape (non-transposed gating like Gemma 2 2B) that matches no known size."""


def tiny_params(arch: families.Arch = DEMO_ARCH, seed: int = 0, dtype: str = "float32") -> dict:
    """A nested numpy params tree of ``arch`` (weights ~N(0, 0.05), norms ~N(0, 0.1))."""
    rng = np.random.default_rng(seed)
    tree: dict[str, Any] = {}
    for path, shape in hf_convert.gemma_shapes(arch).items():
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        scale = 0.1 if path[-1] == "scale" else 0.05
        node[path[-1]] = (rng.standard_normal(shape) * scale).astype(dtype)
    return tree


def write_orbax(folder: Path, params: dict, layout: str = "flat") -> Path:
    import jax
    import jax.numpy as jnp
    from gemma import gm
    from gemma.gm.ckpts import _checkpoint

    tree = jax.tree.map(jnp.asarray, params)
    if layout == "flat":
        tree = _checkpoint._nested_to_flat(tree)
    gm.ckpts.save_params(tree, folder, wait_until_finished=True)
    return folder


def kaggle_model(cache: Path, handle: str, params: dict | None, tokenizer: Path | None, *,
                 layout: str = "flat", complete: bool = True) -> Path:
    """``handle`` = owner/model/framework/variation/version. Returns the version folder."""
    owner, model, framework, variation, version = handle.split("/")
    var_dir = cache / "models" / owner / model / framework / variation
    folder = var_dir / version
    folder.mkdir(parents=True, exist_ok=True)
    if params is not None:
        write_orbax(folder / variation, params, layout)
    if tokenizer is not None:
        shutil.copy(tokenizer, folder / "tokenizer.model")
    if complete:
        (var_dir / f"{version}.complete").touch()
    return folder


def hf_files(params: dict, arch: families.Arch, *, shard_bytes: int = 0,
             config: dict | None = None, tokenizer: Path | None = None) -> dict[str, bytes]:
    """The files of an HF Gemma repo made from ``params`` (via gemma → HF conversion)."""
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"hf-files-{os.getpid()}-{id(params)}"
    shutil.rmtree(tmp, ignore_errors=True)
    tensors = hf_convert.gemma_to_hf(params, arch=arch)
    hf_convert.save_hf(tmp, tensors, config or families.hf_config_for(arch),
                       max_shard_bytes=shard_bytes)
    if tokenizer is not None:
        shutil.copy(tokenizer, tmp / "tokenizer.model")
    files = {p.name: p.read_bytes() for p in sorted(tmp.iterdir())}
    shutil.rmtree(tmp)
    return files


def hf_cache_repo(cache: Path, repo_id: str, files: dict[str, bytes], *,
                  commit: str | None = None, incomplete: dict[str, bytes] | None = None) -> Path:
    """Write ``files`` as the hub cache does; returns the snapshot folder."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    commit = commit or hashlib.sha1(repo_id.encode()).hexdigest()
    snap = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    for name, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / digest).write_bytes(data)
        link = snap / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(Path("../../blobs") / digest)
    for name, data in (incomplete or {}).items():
        (repo / "blobs" / f"{hashlib.sha256(name.encode()).hexdigest()}.incomplete").write_bytes(data)
    return snap


def keras_gemma_layers(arch: families.Arch) -> dict[str, list[tuple[int, ...]]]:
    """keras-hub's Gemma 3 backbone variables of ``arch``: layer name path → shapes."""
    n, k, h, d, f = arch.num_heads, arch.num_kv_heads, arch.head_dim, arch.embed_dim, arch.hidden_dim
    out = {"token_embedding": [(arch.vocab_size, d)], "final_normalization": [(d,)]}
    for i in range(arch.num_layers):
        b = f"decoder_block_{i}/"
        for norm in ("pre_attention_norm", "post_attention_norm", "pre_ffw_norm", "post_ffw_norm"):
            out[b + norm] = [(d,)]
        out[b + "attention/query"] = [(n, d, h)]
        out[b + "attention/key"] = out[b + "attention/value"] = [(k, d, h)]
        out[b + "attention/attention_output"] = [(n, h, d)]
        out[b + "attention/query_norm"] = out[b + "attention/key_norm"] = [(h,)]
        out[b + "ffw_gating"] = out[b + "ffw_gating_2"] = [(d, f)]
        out[b + "ffw_linear"] = [(f, d)]
    return out


def keras_h5(path: Path, layers: dict[str, list[tuple[int, ...]]]) -> Path:
    """A ``model.weights.h5`` in Keras' layout (``layers/…/vars/<i>``, each ``vars`` group named
    after its layer), zero-filled and stored lazily (a few KB whatever the shapes)."""
    import h5py

    with h5py.File(path, "w") as f:
        for name, shapes in layers.items():
            parts = name.split("/")
            for depth in range(1, len(parts) + 1):
                group = f.require_group("layers/" + "/".join(parts[:depth]) + "/vars")
                group.attrs["name"] = parts[depth - 1]
            for i, shape in enumerate(shapes):
                group.create_dataset(str(i), shape=shape, dtype="float32")
    return path


def keras_preset(folder: Path, tokenizer: Path | None, *, weights: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    body = {"vocabulary_size": 1024, "image_size": 896, "num_layers": 4, "num_query_heads": 4,
            "num_key_value_heads": 1, "hidden_dim": 256, "intermediate_dim": 1024,
            "head_dim": 64, "query_head_dim_normalize": True, "use_query_key_norm": True,
            "use_post_ffw_norm": True, "use_post_attention_norm": True,
            "attention_logit_soft_cap": None, "final_logit_soft_cap": None,
            "use_sliding_window_attention": True, "sliding_window_size": 32,
            "vision_encoder": None, "layer_norm_epsilon": 1e-6, "dropout": 0}
    config = {"module": "keras_hub.src.models.gemma3.gemma3_backbone",
              "class_name": "Gemma3Backbone", "config": body, "registered_name": "keras_hub>Gemma3Backbone"}
    (folder / "config.json").write_text(json.dumps(config))
    meta = {"keras_version": "3.15.1", "keras_hub_version": "0.29.1",
            "parameter_count": DEMO_ARCH.param_count(), "date_saved": "2026-11-29@00:00:00"}
    (folder / "metadata.json").write_text(json.dumps(meta))
    (folder / "tokenizer.json").write_text(json.dumps({"module": "keras_hub.src.models.gemma3.gemma3_tokenizer",
                                                        "class_name": "Gemma3Tokenizer"}))
    if weights:
        keras_h5(folder / "model.weights.h5", keras_gemma_layers(DEMO_ARCH))
    if tokenizer is not None:
        (folder / "assets" / "tokenizer").mkdir(parents=True, exist_ok=True)
        shutil.copy(tokenizer, folder / "assets" / "tokenizer" / "vocabulary.spm")
    return folder


@dataclass
class WeightsEnv:
    """Where the session's fixture weights are, and what they hold."""

    kaggle: Path
    hf: Path
    folder: Path
    params: dict
    gemma2_params: dict
    tokenizer: Path
    ids: dict[str, str]
    """Short names → catalog ids (ok_flat, ok_nested, incomplete, corrupt, no_tokenizer,
    odd_shapes, hf_single, hf_sharded, hf_gemma2, hf_llama, hf_truncated, hf_partial,
    keras, keras_no_weights, folder_hf)."""


@pytest.fixture(scope="session")
def weights_env(tmp_path_factory: pytest.TempPathFactory, workbench_home) -> WeightsEnv:
    from adapters_lib.models import demo

    root = tmp_path_factory.mktemp("weights")
    kaggle, hf, folder = root / "kagglehub", root / "hf-hub", root / "models"
    tok = demo.ensure_demo_tokenizer()
    params = tiny_params(DEMO_ARCH, seed=1)
    g2 = tiny_params(TINY_GEMMA2, seed=2)
    ids: dict[str, str] = {}

    def kg(name: str, handle: str, *args: Any, **kw: Any) -> None:
        kaggle_model(kaggle, handle, *args, **kw)
        ids[name] = f"kaggle:{handle}"

    kg("ok_flat", "google/gemma-3/flax/gemma3-demo-it/1", params, tok)
    kg("ok_nested", "google/gemma-3/flax/gemma3-demo-it/2", params, tok, layout="nested")
    kg("incomplete", "google/gemma-3/flax/gemma3-1b-pt/1", params, None, complete=False)
    corrupt = kaggle_model(kaggle, "google/gemma-3/flax/gemma3-corrupt/1", params, tok)
    (corrupt / "gemma3-corrupt" / "manifest.ocdbt").write_bytes(b"\0garbage")
    ids["corrupt"] = "kaggle:google/gemma-3/flax/gemma3-corrupt/1"
    kg("no_tokenizer", "google/gemma-3/flax/gemma3-notok/1", params, None)
    odd = dict(params)
    odd["embedder"] = {"input_embedding": np.zeros((1024, 256), np.float32)}
    odd = {k: v for k, v in odd.items() if k not in ("layer_3",)}  # 3 layers: no known size
    kg("odd_shapes", "someone/gemma-odd/flax/odd-3layer/1", odd, tok)

    def hub(name: str, repo: str, files: dict[str, bytes], **kw: Any) -> None:
        hf_cache_repo(hf, repo, files, **kw)
        ids[name] = f"hf:{repo}"

    hub("hf_single", "google/gemma-3-demo-it", hf_files(params, DEMO_ARCH, tokenizer=tok))
    hub("hf_sharded", "google/gemma-3-demo-sharded",
        hf_files(params, DEMO_ARCH, shard_bytes=4_000_000, tokenizer=tok))
    hub("hf_gemma2", "google/gemma-2-tiny", hf_files(g2, TINY_GEMMA2, tokenizer=tok))
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
             "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
             "vocab_size": 1024}
    hub("hf_llama", "meta-llama/tiny-llama", {"config.json": json.dumps(llama).encode(),
                                              "model.safetensors": b"\x08" + b"\0" * 7 + b"{}      "})
    good = hf_files(params, DEMO_ARCH, tokenizer=tok)
    truncated = dict(good, **{"model.safetensors": good["model.safetensors"][:100_000]})
    hub("hf_truncated", "google/gemma-3-truncated", truncated)
    sharded = hf_files(params, DEMO_ARCH, shard_bytes=4_000_000, tokenizer=tok)
    last = sorted(n for n in sharded if n.endswith(".safetensors"))[-1]
    partial = {n: d for n, d in sharded.items() if n != last}
    hub("hf_partial", "google/gemma-3-partial", partial, incomplete={last: sharded[last][:1000]})

    keras_preset(folder / "gemma3_demo_keras", tok)
    ids["keras"] = f"local:{(folder / 'gemma3_demo_keras').resolve()}"
    keras_preset(folder / "gemma3_keras_noweights", tok, weights=False)
    ids["keras_no_weights"] = f"local:{(folder / 'gemma3_keras_noweights').resolve()}"
    hf_dir = folder / "exports" / "gemma3-demo-export"
    hf_dir.mkdir(parents=True)
    for name, data in good.items():
        (hf_dir / name).write_bytes(data)
    ids["folder_hf"] = f"local:{hf_dir.resolve()}"

    return WeightsEnv(kaggle=kaggle, hf=hf, folder=folder, params=params, gemma2_params=g2,
                      tokenizer=tok, ids=ids)


@pytest.fixture
def weights_cache(weights_env: WeightsEnv, monkeypatch: pytest.MonkeyPatch) -> WeightsEnv:
    monkeypatch.setenv("KAGGLEHUB_CACHE", str(weights_env.kaggle))
    monkeypatch.setenv("HF_HUB_CACHE", str(weights_env.hf))
    return weights_env
