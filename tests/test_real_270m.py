"""The real Gemma 3 270M from its GGUF: a correct load, its tokenizer, LoRA that learns, and
exact round trips through the adapter and Hugging Face exports.

All tests share one load (``fixtures_real.real_270m``); together they take ~75 s of CPU on
2 cores, the load's ~7 s included (the LoRA test ~27 s: its train step's compile, 5 steps, 2 evals),
which is why they are marked slow: they are the only tests that show the workbench on real weights.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from adapters_lib import catalog
from adapters_lib.evals import perplexity

pytestmark = pytest.mark.slow

# 64 tokens with BOS and EOS, as GSM8K_STYLE: both scored 64 wide, as the LoRA test's eval file
# (``perplexity.eval_width``), so the float model's scorer compiles once for all of them
ENGLISH = ("The old lighthouse stood at the edge of the cliff, its white paint peeling after "
           "decades of storms. Every evening the keeper climbed the narrow stairs to light the "
           "lamp, and every morning he wrote a note in the logbook about the weather, the "
           "ships that passed, and the birds that nested on the rocks.")
GSM8K_STYLE = ("Question: A baker makes 24 muffins and sells 3 boxes of 6 muffins. How many "
               "muffins are left?\nAnswer: The boxes hold 3 * 6 = 18 muffins. 24 - 18 = 6 "
               "muffins are left. The answer is 6.")
CORPUS = [
    "The capital of France is", "<start_of_turn>user\nhi<end_of_turn>\n",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n", "\t\tdeeply\t\tindented\ttabs\n",
    "a    b     c      d", "  two leading spaces", "trailing spaces   ", " ", "  ", "\n", "\n\n\n",
    "line one\nline two\n\nline four\r\nwindows line", "héllo wörld — naïve café, ½ ① ﬁ",
    "日本語のテキストと中文的文本 한국어 텍스트", "emoji 🚀🎉👩‍💻 and ✓ ✗ → ∑ ∫ √", "Ελληνικά και русский текст",
    "x = [1, 2, 3]; print(x[0] ** 12345 / 3.14159)", "SELECT * FROM users WHERE id = 42;",
    "<html><body><h1>Title</h1><p>text</p></body></html>", "http://example.com/a?b=c&d=e#f",
    "1234567890 0.000001 -42 1e10 3,141,592", "CamelCaseIdentifier snake_case_name kebab-case",
    "\u00a0non-breaking\u3000ideographic space", "repeated!!!??? ... --- ___",
    "<start_of_turn>model\nAnswer: 42\nReason: it is.<end_of_turn>\n",
    "    # a comment after four spaces\n        return None  # eight",
] + [f"Sentence {i}: the {w} walked {i * 7} miles to see {i % 5} friends." for i, w in
     enumerate(["farmer", "child", "robot", "teacher", "poet", "sailor", "doctor", "cat"])]


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text + "\n")
    return path


def _shuffled(text: str, seed: int = 0) -> str:
    words = text.split()
    random.Random(seed).shuffle(words)
    return " ".join(words)


def test_the_starter_entry_meets_the_models_contract(real_270m):
    entry = catalog.resolve("starter:gemma-3-270m")
    assert (entry.format, entry.family, entry.size, entry.status, entry.quant) == \
        ("gguf", "gemma3", "270m", "ok", "Q4_K_M")
    assert abs(entry.params - 268_098_176) <= 0.01 * 268_098_176
    assert entry.tokenizer_pieces == entry.vocab_rows == 262_144 and not entry.tokenizer_mismatch
    assert real_270m.model.config.num_embed == 262_144


def test_perplexity_separates_english_from_its_shuffled_words(real_270m, tmp_path):
    m = real_270m
    scores = {}
    for name, text in (("english", ENGLISH), ("shuffled", _shuffled(ENGLISH)),
                       ("gsm8k", GSM8K_STYLE)):
        path = _write(tmp_path, f"{name}.txt", text)
        scores[name] = perplexity.evaluate_file(m.model, m.params, m.tokenizer, str(path)).perplexity
    assert scores["english"] < 80, scores       # a correct load: ~20-60; a broken map: thousands
    assert scores["gsm8k"] < 60, scores
    assert scores["shuffled"] > 400, scores
    assert scores["shuffled"] > 15 * scores["english"], scores


# The eval process reports its own peak: the kernel's VmHWM of its own address space, read
# by the process itself just before it exits. getrusage(RUSAGE_CHILDREN).ru_maxrss is not
# that: a child's maxrss starts from its parent's resident high-water mark (fork copies the
# page tables, and exec folds the old address space's peak into the child's), so it reported
# this pytest process (the shared 270M and everything the suite held before: 4.9 GB on CI)
# as the eval's. VmHWM counts file-backed pages too (jaxlib's shared objects, the memmapped
# GGUF): the number is everything the eval held resident at once, an upper bound.
_OWN_PEAK = ("import json, sys\n"
             "from workbench.cli import main\n"
             "try:\n"
             "    rc = main(sys.argv[1:])\n"
             "finally:\n"
             "    status = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
             "    sys.stderr.write('\\nOWN-PEAK ' + json.dumps({k: int(status[k].split()[0]) // 1024\n"
             "        for k in ('VmHWM', 'VmRSS', 'RssAnon', 'RssFile')}) + '\\n')\n"
             "sys.exit(rc)\n")


def test_eval_cli_in_a_fresh_process_stays_under_3_gb(real_270m, tmp_path):
    path = _write(tmp_path, "english.txt", ENGLISH)
    out = subprocess.run([sys.executable, "-c", _OWN_PEAK, "eval", "--in-process", "--model",
                          "starter:gemma-3-270m", "--data", str(path), "--json"],
                         capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(result) >= {"loss", "perplexity", "tokens"} and result["tokens"] > 50
    assert result["perplexity"] < 80
    mb = json.loads(out.stderr.rsplit("OWN-PEAK ", 1)[1].splitlines()[0])
    # Measured on 2 cores: VmHWM ~2.7 GB, of it ~1.0 GB file-backed (~1.8 GB anonymous).
    assert mb["VmHWM"] < 3 * 1024, f"load + eval peaked at {mb['VmHWM']} MB resident ({mb})"


def test_tokenizer_invariants_and_the_transformers_oracle(real_270m):
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING,
        convert_gguf_tokenizer,
    )

    from adapters_lib.models import starter
    from adapters_lib.models.gguf import open_reader

    tok = real_270m.tokenizer
    assert tok.encode("The capital of France is") == [818, 5279, 529, 7001, 563]
    assert tok.encode("<start_of_turn>user\nhi<end_of_turn>\n") == [105, 2364, 107, 2202, 106, 107]
    assert (tok.special_tokens.BOS, tok.special_tokens.EOS, tok.special_tokens.PAD) == (2, 1, 0)
    for text in CORPUS:
        assert tok.decode(tok.encode(text)) == text, repr(text)
    fields = open_reader(starter.ensure_starter(), header_only=True).fields
    vocab = {name: fields[f"tokenizer.{key}"].contents()
             for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
             if f"tokenizer.{key}" in fields}
    oracle, _ = convert_gguf_tokenizer("gemma3", vocab)
    agree = [tok.encode(t) == oracle.encode(t, add_special_tokens=False).ids for t in CORPUS]
    assert all(agree), [t for t, ok in zip(CORPUS, agree, strict=True) if not ok]


def _logits(model, params, ids):
    return np.asarray(model.apply({"params": params}, jnp.asarray([ids])).logits[0], np.float32)


LORA_STEPS = 5


def test_a_short_lora_run_lowers_eval_loss_and_its_adapter_round_trips(
        shared_real_load, tmp_path, workbench_home):
    """``examples/real-270m.toml`` for LORA_STEPS steps: ``eval --run`` scores its checkpoint
    well below the base on the held-out eval file, and the adapter export reads back as the
    very arrays of that checkpoint (so the same logits on any input)."""
    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.train.loop import run_training
    from adapters_lib.tuned import export_run, load_adapter_model, load_checkpoint

    m = shared_real_load
    config = os.path.join(os.path.dirname(__file__), "..", "examples", "real-270m.toml")
    examples_eval = os.path.join(os.path.dirname(config), "answer-format", "eval.jsonl")
    # every other conversation of the example's eval file: 11, 3 batches of the scorer (22: 6)
    eval_file = _write(tmp_path, "eval.jsonl", "\n".join(open(examples_eval).read().splitlines()[::2]))
    # Short rows (the conversations are ~35-45 tokens), 2 per step and a constant rate: the
    # 262k-vocab logits dominate a step, so 4x fewer tokens is ~4x faster; the loss still falls
    # from ~3.9 to ~1.4 on the eval file in 8 steps (measured). float32 compute, not the
    # example's bfloat16: at 2 rows of 64 under the suite's XLA flags bf16 took more CPU (this
    # test 43 vs 37 s on 2 cores) and learned no better. Measured in LORA_STEPS = 5 (train.seed
    # 0, 1, 2), tuned/base on these 11: 0.38, 0.52, 0.30 (the assert asks < 0.7); on the other
    # 11: 0.40, 0.57, 0.38; on all 22: 0.39, 0.55, 0.34 (bf16: 0.39, 0.57, 0.34; bf16 in 4 steps:
    # 0.47, 0.59, 0.40). No eval split (eval_path "", eval_fraction 0: the same train rows): the
    # eval that counts is ``eval``'s below, and the trainer's eval on this model is the DPO
    # test's (test_dpo), so the run compiles no eval step of its own.
    cfg = load_config(config, [f"train.steps={LORA_STEPS}", "train.batch_size=2", "data.max_length=64",
                               'data.eval_path=""', "data.eval_fraction=0", 'train.compute_dtype="float32"',
                               'train.schedule="constant"', "train.warmup_steps=0",
                               f"train.checkpoint_every={LORA_STEPS}", "train.log_every=4",
                               "mesh.devices=1", f'run.dir="{tmp_path}"'])
    run = runs.create_run(cfg)
    result = run_training(cfg, run, hooks=default_hooks)
    assert result.state == "completed", result
    base = perplexity.evaluate_file(m.model, m.params, m.tokenizer, str(eval_file), max_length=64)
    tuned = perplexity.evaluate(run=str(run.path), data=str(eval_file))
    assert tuned.step == LORA_STEPS and tuned.tokens == base.tokens
    assert tuned.loss < 0.7 * base.loss, (base.loss, tuned.loss)  # the checkpoint's adapters matter

    _, _, trainable, _ = load_checkpoint(run, LORA_STEPS)  # what ``eval --run`` scored above
    export_run(run.path, "adapter", out=tmp_path / "adapter")
    again = load_adapter_model(str(tmp_path / "adapter"))
    # the round trip is exact: the same tree of the same arrays, so the same logits on any input
    assert jax.tree.structure(again.adapters) == jax.tree.structure(trainable)
    for got, want in zip(jax.tree.leaves(again.adapters), jax.tree.leaves(trainable), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_hf_export_of_the_dequantized_model_reloads_to_the_same_logits(real_270m, tmp_path):
    from adapters_lib.config import ModelSpec
    from adapters_lib.models import starter
    from adapters_lib.models.gguf import export_hf_from_gguf, gguf_arch, read_info
    from adapters_lib.models.loader import load_model

    info = read_info(starter.ensure_starter())
    folder = export_hf_from_gguf(info, gguf_arch.arch_from_gguf(info), tmp_path / "hf",
                                 tokenizer=real_270m.tokenizer_path)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["Gemma3ForCausalLM"] and config["vocab_size"] == 262_144
    entry = catalog.resolve(str(folder))
    assert (entry.format, entry.size, entry.status) == ("hf-safetensors", "270m", "ok")
    ids = [2, *real_270m.tokenizer.encode("def fibonacci(n):")]
    want = _logits(real_270m.model, real_270m.params, ids)
    reloaded = load_model(ModelSpec(source=str(folder)))
    np.testing.assert_array_equal(_logits(reloaded.model, reloaded.params, ids), want)
    del reloaded


def test_an_int8_270m_scores_english_as_the_float_model_does(real_270m, tmp_path):
    """The real 270M with its projections held as int8 (``models.quantize``, tile 64):
    perplexity of plain English within 1 % of the float model's, logits within 5 % (relative
    L2). The float params are kept (``donate`` off) for the rest of the session. (4 bits is
    measured, not tested: the starter's "float" weights are its GGUF's Q4_K/Q5_0 blocks
    dequantized, and a second 4-bit grid over them adds its error to theirs — nf4 1.42× this
    text's perplexity, 1.24× on held-out Shakespeare; see docs/quantization.md.)"""
    from adapters_lib.models import quantize

    m = real_270m
    path = str(_write(tmp_path, "english.txt", ENGLISH))
    ref = perplexity.evaluate_file(m.model, m.params, m.tokenizer, path).perplexity
    tokens = jnp.asarray([m.tokenizer.encode(ENGLISH[:400], add_bos=True)])
    ref_logits = m.model.apply({"params": m.params}, tokens).logits
    qmodel = quantize.with_quantized_base(m.model)
    params = quantize.quantize_params(m.params, "int8", config=m.model.config)
    got = perplexity.evaluate_file(qmodel, params, m.tokenizer, path).perplexity
    assert abs(got / ref - 1) < 0.01, (got, ref)
    logits = qmodel.apply({"params": params}, tokens).logits
    rel = float(jnp.linalg.norm(logits - ref_logits) / jnp.linalg.norm(ref_logits))
    assert rel < 0.05, rel


def test_the_starter_held_in_its_own_gguf_blocks_computes_the_f32_models_logits(real_270m):
    """``quantize = "gguf"`` on the real Q4_K_M starter: its Q8_0 (the table), Q5_0, Q4_K and
    Q6_K tensors stay in their blocks (int8 / uint4 + offset, f32 scales) — the K-quants exist
    only in a real file (gguf-py cannot write them) — and the forward gives exactly the logits
    of the f32-dequantized load, at about half the bytes of a bf16 base."""
    import qwix

    from adapters_lib.config import ModelSpec
    from adapters_lib.models import quantize
    from adapters_lib.models.loader import load_model

    held = load_model(ModelSpec(source="starter:gemma-3-270m", quantize="gguf"))
    leaves = jax.tree.leaves(held.params, is_leaf=lambda x: isinstance(x, qwix.QArray))
    kinds = {(str(x.qtype), x.bias is not None) for x in leaves if isinstance(x, qwix.QArray)}
    assert kinds == {("int8", False), ("uint4", True)}
    assert sum(isinstance(x, qwix.QArray) for x in leaves) == 1 + 18 * 5
    assert quantize.device_bytes(held.params) < 0.56 * quantize.device_bytes(real_270m.params) / 2
    ids = [2, *real_270m.tokenizer.encode("def fibonacci(n):")]
    np.testing.assert_allclose(_logits(held.model, held.params, ids),
                               _logits(real_270m.model, real_270m.params, ids), rtol=0, atol=1e-5)
    del held
