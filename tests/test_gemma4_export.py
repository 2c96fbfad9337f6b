"""Exports of a Gemma 4 MoE run: the PEFT adapter in transformers' names (the expert bank
through PEFT's ``target_parameters``) merges, by PEFT's own formulas, into the weights our fused
HF export holds; it reads back exactly; the merged HF and gm exports reload to the same logits."""

from __future__ import annotations

import json

import numpy as np
import pytest

SPEC_TARGETS = ("q", "k", "v", "o", "gate", "up", "down", "experts")


@pytest.fixture(scope="module")
def moe_run(gemma4_tiny):
    """The tiny MoE Gemma 4 with non-zero adapters on every target (B nonzero: a trained run)."""
    import jax

    from adapters_lib import lora
    from adapters_lib.config import LoraSpec

    arch, model, params = gemma4_tiny["moe"]
    spec = LoraSpec(rank=2, alpha=4.0, targets=SPEC_TARGETS)
    rng = np.random.default_rng(11)
    adapters = jax.tree.map(lambda x: (rng.standard_normal(x.shape) * 0.2).astype(np.float32),
                            lora.init_lora(model, spec, None, jax.random.key(0)))
    return arch, model, params, spec, adapters


def _peft_merge(hf: dict, tensors: dict, config: dict) -> dict:
    """HF weights with a PEFT adapter merged by PEFT's formulas: ``lora.Linear``'s
    ``B @ A · alpha/r`` on a module's ``weight``; ``lora.ParamWrapper``'s
    ``einsum("o r e, e r i -> e i o", B.reshape(out, r, E), A.reshape(E, r, in)) · alpha/r`` on a
    3-D parameter (``rank_pattern``/``alpha_pattern`` per parameter)."""
    out = {k: np.array(v, np.float32) for k, v in hf.items()}
    for name in [n for n in tensors if n.endswith("lora_A.weight")]:
        stem = name[: -len(".lora_A.weight")]
        a, b = tensors[name], tensors[stem + ".lora_B.weight"]
        module = stem[len("base_model.model."):]
        if module.endswith(".experts") or module.endswith(".experts.base_layer"):
            param = "experts.gate_up_proj" if module.endswith("base_layer") else "experts.down_proj"
            r, alpha = config["rank_pattern"].get(param, config["r"]), config["alpha_pattern"].get(param, config["lora_alpha"])
            target = module.removesuffix(".base_layer").removesuffix(".experts") + "." + param
            experts = out[target].shape[0]
            delta = np.einsum("ore,eri->eio", b.reshape(b.shape[0], -1, experts), a.reshape(experts, -1, a.shape[1]))
            assert a.shape[0] == r * experts
            out[target] += delta * alpha / r
        else:
            out[module + ".weight"] += b @ a * config["lora_alpha"] / config["r"]
    return out


def test_the_peft_adapter_merges_by_peft_formulas_into_our_fused_weights(moe_run, tmp_path):
    from adapters_lib import lora
    from adapters_lib.export import peft
    from adapters_lib.lora import fuse as lora_fuse
    from adapters_lib.models.hf import hf_convert, hf_layout, safetensors_io

    arch, model, params, spec, adapters = moe_run
    peft.save_adapter(tmp_path, adapters, spec, "google/gemma-4-26b-a4b")
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    assert config["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert config["target_parameters"] == ["experts.gate_up_proj", "experts.down_proj"]
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", 2, 4.0)
    folder = safetensors_io.SafetensorsDir(tmp_path)
    tensors = {n: np.asarray(folder.get(n)) for n in folder.where}
    modules = {n[: -len(".weight")] for n in hf_layout.hf_shapes(arch)} | \
        {n.rsplit(".", 1)[0] for n in hf_layout.hf_shapes(arch) if n.endswith("experts.gate_up_proj")}
    for name in tensors:  # every adapter sits on one of transformers' Gemma 4 modules
        module = name[len("base_model.model."):].rsplit(".lora_", 1)[0].removesuffix(".base_layer")
        assert module in modules, name
    assert any(".1.self_attn.k_proj." in n for n in tensors)  # the k=v global layer's k
    assert not any(".1.self_attn.v_proj." in n for n in tensors)  # …which has no v_proj
    base = hf_convert.gemma_to_hf(params, arch=arch)
    fused = hf_convert.gemma_to_hf(lora_fuse.fuse_lora(lora.merge_lora(params, adapters), spec), arch=arch)
    merged = _peft_merge(base, tensors, config)
    assert merged.keys() == fused.keys()
    for name, want in fused.items():
        np.testing.assert_allclose(merged[name], want, atol=1e-5, err_msg=name)
    assert sum(not np.array_equal(fused[n], base[n]) for n in base) > 10  # the adapters did move weights
    back = peft.load_adapter(tmp_path, model)
    flat_back = {"/".join(k): v for k, v in _flat(back).items()}
    for key, value in _flat(adapters).items():
        np.testing.assert_allclose(np.asarray(flat_back["/".join(key)]), value, atol=1e-6, err_msg=str(key))
    peft.save_adapter(tmp_path / "mm", adapters, spec, "google/gemma-4-26b-a4b", multimodal=True)
    mm = safetensors_io.SafetensorsDir(tmp_path / "mm")
    assert all(n.startswith("base_model.model.model.language_model.layers.") for n in mm.where)
    assert set(_flat(peft.load_adapter(tmp_path / "mm", model))) == set(_flat(adapters))


def test_merged_hf_and_gm_exports_reload_to_the_same_logits(moe_run, tmp_path):
    """The fused run through ``export.merged`` as HF safetensors (read back by the HF loader) and
    as a gm checkpoint (``gm.ckpts.load_params``): the same logits as the fused tree in memory."""
    import jax
    import jax.numpy as jnp
    from gemma import gm

    from adapters_lib.export import merged
    from adapters_lib.models import families, weights
    from adapters_lib.models.loaded import LoadedModel

    arch, model, params, spec, adapters = moe_run
    loaded = LoadedModel(model=model, params=params, tokenizer=None, source="tiny", family="gemma4")
    fused = merged.merged_params(loaded, adapters, spec)
    merged.save_hf(tmp_path / "hf", fused, loaded)
    merged.save_gemma(tmp_path / "gm", fused)
    read = families.from_hf_config(json.loads((tmp_path / "hf" / "config.json").read_text()))
    assert read == arch
    from_hf = weights.load_hf_params(tmp_path / "hf", read, "float32", None)
    from_gm = gm.ckpts.load_params(tmp_path / "gm")
    forward = jax.jit(lambda p, t: model.apply({"params": p}, t).logits)
    tokens = jnp.asarray(np.random.default_rng(5).integers(1, 256, (2, 15)), jnp.int32)
    want = np.asarray(forward(fused, tokens))
    np.testing.assert_allclose(np.asarray(forward(from_hf, tokens)), want, atol=1e-5)
    np.testing.assert_allclose(np.asarray(forward(from_gm, tokens)), want, atol=1e-5)
    assert not np.allclose(np.asarray(forward(params, tokens)), want, atol=1e-3)  # the run differs from its base


def _flat(tree) -> dict[tuple[str, ...], np.ndarray]:
    import jax

    return {tuple(k.key for k in p): np.asarray(x) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}
