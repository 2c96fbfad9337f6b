"""Single-stream decode at the Gemma 4 E2B shape (random bf16 weights): our sampler's programs.

vLLM-TPU publishes 144 tok/s for Gemma 4 E2B (bf16, one stream, v5e-1). This runs the
workbench's own prefill and decode (``sample.program.Program``: the chunked ``lax.while_loop``
that Compare and ``sample`` stream through, ``DECODE_CHUNK`` tokens a device call, greedy)
on one prompt, the base model only (no adapters), and reports tokens per second after the
first token, and the compile and prefill seconds apart.

    python -m bench.decode_e2b --out DIR            # the E2B shape, on the chip (< 3 min)
    python -m bench.decode_e2b --tiny --out DIR     # a tiny Gemma 4 E-model, on a CPU

The weights are random (the E2B per-layer table alone is ~4.7 GB in bf16; every weight ~10
GB): made on the device leaf by leaf, the largest leaves tiled from a random block (an f32
draw of the table would not fit a 16 GiB chip). End tokens are none (random weights would
stop anywhere), so every run decodes exactly ``--tokens``. Writes ``DIR/decode_e2b.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench.outdir import default_out

VLLM_TPU_TOK_S = 144.0
"""vLLM-TPU's published single-stream decode of Gemma 4 E2B (bf16, v5e-1)."""
BIG = 1 << 27
"""Leaves with more elements than this are tiled from a random block (no f32 copy)."""


def _log(*parts: Any) -> None:
    print("[decode_e2b]", *parts, file=sys.stderr, flush=True)


def e2b_model(tiny: bool = False) -> Any:
    """The text-only Gemma 4 E2B model (bf16 compute); ``tiny``: 2 layers of its kind."""
    import jax.numpy as jnp

    from adapters_lib.models import families

    _, arch = families.KNOWN[("gemma4", "e2b")]
    if tiny:
        arch = dataclasses.replace(arch, num_layers=5, embed_dim=64, hidden_dim=128, num_heads=2,
                                   head_dim=32, vocab_size=512, attention=arch.attention[:5],
                                   per_layer_input_dim=16, kv_shared_layers=2, kv_shared_ffw_hidden=256,
                                   global_head_dim=64)
    return families.model_class(arch)(dtype=jnp.bfloat16)


def random_params(model: Any, dtype: str = "bfloat16") -> Any:
    """Random weights in ``dtype`` on the device, one small program a leaf shape; a leaf over
    ``BIG`` elements is a random block tiled along its first axis (one buffer of its size)."""
    import jax
    import jax.numpy as jnp

    shapes = jax.eval_shape(lambda r: model.init(r, jnp.zeros((1, 8), jnp.int32))["params"], jax.random.key(0))
    leaves, tree = jax.tree.flatten(shapes)
    keys = jax.random.split(jax.random.key(0), len(leaves))

    @jax.jit
    def _draw(k, like):
        return (jax.random.normal(k, like.shape, jnp.float32) * 0.02).astype(dtype)

    def make(k, leaf):
        shape = tuple(leaf.shape)
        reps = next((r for r in (64, 32, 16, 8) if shape[0] % r == 0), 0)
        if leaf.size <= BIG or not reps:
            return _draw(k, jax.ShapeDtypeStruct(shape, jnp.float32))
        block = _draw(k, jax.ShapeDtypeStruct((shape[0] // reps, *shape[1:]), jnp.float32))
        return jax.jit(lambda b: jnp.tile(b, (reps,) + (1,) * (len(shape) - 1)))(block)

    return jax.tree.unflatten(tree, [make(k, s) for k, s in zip(keys, leaves, strict=True)])


def measure(model: Any, params: Any, *, prompt_len: int, tokens: int, chunk: int) -> dict[str, Any]:
    """Prefill ``prompt_len`` tokens, then decode ``tokens`` more, one stream; the seconds."""
    import jax
    import numpy as np

    from adapters_lib.sample.program import Program
    from adapters_lib.sample.sampler import _inputs
    from adapters_lib.sample.settings import SamplingSettings

    program = Program(model, None, end_tokens=(-1,), forbidden=(), cache_dtype="bfloat16")
    settings = SamplingSettings(max_new_tokens=tokens)
    ids = [[[2] + [(7 * i + 11) % int(model.config.num_embed) for i in range(prompt_len - 1)]]]
    inputs, scalars, cache_len = _inputs(ids, settings, False)

    def run() -> tuple[float, float, int]:
        t0 = time.perf_counter()
        state = program.prefill(params, {}, *inputs, *scalars[1:], cache_len=cache_len, variants=1)
        decode = program.decoder(params, {}, state, *scalars, chunk=chunk)
        jax.block_until_ready(state["last"])
        first = time.perf_counter()
        made = 1
        while made < tokens:
            state, out = decode(params, {}, state, *scalars)
            made += int((np.asarray(out).max(axis=(1, 2)) >= 0).sum())
        jax.block_until_ready(state["last"])
        return first - t0, time.perf_counter() - first, made

    t0 = time.perf_counter()
    cold_first, _, _ = run()  # compiles the prefill and the decode
    compile_s = time.perf_counter() - t0
    first_s, decode_s, made = run()
    return {"prompt_tokens": prompt_len, "new_tokens": made, "chunk": chunk, "cache_length": cache_len,
            "first_run_s": round(compile_s, 2), "first_token_cold_s": round(cold_first, 2),
            "first_token_s": round(first_s, 4), "decode_s": round(decode_s, 3),
            "tokens_per_s": round((made - 1) / decode_s, 1) if decode_s > 0 else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.decode_e2b", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=default_out("decode_e2b"))
    p.add_argument("--tiny", action="store_true", help="a tiny Gemma 4 E-model (a CPU check)")
    p.add_argument("--tokens", type=int, default=0, help="new tokens (default 256; --tiny 24)")
    p.add_argument("--prompt", type=int, default=32, help="prompt tokens (default 32)")
    a = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from adapters_lib.import_shields import tf_deferred, trace_context

    tf_deferred.install()
    trace_context.complete()
    import jax

    from adapters_lib.sample.sampler import DECODE_CHUNK

    t0 = time.perf_counter()
    model = e2b_model(a.tiny)
    params = random_params(model)
    jax.block_until_ready(params)
    weights_s = time.perf_counter() - t0
    count = sum(x.size for x in jax.tree.leaves(params))
    _log(f"{count / 1e9:.2f} B random weights in {weights_s:.0f} s")
    row = {"measure": "single-stream decode, Gemma 4 E2B shape" + (" (tiny)" if a.tiny else ""),
           "params_b": round(count / 1e9, 3), "weights_s": round(weights_s, 1),
           **measure(model, params, prompt_len=a.prompt, tokens=a.tokens or (24 if a.tiny else 256),
                     chunk=DECODE_CHUNK),
           "vllm_tpu_tokens_per_s": VLLM_TPU_TOK_S, "device": str(jax.devices()[0].device_kind),
           "jax": jax.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if row["tokens_per_s"] and not a.tiny:
        row["vs_vllm_tpu"] = round(row["tokens_per_s"] / VLLM_TPU_TOK_S, 3)
    print(json.dumps(row), flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "decode_e2b.json").write_text(json.dumps(row, indent=1))
    _log(f"{row['tokens_per_s']} tok/s (vLLM-TPU {VLLM_TPU_TOK_S}); took {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
