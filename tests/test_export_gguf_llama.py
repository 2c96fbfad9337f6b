"""GGUF export checked by llama.cpp, an implementation no one here wrote.

llama-cpp-python is not a project dependency: ``scripts/build_llama_cpp.sh`` builds it from
its sdist into ``~/.cache/gemma-workbench/llama-cpp`` (``$GEMMA_WORKBENCH_LLAMA_CPP``
overrides); these tests import it from there and skip, saying so, when it is absent.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

LLAMA_CPP_DIR = Path(os.environ.get("GEMMA_WORKBENCH_LLAMA_CPP",
                                    Path.home() / ".cache" / "gemma-workbench" / "llama-cpp"))
PROMPTS = ["Is 133 even or odd?", "Say the first word: piano river stone",
           "Repeat: moon lamp"]
N_TOKENS = 16
Q8_MIN_AGREEMENT = 0.75
"""q8_0: at least this share of the first 16 greedy tokens equal (per prompt, up to the first
difference: a greedy path that forks once differs after)."""


@pytest.fixture(scope="module")
def llama_cpp():
    if not (LLAMA_CPP_DIR / "llama_cpp").is_dir():
        pytest.skip(f"llama-cpp-python is not built in {LLAMA_CPP_DIR}: run scripts/build_llama_cpp.sh")
    sys.path.insert(0, str(LLAMA_CPP_DIR))
    try:
        import llama_cpp
    except Exception as e:  # noqa: BLE001 - a broken build is a skip with its reason
        pytest.skip(f"llama_cpp in {LLAMA_CPP_DIR} does not import: {e}")
    return llama_cpp


@pytest.fixture(scope="module")
def tuned(trained_demo_run):
    from adapters_lib.tuned import load_run_model

    return load_run_model(trained_demo_run)


@pytest.fixture(scope="module")
def exported(trained_demo_run, tmp_path_factory):
    from adapters_lib.tuned import export_run

    out = tmp_path_factory.mktemp("gguf-llama")
    files = {}
    for fmt, quant in (("gguf", "f32"), ("gguf", "bf16"), ("gguf", "q8_0"), ("gguf-lora", "f32")):
        got = export_run(trained_demo_run, fmt, out=out / f"{fmt}-{quant}", quant=quant)
        files[(fmt, quant)] = [f["file"] for f in got["files"]]
    return files


@pytest.fixture(scope="module")
def prompt_ids(tuned):
    from adapters_lib.sample.prompts import as_messages, prompt_ids

    return [prompt_ids(tuned.loaded.tokenizer, as_messages(p)) for p in PROMPTS]


@pytest.fixture(scope="module")
def workbench_greedy(tuned, prompt_ids):
    """The tuned model's first 16 greedy tokens per prompt (never stopping at the end token)."""
    from bench.gguf_roundtrip import greedy_workbench

    return greedy_workbench(tuned, prompt_ids, N_TOKENS, length=64)


def _llama(llama_cpp, path, **kw):
    return llama_cpp.Llama(str(path), n_ctx=128, n_batch=32, n_ubatch=32, n_threads=2,
                           verbose=False, **kw)


def _greedy(model, ids):
    model.reset()
    model.eval(list(ids))
    got = []
    for _ in range(N_TOKENS):
        got.append(int(model.sample(temp=0.0)))
        model.eval([got[-1]])
    return got


def _agreement(a, b):
    same = 0
    for x, y in zip(a, b, strict=True):
        if x != y:
            break
        same += 1
    return same / len(a)


@pytest.mark.parametrize("quant", ["f32", "bf16"])
def test_llama_cpp_greedy_tokens_equal_the_tuned_models(llama_cpp, exported, prompt_ids,
                                                        workbench_greedy, quant):
    model = _llama(llama_cpp, exported[("gguf", quant)][0])
    got = [_greedy(model, ids) for ids in prompt_ids]
    assert got == workbench_greedy


def test_llama_cpp_q8_0_agrees_on_most_greedy_tokens(llama_cpp, exported, prompt_ids,
                                                     workbench_greedy):
    model = _llama(llama_cpp, exported[("gguf", "q8_0")][0])
    shares = [_agreement(_greedy(model, ids), want) for ids, want in zip(prompt_ids, workbench_greedy,
                                                                        strict=True)]
    assert min(shares) >= Q8_MIN_AGREEMENT, shares


def test_llama_cpp_lora_over_the_base_gguf_gives_the_tuned_tokens(llama_cpp, exported, prompt_ids,
                                                                 workbench_greedy):
    adapter, base = exported[("gguf-lora", "f32")]
    model = _llama(llama_cpp, base, lora_path=str(adapter))
    assert [_greedy(model, ids) for ids in prompt_ids] == workbench_greedy
    plain = _llama(llama_cpp, base)  # the adapter matters
    assert [_greedy(plain, ids) for ids in prompt_ids] != workbench_greedy


def test_llama_cpp_tokenizes_the_exported_file_like_the_workbench(llama_cpp, exported, tuned,
                                                                  prompt_ids):
    model = _llama(llama_cpp, exported[("gguf", "f32")][0], vocab_only=True)
    from adapters_lib.sample.prompts import codec_of

    codec = codec_of(tuned.loaded.tokenizer)  # user text as the workbench encodes it
    texts = ["Is 133 even or odd?", "  two spaces, a tab\tand\nnew lines\n\n", "12345 + 678 = ?",
             "def f(x):\n    return x * 2", "café naïve — ünïcode ☃", "<start_of_turn> in text"]
    got = [model.tokenize(text.encode(), add_bos=False, special=False) for text in texts]
    assert got == [list(ids) for ids in codec.encode_batch(texts)]
    assert 105 not in got[-1]  # a marker in user text stays text (CONTROL, as in training)
    # the chat prompt, its markers parsed as special tokens, is the workbench's prompt ids
    from adapters_lib.sample.prompts import as_messages, format_chat

    for prompt, ids in zip(PROMPTS, prompt_ids, strict=True):
        text = format_chat(as_messages(prompt))
        assert model.tokenize(text.encode(), add_bos=True, special=True) == list(ids), prompt


def test_the_files_chat_template_renders_the_workbench_prompt(llama_cpp, exported):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    from adapters_lib.sample.prompts import format_chat

    model = _llama(llama_cpp, exported[("gguf", "f32")][0], vocab_only=True)
    template = model.metadata["tokenizer.chat_template"]
    render = Jinja2ChatFormatter(template, eos_token="<eos>", bos_token="<bos>")
    for messages in ([{"role": "user", "content": "Is 5 even?"}],
                     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                      {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"}]):
        assert render(messages=messages).prompt == "<bos>" + format_chat(messages)
