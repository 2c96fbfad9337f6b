"""On an accelerator JAX's persistent cache keeps no second copy of a program the store keeps
(``program_bytes.no_second_copy``): its write serialized the executable holding the GIL in the
middle of the steps beside the compile (the v5e's 1B: 4.66 s and 1.94 s between two steps),
where the store's own write waits for the steps' end. On a CPU it writes as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    import jax, jax.numpy as jnp
    from adapters_lib import program_bytes, program_store

    cache = Path(os.environ["JAX_COMPILATION_CACHE_DIR"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    program_store.enable(sys.argv[1])
    counts = {}
    for platform, scale in (("tpu", 3.0), ("cpu", 5.0)):  # another program each: no cache hit
        program_bytes.default_platform = lambda platform=platform: platform
        before = {p.name for p in cache.iterdir()}
        f = jax.jit(lambda x, s=scale: jnp.tanh(x * s) @ x.T)
        arg = jax.ShapeDtypeStruct((16, 16), jnp.float32)
        compiled = program_store.load_or_compile(f"probe-{platform}", ("probe", platform), lambda: f.lower(arg))
        program_store.flush()
        counts[platform] = {
            "jax_cache_new": len({p.name for p in cache.iterdir()} - before),
            "store": program_store.entry_path(f"probe-{platform}", ("probe", platform)).is_file(),
            "runs": float(compiled(jnp.eye(16))[0, 0]) != 0.0,
        }
    print(json.dumps(counts))
""")


def test_a_stored_program_is_not_copied_into_jaxs_cache_on_an_accelerator(tmp_path):
    cache, store = tmp_path / "jax-cache", tmp_path / "programs"
    cache.mkdir()
    env = {"JAX_COMPILATION_CACHE_DIR": str(cache), "JAX_PLATFORMS": "cpu", "GEMMA_WORKBENCH_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(store)], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts["tpu"]["jax_cache_new"] == 0 and counts["tpu"]["runs"]  # the store's copy only
    assert counts["cpu"]["jax_cache_new"] >= 1 and counts["cpu"]["runs"]  # a CPU: JAX's cache as before
    assert counts["tpu"]["store"] and counts["cpu"]["store"]  # each kept by the store
