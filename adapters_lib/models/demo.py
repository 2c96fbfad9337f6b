"""The built-in demo model: a tiny Gemma-3-shaped ``gm.nn.Transformer``, its tokenizer, its data.

Everything is made offline and deterministically:
- the model is the stock ``gm.nn.Transformer`` with a tiny Gemma 3 config (local/global
  attention, QK-norm, 1 KV head), parameters from a fixed seed;
- the tokenizer is a SentencePiece model trained at first use on the demo corpus, in the
  Gemma 3 id layout so that ``gm.text.Gemma3Tokenizer`` and gemma's samplers work with it;
  it is cached in the data dir;
- the dataset comes from ``demo_tasks``.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
from functools import cache
from pathlib import Path

from adapters_lib import paths
from adapters_lib.models import demo_tasks

DEMO_VOCAB = 1024
DEMO_SEED = 0
DEMO_TOKENIZER_VERSION = "v2"  # bump when the trainer settings change

# SentencePiece settings for the Gemma 3 id layout (see STACK-NOTES):
# pad=0 eos=1 bos=2 unk=3 <mask>=4 [multimodal]=5 <unused0..98>=6..104
# <start_of_turn>=105 <end_of_turn>=106.
SPECIAL_SYMBOLS = (
    ["<mask>", "[multimodal]"]
    + [f"<unused{i}>" for i in range(99)]
    + ["<start_of_turn>", "<end_of_turn>"]
)


def demo_transformer_config():
    """The tiny Gemma-3-shaped config (about 3.8 M parameters)."""
    from gemma import gm

    cfg = gm.nn.config
    return cfg.TransformerConfig(
        num_embed=DEMO_VOCAB,
        embed_dim=256,
        hidden_dim=1024,
        num_heads=4,
        head_dim=64,
        num_kv_heads=1,
        final_logit_softcap=None,
        use_post_attn_norm=True,
        use_post_ffw_norm=True,
        use_qk_norm=True,
        attention_types=cfg.make_attention_layers_types(
            (cfg.AttentionType.LOCAL_SLIDING, cfg.AttentionType.GLOBAL), num_layers=4
        ),
        query_pre_attn_norm=cfg.QueryPreAttentionNormalisation.BY_ONE_OVER_SQRT_HEAD_DIM,
        attn_logits_soft_cap=None,
        sliding_window_size=32,
        transpose_gating_einsum=True,
        local_base_frequency=10_000,
        global_base_frequency=1_000_000,
        vision_encoder=None,
    )


@cache
def demo_model_class():
    """A ``gm.nn.Transformer`` subclass carrying the demo config (made once, lazily)."""
    from gemma import gm

    class DemoGemma(gm.nn.Transformer):  # type: ignore[misc, valid-type]
        """The workbench's built-in tiny Gemma 3 model."""

        config: gm.nn.config.TransformerConfig = demo_transformer_config()
        INFO = gm.nn.config.ModelInfo(tokenizer_version=3)

    return DemoGemma


def demo_model(dtype: str = "float32"):
    """The demo Transformer. ``dtype`` is the parameter dtype (gemma's default is bf16)."""
    import jax.numpy as jnp

    return demo_model_class()(dtype=jnp.dtype(dtype))


DEMO_EMBED_STD = 0.05
"""Std of the demo embedding table. gemma's default init (std 0.01) makes the tied output
logits of a random model so flat (std 0.16) that a short LoRA run can barely move the answer;
0.05 gives logits of std ~0.8 while the initial loss stays near log(vocab) (7.2 vs 6.9). Larger
values make the random model confidently copy its input token (std 0.3: initial loss 66)."""


def demo_params(seed: int = DEMO_SEED, dtype: str = "float32"):
    """Deterministic demo parameters (the base model), on the default device.

    The host copy is made once per process (initialising compiles the whole model).
    """
    import jax

    return jax.tree.map(jax.numpy.asarray, _demo_params_host(seed, dtype))


@cache
def _demo_params_host(seed: int, dtype: str):
    import jax
    import jax.numpy as jnp
    import numpy as np

    model = demo_model(dtype)
    tokens = jnp.zeros((1, 8), jnp.int32)

    def init(rng):
        params = model.init(rng, tokens)["params"]
        table = params["embedder"]["input_embedding"]
        rescaled = table.astype(jnp.float32) * (DEMO_EMBED_STD / jnp.std(table.astype(jnp.float32)))
        params["embedder"]["input_embedding"] = rescaled.astype(table.dtype)
        return params

    params = jax.device_get(jax.jit(init)(jax.random.key(seed)))
    for leaf in jax.tree.leaves(params):
        np.asarray(leaf).setflags(write=False)
    return params


# --------------------------------------------------------------------------- tokenizer


def _corpus_text() -> str:
    return "\n".join(demo_tasks.corpus_lines()) + "\n"


def _tokenizer_key() -> str:
    digest = hashlib.sha256(_corpus_text().encode()).hexdigest()[:12]
    return f"demo-tokenizer-{DEMO_TOKENIZER_VERSION}-{DEMO_VOCAB}-{digest}"


def ensure_demo_tokenizer(directory: Path | None = None) -> Path:
    """Train (once) and return the path of the demo SentencePiece model.

    Safe under concurrency: a file lock serialises trainers, the model is written to a
    temporary name and renamed into place.
    """
    import sentencepiece as spm

    directory = directory or paths.demo_dir()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{_tokenizer_key()}.model"
    if target.is_file():
        return target
    with open(directory / ".tokenizer.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(_corpus_text().splitlines()),
            model_writer=model,
            vocab_size=DEMO_VOCAB,
            model_type="bpe",
            character_coverage=1.0,
            byte_fallback=True,
            split_digits=True,
            normalization_rule_name="identity",
            remove_extra_whitespaces=False,
            add_dummy_prefix=False,
            pad_id=0,
            eos_id=1,
            bos_id=2,
            unk_id=3,
            user_defined_symbols=SPECIAL_SYMBOLS,
            num_threads=1,
            seed_sentencepiece_size=200_000,
            minloglevel=2,
        )
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(model.getvalue())
        os.replace(tmp, target)
    return target


def demo_tokenizer():
    """``gm.text.Gemma3Tokenizer`` over the demo SentencePiece model."""
    from gemma import gm

    return gm.text.Gemma3Tokenizer(path=str(ensure_demo_tokenizer()))
