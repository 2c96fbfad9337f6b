"""GGUF round trip on the real Gemma 3 270M: a LoRA on the starter exported as ``gguf``
and ``gguf-lora``, run by llama.cpp, against the workbench's greedy tokens.

    PYTHONPATH=. python -m bench.gguf_roundtrip [--quant f32] [--out DIR]

Needs llama-cpp-python built by ``scripts/build_llama_cpp.sh`` (imported from its cache).
The adapter is a random LoRA (q, v, down; scale 0.02) so that the tuned model differs from
the base without a training run. Prints one JSON line per check.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench.outdir import default_out

PROMPTS = ["Write a haiku about the sea.", "def fibonacci(n):", "The three primary colours are"]


def greedy_workbench(tuned, ids_list, n, *, length=96):
    """The tuned model's first ``n`` greedy tokens per prompt (never stopping at the end
    token), one full causal forward a token in a ``length``-long buffer: the plainest decoder,
    to hold llama.cpp's against (also used by tests/test_export_gguf_llama.py)."""
    import jax

    apply, params = tuned.apply_fn("tuned")
    f = jax.jit(apply)
    positions = np.arange(length)[None]
    mask = np.tril(np.ones((1, length, length), bool))
    out = []
    for ids in ids_list:
        tokens = np.zeros((1, length), np.int32)
        tokens[0, :len(ids)] = ids
        cur, got = len(ids), []
        for _ in range(n):
            logits = np.asarray(f(params, tokens, positions, mask))
            got.append(int(np.argmax(logits[0, cur - 1])))
            tokens[0, cur] = got[-1]
            cur += 1
        out.append(got)
    return out


def greedy_llama(model, ids, n):
    model.reset()
    model.eval(list(ids))
    got = []
    for _ in range(n):
        got.append(int(model.sample(temp=0.0)))
        model.eval([got[-1]])
    return got


def prefix_share(a, b):
    same = 0
    for x, y in zip(a, b, strict=True):
        if x != y:
            break
        same += 1
    return same / len(a)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quant", default="f32")
    p.add_argument("--out", default=default_out("gguf_roundtrip"))
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--llama-cpp", default=str(Path.home() / ".cache/gemma-workbench/llama-cpp"))
    args = p.parse_args()
    sys.path.insert(0, args.llama_cpp)
    import llama_cpp

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from fixtures_generation import perturbed_lora

    from adapters_lib.config import LoraSpec, ModelSpec
    from adapters_lib.export.run import export_gemma
    from adapters_lib.models.loader import load_model
    from adapters_lib.sample.prompts import as_messages, format_chat, prompt_ids
    from adapters_lib.tuned.gemma import GemmaTuned

    t0 = time.perf_counter()
    source = "starter:gemma-3-270m"
    loaded = load_model(ModelSpec(source=source))
    spec = LoraSpec(rank=8, alpha=16.0, targets=("q", "v", "down"))
    tuned = GemmaTuned(loaded, lora=spec, adapters=perturbed_lora(loaded, spec, scale=0.02),
                       source=source)
    ids = [prompt_ids(loaded.tokenizer, as_messages(q)) for q in PROMPTS]
    want = greedy_workbench(tuned, ids, args.tokens)
    out = Path(args.out)
    merged = export_gemma(tuned, "gguf", out / f"gguf-{args.quant}", quant=args.quant, force=True)
    lora = export_gemma(tuned, "gguf-lora", out / "gguf-lora", quant="f32", force=True)
    print(json.dumps({"setup_s": round(time.perf_counter() - t0, 1),
                      "merged": merged["files"], "lora": lora["files"]}))
    kw = dict(n_ctx=256, n_batch=32, n_ubatch=32, n_threads=2, verbose=False)
    for name, model in (("merged-" + args.quant, llama_cpp.Llama(merged["files"][0]["file"], **kw)),
                        ("lora-over-starter", llama_cpp.Llama(lora["base_gguf"],
                                                              lora_path=lora["files"][0]["file"], **kw))):
        got = [greedy_llama(model, x, args.tokens) for x in ids]
        tok_equal = all(model.tokenize(format_chat(as_messages(q)).encode(), add_bos=True,
                                       special=True) == list(x) for q, x in zip(PROMPTS, ids, strict=True))
        print(json.dumps({"check": name, "equal_prompts": sum(g == w for g, w in zip(got, want, strict=True)),
                          "prompts": len(ids), "prefix_share": [prefix_share(g, w) for g, w in
                                                                zip(got, want, strict=True)],
                          "tokenization_equal": tok_equal}))


if __name__ == "__main__":
    main()
