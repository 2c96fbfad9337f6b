"""Gemma 4 presets made by keras-hub score as keras-hub scores them, on both routes.

A generated sweep of tiny ``Gemma4Backbone`` configs over the fields a preset may set apart
from ours: a sliding window shorter than the text, ``global_head_dim`` other than ``head_dim``,
``num_global_key_value_heads`` (k=v global layers) or none, partial rotary on the global
layers, two RoPE wavelengths, the final soft-cap on or off; dense, MoE and E-style (per-layer
inputs, KV sharing). Each preset is saved as users have them (``config.json``,
``model.weights.h5``, ``assets/tokenizer/vocabulary.spm``) with a vocabulary whose ``<bos>``/
``<eos>`` sit at Gemma's ids (2, 1) or at keras-hub's test recipe's (1, 2): keras-hub looks
them up by name, and so must we (a preset with the second kind scored 1-2 % off).

The oracle is keras-hub itself: its ``Gemma4Tokenizer`` (BOS + the file's text + EOS) and its
``Gemma4CausalLM`` forward. Per position, our logits are within 1e-4 of its (relative to the
position's largest), and the perplexity within 0.1 %:
- the gemma route: the preset converted to gemma's modules, the tokens ``eval`` makes of a
  text file, and ``eval``'s own perplexity (``perplexity.evaluate_file``);
- the Keras route: the run's model (``keras_route.model.build_model``, LoRA on) over the
  batches the route's data pipeline makes of the same file.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

TEXT = ("The river rose through the night, and by morning the low fields lay under water. "
        "Farmers moved their animals to the ridge, counted them twice, and waited for the rain "
        "to stop. Nobody spoke much; the radio said more storms were coming from the west.")

_BASE = dict(vocabulary_size=1024, image_size=None, num_layers=6, sliding_window_pattern=3,
             num_query_heads=4, num_key_value_heads=1, hidden_dim=32, intermediate_dim=64,
             head_dim=8, sliding_window_size=8)
# the fields swept, each with the held-out fixture's value first and ours/keras-hub's default after
_FIELDS = {
    "global_head_dim": (16, 8),
    "num_global_key_value_heads": (1, None),
    "global_rope_partial_rotary_factor": (0.25, 1.0),
    "rope": ((10_000.0, 1_000_000.0), (10_000.0, 10_000.0)),
    "final_logit_soft_cap": (30.0, None),
}
# the fewest layers that show each kind (every program below, keras-hub's forward, ours and
# eval's, is per layer): dense and MoE on 3 (local, local, global: one period of the 3:1
# pattern); E-style on 4 at 1:1 (local, global, then the 2 KV-shared ones, local and global,
# each reading an unshared layer of its kind). The 3:1 and 5:1 patterns of E-style presets
# with KV sharing are checked against keras-hub in tests/test_gemma4_kv_sharing.py.
_KINDS = {"dense": dict(num_layers=3),
          "moe": dict(num_layers=3, enable_moe_block=True, num_experts=4, expert_intermediate_dim=16,
                      num_experts_per_token=2),
          "e": dict(num_layers=4, sliding_window_pattern=2, hidden_size_per_layer_input=8,
                    num_kv_shared_layers=2, use_double_wide_mlp=True)}


def _sweep() -> list[tuple[str, str, dict]]:
    """(id, vocabulary ids, backbone config): every kind with the held-out fixture's fields and
    keras-hub's test-recipe ids; then each field flipped alone (cycling kind and ids)."""
    def config(kind: str, pick: dict[str, int]) -> dict:
        c = dict(_BASE, **_KINDS[kind])
        for name, choice in pick.items():
            value = _FIELDS[name][choice]
            if name == "rope":
                c["local_rope_wavelength"], c["global_rope_wavelength"] = value
            else:
                c[name] = value
        return c

    held_out = dict.fromkeys(_FIELDS, 0)
    out = [(f"{kind}-held-out", "keras-ids", config(kind, held_out)) for kind in _KINDS]
    kinds, ids = itertools.cycle(_KINDS), itertools.cycle(["gemma-ids", "keras-ids"])
    for name in _FIELDS:
        kind = next(kinds)
        out.append((f"{kind}-{name}-default", next(ids), config(kind, {**held_out, name: 1})))
    return out


SWEEP = _sweep()


def _vocabulary(folder, ids: str):
    """The demo SentencePiece model with Gemma's piece names: ``<bos>`` at 2 and ``<eos>`` at 1
    (``gemma-ids``), or the other way round (``keras-ids``: the proto's own control ids still
    say BOS 2, EOS 1, so only a lookup by name finds them)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    from adapters_lib.models.demo import ensure_demo_tokenizer

    m = pb.ModelProto()
    m.ParseFromString(ensure_demo_tokenizer().read_bytes())
    names = {1: "<eos>", 2: "<bos>"} if ids == "gemma-ids" else {1: "<bos>", 2: "<eos>"}
    for i, name in names.items():
        m.pieces[i].piece = name
    path = folder / f"{ids}.spm"
    path.write_bytes(m.SerializeToString())
    return path


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("parity") / "text.txt"
    path.write_text(TEXT + "\n")
    return path


@pytest.fixture(scope="module")
def presets(tmp_path_factory):
    """``presets(case)`` → (folder, keras-hub's CausalLM, keras-hub's token ids of the text)."""
    import shutil

    from adapters_lib.keras_route.model import import_keras

    keras = import_keras()
    import keras_hub

    root = tmp_path_factory.mktemp("parity-presets")
    made: dict[str, tuple] = {}

    def get(case: tuple[str, str, dict]):
        name, ids, config = case
        if name not in made:
            keras.utils.set_random_seed(0)
            backbone = keras_hub.models.Gemma4Backbone(**config, dtype="float32")
            rng = np.random.default_rng(0)
            for v in backbone.weights:  # keras-hub's init leaves the logits near uniform
                if not v.path.endswith("layer_scalar"):
                    v.assign((rng.standard_normal(v.shape) * 0.3).astype(np.float32))
            folder = root / name
            backbone.save_to_preset(str(folder))
            (folder / "assets" / "tokenizer").mkdir(parents=True, exist_ok=True)
            shutil.copy(_vocabulary(root, ids), folder / "assets" / "tokenizer" / "vocabulary.spm")
            tok = keras_hub.models.Gemma4Tokenizer(proto=str(folder / "assets" / "tokenizer" / "vocabulary.spm"),
                                                   has_vision_tokens=False, has_video_tokens=False)
            # the file as written, its final newline included (keras-hub's own reading)
            tokens = [tok.start_token_id, *np.asarray(tok(TEXT + "\n")).tolist(), tok.end_token_id]
            lm = keras_hub.models.Gemma4CausalLM(backbone=backbone, preprocessor=None)
            made[name] = (folder, lm, np.asarray([tokens], np.int32))
        return made[name]

    return get


def _keras_hub_logits(lm, tokens: np.ndarray) -> np.ndarray:
    from adapters_lib.keras_route.backbones import model_inputs

    return np.asarray(lm(model_inputs(lm.backbone, tokens, np.ones_like(tokens))), np.float64)


def _perplexity(logits: np.ndarray, targets: np.ndarray) -> float:
    logits = np.asarray(logits, np.float64)
    top = logits.max(-1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    return math.exp(-float(np.take_along_axis(logp, targets[..., None], -1).mean()))


def _assert_logits_close(ours: np.ndarray, theirs: np.ndarray) -> None:
    scale = np.abs(theirs).max(-1, keepdims=True)
    worst = float((np.abs(ours - theirs) / scale).max())
    assert worst <= 1e-4, f"logits off by {worst:.2e} of a position's largest"


def _pipeline_tokens(path, tokenizer) -> np.ndarray:
    """The token ids ``eval``'s data pipeline makes of the text file (one sequence)."""
    from adapters_lib.evals import perplexity

    tset = perplexity.tokenize_file(str(path), tokenizer, max_length=512).train
    assert len(tset) == 1
    return tset.sequence(0)[0][None].astype(np.int32)


@pytest.mark.parametrize("case", SWEEP, ids=[c[0] for c in SWEEP])
def test_the_gemma_route_scores_a_keras_hub_preset_as_keras_hub(presets, text_file, case):
    import jax.numpy as jnp

    from adapters_lib.catalog import resolve
    from adapters_lib.evals import perplexity
    from adapters_lib.models import weights

    folder, lm, theirs_tokens = presets(case)
    assert theirs_tokens.shape[1] - 1 > 2 * case[2]["sliding_window_size"]  # the window matters
    loaded = weights.load_entry(resolve(str(folder)))
    tokens = _pipeline_tokens(text_file, loaded.tokenizer)
    np.testing.assert_array_equal(tokens, theirs_tokens)  # BOS and EOS by name, as keras-hub
    theirs = _keras_hub_logits(lm, tokens)
    ours = np.asarray(loaded.model.apply({"params": loaded.params}, jnp.asarray(tokens)).logits, np.float64)
    _assert_logits_close(ours, theirs)
    result = perplexity.evaluate_file(loaded.model, loaded.params, loaded.tokenizer, str(text_file))  # eval's
    assert result.tokens == tokens.shape[1] - 1 and result.eos_scored
    assert (result.bos_id, result.eos_id) == (int(tokens[0, 0]), int(tokens[0, -1]))
    assert result.perplexity == pytest.approx(_perplexity(theirs[:, :-1], tokens[:, 1:]), rel=1e-3)


@pytest.mark.parametrize("case", SWEEP[:3] + SWEEP[3::2], ids=[c[0] for c in SWEEP[:3] + SWEEP[3::2]])
def test_the_keras_route_scores_a_keras_hub_preset_as_keras_hub(presets, text_file, case):
    from adapters_lib.config import config_from_dict
    from adapters_lib.data.packing import assemble
    from adapters_lib.evals import perplexity
    from adapters_lib.keras_route.backbones import model_inputs
    from adapters_lib.keras_route.model import build_model

    folder, lm, theirs_tokens = presets(case)
    cfg = config_from_dict({"model": {"source": str(folder), "backend": "keras"},
                            "mesh": {"data": 1, "tensor": 1, "devices": 1},
                            "lora": {"rank": 2, "alpha": 4, "targets": ["q", "v"]}})
    model = build_model(cfg, None)
    tset = perplexity.tokenize_file(str(text_file), model.tokenizer_path, max_length=512).train
    batch = assemble(tset, [[0]], 1, int(tset.lengths[0]))  # the route's batch of the text
    np.testing.assert_array_equal(batch["tokens"], theirs_tokens)
    assert int(batch["loss_mask"].sum()) == theirs_tokens.shape[1] - 1
    x = model_inputs(model.backbone, batch["tokens"], (batch["segment_ids"] != 0).astype(np.int32),
                     batch["positions"])
    ours = np.asarray(model.causal_lm(x), np.float64)
    theirs = _keras_hub_logits(lm, theirs_tokens)
    _assert_logits_close(ours, theirs)
    assert _perplexity(ours[:, :-1], batch["targets"][:, :-1]) == pytest.approx(
        _perplexity(theirs[:, :-1], theirs_tokens[:, 1:]), rel=1e-3)
