"""A finished Keras-route demo run (4 simulated devices, ModelParallel 2×2), made once per session."""

from __future__ import annotations

import pytest

KERAS_DEMO_STEPS = 20
"""The loss falls over the first ~10 steps and levels off (first 5 steps' mean minus the last
5's: 1.75 and 2.43 at seeds 0 and 1 over 30 steps; the bar is 0.5). A 2×2 mesh shows what 2×4
did (the 4 query heads split, the 1 KV head replicated) on fewer simulated devices."""
KERAS_DEMO = {
    "model": {"backend": "keras"},
    "data": {"max_length": 48},
    "mesh": {"data": 2, "tensor": 2, "devices": 4},
    "lora": {"rank": 8, "alpha": 16},
    "train": {"steps": KERAS_DEMO_STEPS, "batch_size": 8, "learning_rate": 3e-3, "warmup_steps": 3,
              "eval_every": 5, "checkpoint_every": 10, "eval_batches": 2, "eval_exact_match": 6},
    "run": {"name": "keras-demo"},
}


class StopOnceLogged:
    """A TrainControl that asks for a stop once step ``n`` is logged (the Keras route polls
    between fit's steps, so a stop counted in polls would land elsewhere)."""

    def __init__(self, n: int):
        self.n, self.seen, self.between = n, 0, 0

    def should_stop(self) -> bool:
        return self.seen >= self.n

    def on_metrics(self, record):
        self.seen = max(self.seen, record["step"])

    def on_event(self, record):
        pass

    def between_steps(self):
        self.between += 1


@pytest.fixture(scope="session")
def keras_demo_run(tmp_path_factory: pytest.TempPathFactory):
    """(RunDir, TrainResult) of a 20-step Keras demo run with ModelParallel on a 2×2 mesh."""
    from adapters_lib import runs
    from adapters_lib.config import config_from_dict
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.keras_route import run_keras_training

    cfg = config_from_dict(KERAS_DEMO)
    run = runs.create_run(cfg, root=tmp_path_factory.mktemp("keras-runs"))
    result = run_keras_training(cfg, run, hooks=default_hooks)
    return run, result


# --------------------------------------------------------------------------- tiny Keras presets

_G4_COMMON = dict(vocabulary_size=1024, image_size=None, num_layers=4, num_query_heads=2,
                  num_key_value_heads=1, hidden_dim=32, intermediate_dim=64, head_dim=8,
                  final_logit_soft_cap=30.0, sliding_window_size=4, global_head_dim=16,
                  layer_types=["sliding_attention", "full_attention"] * 2,
                  global_rope_partial_rotary_factor=0.25, local_rope_wavelength=10_000.0,
                  global_rope_wavelength=1_000_000.0)
KERAS_SHAPES: dict[str, tuple[str, dict]] = {
    # Gemma 2 (GemmaBackbone with post norms; local layers 0, 2) and Gemma 3 (layer 5 global).
    # Gemma 2 as 2B/9B scale queries (by head_dim): keras-hub 0.29's GemmaDecoderBlock passes
    # query_head_dim_normalize=True to its attention whatever the backbone says (docs/keras.md)
    "gemma2": ("GemmaBackbone", dict(vocabulary_size=1024, num_layers=4, num_query_heads=2,
                                     num_key_value_heads=1, hidden_dim=32, intermediate_dim=128,
                                     head_dim=8, query_head_dim_normalize=True, use_post_ffw_norm=True,
                                     use_post_attention_norm=True, final_logit_soft_cap=30.0,
                                     attention_logit_soft_cap=50.0, use_sliding_window_attention=True,
                                     sliding_window_size=4)),
    "gemma3": ("Gemma3Backbone", dict(vocabulary_size=1024, image_size=896, num_layers=6, num_query_heads=2,
                                      num_key_value_heads=1, hidden_dim=32, intermediate_dim=64, head_dim=8,
                                      use_post_ffw_norm=True, use_post_attention_norm=True,
                                      use_sliding_window_attention=True, sliding_window_size=4,
                                      vision_encoder=None)),
    # the three Gemma 4 shapes of fixtures_gemma4 (k=v global layers; 4 experts top-2;
    # per-layer inputs with the last 2 layers KV-shared and double-wide), at the demo's vocab
    "gemma4-dense": ("Gemma4Backbone", dict(_G4_COMMON, num_global_key_value_heads=1)),
    "gemma4-moe": ("Gemma4Backbone", dict(_G4_COMMON, num_global_key_value_heads=1, enable_moe_block=True,
                                          num_experts=4, expert_intermediate_dim=16, num_experts_per_token=2)),
    "gemma4-e": ("Gemma4Backbone", dict(_G4_COMMON, hidden_size_per_layer_input=8, num_kv_shared_layers=2,
                                        use_double_wide_mlp=True)),
    # E-style shapes whose unshared layers do not end local, global (tests/test_gemma4_kv_sharing.py):
    # 7 layers, every 3rd global (keras-hub's sliding_window_pattern), the last 3 KV-shared;
    # 6 layers 5:1, the last 2 KV-shared (layer 4, global, has no unshared global: it keeps its own)
    "gemma4-e-window3": ("Gemma4Backbone", dict(_G4_COMMON, num_layers=7, layer_types=None, sliding_window_pattern=3,
                                                hidden_size_per_layer_input=8, num_kv_shared_layers=3,
                                                use_double_wide_mlp=True)),
    "gemma4-e-window5": ("Gemma4Backbone", dict(_G4_COMMON, num_layers=6, layer_types=None, sliding_window_pattern=5,
                                                hidden_size_per_layer_input=8, num_kv_shared_layers=2,
                                                use_double_wide_mlp=True)),
    "gemma3n": ("Gemma3nBackbone", dict(
        text_vocab_size=1024, text_hidden_size=32, num_hidden_layers=4, pad_token_id=0,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, intermediate_size=[64] * 4,
        hidden_activation="gelu_approximate", layer_types=["sliding_attention", "full_attention"] * 2,
        sliding_window=4, rope_theta=1_000_000.0, max_position_embeddings=128,
        vocab_size_per_layer_input=1024, hidden_size_per_layer_input=8, laurel_rank=4, altup_num_inputs=4,
        activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0], altup_coef_clip=120.0,
        num_kv_shared_layers=2, final_logit_soft_cap=30.0)),
}
# a Gemma 3n whose unshared layers end global, global (layer 3 reads layer 0, layer 4 layer 2)
KERAS_SHAPES["gemma3n-odd"] = ("Gemma3nBackbone", dict(
    KERAS_SHAPES["gemma3n"][1], num_hidden_layers=5, intermediate_size=[64] * 5,
    activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0, 0.0],
    layer_types=["sliding_attention", "full_attention", "full_attention", "sliding_attention", "full_attention"]))


def write_keras_preset(kind: str, folder, seed: int = 0):
    """A tiny random-init keras-hub backbone of ``kind`` saved in the Kaggle Keras preset layout
    (config.json, model.weights.h5, metadata.json, assets/tokenizer/vocabulary.spm: the demo
    tokenizer). Every weight is a seeded normal (×0.3; keras-hub zero-initialises the expert
    bank, which would leave its adapters without a gradient)."""
    import shutil

    import numpy as np

    from adapters_lib.keras_route.model import import_keras
    from adapters_lib.models.demo import ensure_demo_tokenizer

    import_keras()
    import keras_hub

    if kind == "gemma4-vision":  # the dense shape with a tiny vision tower, as Kaggle's E2B/E4B have
        class_name, config = KERAS_SHAPES["gemma4-dense"]
        config = dict(config, image_size=32, vision_encoder=keras_hub.models.Gemma4VisionEncoder(
            image_size=32, patch_size=8, num_heads=2, hidden_dim=16, num_layers=1, intermediate_dim=32,
            head_dim=8, output_dim=32, pool_size=2, position_embedding_size=16))
    else:
        class_name, config = KERAS_SHAPES[kind]
    backbone = getattr(keras_hub.models, class_name)(**config, dtype="float32")
    rng = np.random.default_rng(seed)
    for v in backbone.weights:
        if v.path.endswith("layer_scalar"):
            continue
        v.assign((rng.standard_normal(v.shape) * 0.3).astype(np.float32))
    backbone.save_to_preset(str(folder))
    (folder / "assets" / "tokenizer").mkdir(parents=True, exist_ok=True)
    shutil.copy(ensure_demo_tokenizer(), folder / "assets" / "tokenizer" / "vocabulary.spm")
    return folder


@pytest.fixture(scope="session")
def keras_presets(tmp_path_factory: pytest.TempPathFactory):
    """``keras_presets(kind)`` → the folder of that tiny preset, written once per session."""
    made: dict[str, object] = {}
    root = tmp_path_factory.mktemp("keras-presets")

    def get(kind: str):
        if kind not in made:
            made[kind] = write_keras_preset(kind, root / kind)
        return made[kind]

    return get


KERAS_G4_MOE = {  # the MoE preset with every target and the experts, ModelParallel 2×2
    "model": {"backend": "keras"},  # source: the fixture's preset folder
    "data": {"max_length": 32},
    # 2×2 on 4 of the 8 simulated devices shows what 4×2 did (the expert bank split over the
    # 2-way model axis, the batch over data) and compiles and steps faster
    "mesh": {"data": 2, "tensor": 2, "devices": 4},
    "lora": {"rank": 4, "alpha": 8, "targets": ["q", "k", "v", "o", "gate", "up", "down", "experts"]},
    "train": {"steps": 6, "batch_size": 4, "learning_rate": 1e-2, "warmup_steps": 1, "eval_every": 3,
              "checkpoint_every": 3, "eval_batches": 1, "eval_exact_match": 4},
    "run": {"name": "keras-gemma4-moe"},
}


def keras_g4_config(preset, **sections):
    from adapters_lib.config import config_from_dict

    raw = {k: dict(v) for k, v in KERAS_G4_MOE.items()}
    raw["model"]["source"] = str(preset)
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return config_from_dict(raw)


@pytest.fixture(scope="session")
def keras_gemma4_run(keras_presets, tmp_path_factory: pytest.TempPathFactory):
    """(RunDir, TrainResult) of a 6-step Keras-route run of the tiny Gemma 4 MoE preset on a
    2×2 ModelParallel mesh, experts trained."""
    from adapters_lib import runs
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.keras_route import run_keras_training

    cfg = keras_g4_config(keras_presets("gemma4-moe"))
    run = runs.create_run(cfg, root=tmp_path_factory.mktemp("keras-g4-runs"))
    return run, run_keras_training(cfg, run, hooks=default_hooks)
