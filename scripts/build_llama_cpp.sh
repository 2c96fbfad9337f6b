#!/usr/bin/env bash
# Build llama-cpp-python from its sdist into a cache outside the repo (the llama.cpp oracle
# for tests/test_export_gguf_llama.py). Not a project dependency: the tests import it from
# the cache and skip (with the reason) when it is absent.
#   scripts/build_llama_cpp.sh            # ~8-15 min on 2 cores
# Env: PYTHON (default .venv/bin/python), LLAMA_CPP_VERSION (0.3.36),
#      GEMMA_WORKBENCH_CACHE (default ~/.cache/gemma-workbench).
# GGML_NATIVE=OFF: a native build (-march=native) crashed in llama_decode on batches over
# one token on these machines (STACK-NOTES); a portable build is the one the tests expect.
set -euo pipefail
PY=${PYTHON:-.venv/bin/python}
VER=${LLAMA_CPP_VERSION:-0.3.36}
CACHE=${GEMMA_WORKBENCH_CACHE:-$HOME/.cache/gemma-workbench}
WHEELS=$CACHE/llama-cpp-wheel
TARGET=$CACHE/llama-cpp
mkdir -p "$WHEELS"
if ! ls "$WHEELS"/llama_cpp_python-"$VER"-*.whl >/dev/null 2>&1; then
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}" \
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
    nice -n 5 "$PY" -m pip wheel --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$VER" -w "$WHEELS"
fi
# llama_cpp needs numpy, typing-extensions, diskcache, jinja2 at import; the venv has the
# first, second and fourth; --no-deps keeps the target to llama_cpp itself (+ diskcache).
"$PY" -m pip install --no-deps --upgrade --target "$TARGET" "$WHEELS"/llama_cpp_python-"$VER"-*.whl
"$PY" -m pip install --no-deps --upgrade --target "$TARGET" diskcache >/dev/null 2>&1 || true
echo "llama_cpp installed under $TARGET (add it to sys.path)"
