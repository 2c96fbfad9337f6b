"""Speed on a TPU, measured side by side in one run (``scripts/tpu_device.sh check NAME``).

``python -m bench.tpu_speed NAME [--out DIR] [--dry]``, NAME one of:

- ``speed``: the bf16 matmul peak; ours at the Gemma-3-1B shape (seq 2048, bf16, LoRA r16 on
  all targets, random weights and tokens): seconds a step, TFLOP/s, MFU against the chip's
  vendor peak, the compiled step's memory against the estimate; ours against the reference
  route (``bench.refs.RefGemmaTrainer``: ``gm.nn.LoRA`` + optax + ``jax.jit``) at the same
  batch, the two alternating; ``TPU_VARIANTS`` (comma-separated: ``blocked``, ``ce64``,
  ``barrier``, ``remat``, ``b8``, ``cexla``: XLA's chunked cross-entropy, ``cesplash``: the
  cross-entropy by JAX's splash kernel, both of which the project's kernel replaced on a TPU;
  ``gemmamlp``: gemma's own ``[B, T, 2, F]`` gate/up layout, ``variants.slot_major_mlp`` off)
  adds rows for the settings the defaults replaced; ``TPU_SPEED_REF`` (default ``2x1024``,
  empty: none) the shape of the rows against the reference route;
- ``ce``: the cross-entropy and its ∂hidden alone at that step's shape (8192 rows, the 262k
  vocabulary, D 1152): XLA's chunked path, the splash kernel, the project's kernel at each
  block size that fits (``TPU_CE_BLOCKS``, e.g. ``2048x256,1024x1024``), ms and TFLOP/s
  (``compile_s``: the first call, compile and run);
- ``first-step``: seconds from a new process to the first step's loss at that shape, twice:
  cold (empty compile cache and program store), then warm (what the first left); the warm
  process then launches twice more with its weights held, as the engine does: its kept
  programs, then the program store read back (``relaunch_kept_s``, ``relaunch_store_s``);
- ``ratio``: ours against the reference route at seq 2048 (``TPU_RATIO``, default ``2x2048``);
- ``big``: the Gemma-3-4B shape trained with LoRA on one chip (the largest batch the estimate
  fits at seq 2048);
- ``decode``: A/B decode at the 1B shape (base and tuned side by side, our batched sampler)
  against two plain ``gm.text.Sampler`` loops, tokens/s a side; needs a 262k-vocabulary
  tokenizer (``TOKENIZER``: the device script's bundle carries the real 270M's, rebuilt from
  its GGUF; default ``.tpu/extra/tokenizer.model``);
- ``behind``: ``Steps.compile_behind`` at the Gemma-3-270M shape (4 × 1024): a batch whose own
  program is not compiled yet (loss on its last quarter) runs in the compiled all-positions
  one while its own compiles in the background; the seconds its first call took (a step, not
  a compile), the steps run meanwhile, then its own program's step against the wide one's, and
  the first eval's seconds with the eval step compiled behind from the start;
- ``memory``: ``bench.memory_fit`` at the 1B shape (the estimate against XLA's compiled
  figures, batch 2/4/8, remat off and on).

``--dry``: the same code on this machine's CPU with the demo model's shape and short
sequences (a check that the script runs; its numbers mean nothing). Results: one JSON file a
measure in ``--out`` and a line a row on stdout.

One module a check (``speed``, ``ce``, ``first_step``, ``ratio``, ``big``, ``decode``, ``behind``,
``memory``), ``__main__`` the command; what they share: ``shapes`` (``DRY``, ``shape_model``,
``random_params``, the run config), ``train_point`` (ours at one point), ``results`` (rows and
files), ``chip`` (``PEAK_BF16_TFLOPS``, ``peak_of``).
"""

from bench.tpu_speed.chip import PEAK_BF16_TFLOPS as PEAK_BF16_TFLOPS
from bench.tpu_speed.chip import peak_of as peak_of
from bench.tpu_speed.shapes import random_params as random_params
from bench.tpu_speed.shapes import shape_model as shape_model
