"""Per-device memory estimate of one train step, before launch (pure: no jax, no weights).

``estimate(config, ...)`` works from a gemma ``TransformerConfig`` or anything with its fields
(num_embed, embed_dim, hidden_dim, num_heads, head_dim, num_kv_heads, attention_types), so it
sizes real Gemma models from their config alone. Terms, in bytes per device:

- ``weights``: the base weights in ``param_dtype``, each divided by the mesh axes the
  sharding rules put it on (``mesh.param_partition``: a dim an axis does not divide is
  replicated, so it is not divided); with ``quantize`` (``models.quantize``) the
  projections and the embedding table at their bits plus one ``param_dtype`` scale per
  tile, the norms in ``param_dtype``;
- ``compute_copy``: a ``compute_dtype`` copy of the weights when it differs from ``param_dtype``
  (a quantized base: of its float leaves, plus the largest projection dequantized, the one
  float weight alive at a time; the table is read a block of rows at a time);
- ``adapters``, ``gradients``, ``optimizer`` (AdamW: two moments per trainable param, in its
  dtype), ``accumulator`` (grad accumulation keeps a second gradient tree);
- ``activations``: what the backward pass keeps per layer (from B, L, D, F, heads), or, with
  remat, each block's input plus one block recomputed;
- ``logits``: the cross-entropy's working set, per sequence chunk (chunked) or whole;
- ``batch``: the token arrays and the attention mask.

A ``RunConfig``'s estimate, in the program its run trains in, is ``memory.run_estimate``'s.

The activation coefficients were measured against XLA's memory analysis of the compiled
step (``Steps.compiled_memory``) on the demo model and a second small shape; the test keeps
them within 15 %. ``verdict``: ``fits`` below 80 % of the device's memory, ``tight`` to 100 %,
``exceeds`` above.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from adapters_lib import mesh as mesh_lib
from adapters_lib.lora.shapes import config_field as _cfg
from adapters_lib.lora.shapes import lora_param_shapes, num_layers
from adapters_lib.models import families
from adapters_lib.models.quantize import quantize_layout as quantize_lib

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1}
FIT_FRACTION = 0.8

TERMS = ("weights", "compute_copy", "adapters", "gradients", "optimizer", "accumulator",
         "activations", "logits", "batch", "reference")


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per device, by term, and a verdict against the device's memory."""

    weights: int
    compute_copy: int
    adapters: int
    gradients: int
    optimizer: int
    accumulator: int
    activations: int
    logits: int
    batch: int
    reference: int = 0
    """A DPO reference's own weights: 0 for the base with the adapters off (the same params,
    no second copy), a reference run's adapters otherwise."""
    reference_note: str = ""
    device_bytes: int = 0
    """The device's memory (0 = unknown)."""
    trainable_params: int = 0
    total_params: int = 0

    @property
    def total(self) -> int:
        return sum(getattr(self, t) for t in TERMS)

    @property
    def fraction(self) -> float | None:
        return self.total / self.device_bytes if self.device_bytes else None

    @property
    def verdict(self) -> str:
        frac = self.fraction
        if frac is None:
            return "unknown"
        if frac < FIT_FRACTION:
            return "fits"
        return "tight" if frac <= 1.0 else "exceeds"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(total=self.total, fraction=self.fraction, verdict=self.verdict)
        return out

    def summary(self) -> str:
        parts = ", ".join(f"{t} {fmt_bytes(getattr(self, t))}" for t in TERMS if getattr(self, t))
        dev = f" of {fmt_bytes(self.device_bytes)} ({self.verdict})" if self.device_bytes else ""
        note = f"; {self.reference_note}" if self.reference_note else ""
        return f"{fmt_bytes(self.total)} per device{dev}: {parts}{note}"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


# --------------------------------------------------------------------------- params


def base_param_shapes(config: Any) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    """(path, shape) of every text-model param of a gemma config (vision tower excluded): the
    family's memory term (``Family.param_shapes``)."""
    return _family_of(config).param_shapes(config)


def _lora_shapes(config: Any, rank: int, targets: tuple[str, ...]) -> list:
    """The family's adapter shapes (Gemma 4: its own table), else the Gemma 2/3 closed form."""
    own = _family_of(config).lora_shapes
    return own(config, rank, targets) if own is not None else lora_param_shapes(config, rank, targets)


def _family_of(config: Any) -> Any:
    """The family record a config belongs to (Gemma 2/3's layout for a plain TransformerConfig)."""
    return families.family_of_config(config)


def _sharded_elems(shapes, sizes: Mapping[str, int], transpose: bool,
                   heads: Mapping[str, int]) -> tuple[int, int]:
    """(total elements, elements per device) of a list of (path, shape)."""
    total = per_dev = 0
    for path, shape in shapes:
        n = math.prod(shape)
        axes = mesh_lib.param_partition(path, shape, sizes, transpose_gating=transpose, heads=heads)
        div = math.prod(sizes[a] for a in axes if a is not None)
        total += n
        per_dev += -(-n // div)
    return total, per_dev


def _quantized_weights(shapes, sizes: Mapping[str, int], transpose: bool, heads: Mapping[str, int],
                       pb: int, cb: int, mode: str, tile: int, table: str = "auto") -> tuple[int, int]:
    """(weights, compute_copy) bytes per device of a base held as ``mode`` (``models.quantize``).

    ``mode = "gguf"`` is counted as int8 with an f32 scale per 32 (the file's 5-, 6- and 8-bit
    blocks; its 4-bit ones take less: an upper bound). A quantized embedding table is read a
    block of rows at a time (``TABLE_BLOCK_BYTES`` of f32 at most); any other weight is
    dequantized whole while its matmul runs."""
    scale_bytes = pb
    if mode == "gguf":
        mode, tile, scale_bytes = "int8", 32, 4
    weights = copy = largest = 0
    for path, shape in shapes:
        n = math.prod(shape)
        axes = mesh_lib.param_partition(path, shape, sizes, transpose_gating=transpose, heads=heads)
        dev = -(-n // math.prod(sizes[a] for a in axes if a is not None))
        held = quantize_lib.mode_of(path, mode, table)
        if held in quantize_lib.QUANTIZED and \
                quantize_lib.tiled_axes(path, shape, tile, transpose_gating=transpose) is not None:
            weights += quantize_lib.quantized_bytes((dev,), held, tile, scale_bytes=scale_bytes)
            table = path[0] == "embedder"
            largest = max(largest, min(dev * cb, quantize_lib.TABLE_BLOCK_BYTES) if table else dev * cb)
            continue
        weights += dev * pb
        copy += dev * cb if cb != pb else 0
    return weights, copy + largest


# --------------------------------------------------------------------------- activations

# Bytes kept per token per layer for the backward pass, in units of the compute dtype:
# ACT_D·D + ACT_QKV·(N + 2K)·H + ACT_F·F + ACT_LORA·(Σ adapter out dims); the attention
# scores keep ACT_S values per (query, key, local head). With remat each layer keeps its
# input (D values per token) plus REMAT_LAYER layers' working set during the recompute.
# Least-squares fit (non-negative, ACT_S fixed at 1) to XLA's memory analysis of the
# compiled step on CPU, 16 configs of two model shapes: within ±10 % except remat+bf16
# (+18 %) and full-FT remat on the second shape (+21 %), both over-estimates.
ACT_D = 19.4
ACT_QKV = 3.2
ACT_F = 4.0
ACT_S = 1.0
ACT_LORA = 1.05
REMAT_LAYER = 1.0
# The cross-entropy's working set, in f32 copies of one logits chunk [rows, chunk, V/tensor]:
# one chunk (no scan): the logits, their softmax, their gradient (fitted on the demo); a scan
# of rematerialised chunks keeps more alive at once (fitted on the Gemma 3 270M shape,
# B 4 × L 1024, bf16: with it the estimate is within 1 % with and without remat).
LOGITS_COPIES = 3.0
LOGITS_COPIES_SCAN = 6.9
# XLA:TPU (deviceless compile for a v5e = the chip's own figures, bench/memory_fit.py) fuses
# most of what XLA:CPU keeps, and its splash attention keeps no scores: per token and layer the
# train step (gate/up slot-major, train.variants.slot_major_mlp) keeps TPU_ACT_QKV·(N + 2K)·H +
# TPU_ACT_DF·(D + F) values; with remat, TPU_REMAT_INPUT·D per layer (the block inputs) and one
# such layer (the block recomputed). The cross-entropy by a kernel (a LoRA run without a
# soft-cap on a float table, its vocabulary not split over tensor: kernels.ce_flash) keeps no
# logits; XLA's chunked path holds TPU_LOGITS_COPIES f32 logits chunks at the backward's start
# without remat, TPU_LOGITS_COPIES_REMAT with it. Fitted on Gemma 3 270M and 1B, seq 2048,
# batches 4 and 8, bf16, LoRA r16, 2026-12-06 (docs/mesh-and-memory.md has the rows and their
# errors; the logits copies from the fit before the kernel, 2026-12-05).
TPU_ACT_QKV = 5.886
TPU_ACT_DF = 2.786
TPU_REMAT_INPUT = 1.854
TPU_LOGITS_COPIES = 3.6
TPU_LOGITS_COPIES_REMAT = 0.56
# A full fine-tune on an fsdp axis gathers weights (forward, backward) and gradients
# (before the reduce-scatter): about this many full copies (per tensor shard) at peak.
# Measured on one config (demo, 1×8×1); the least certain term.
FSDP_GATHER_COPIES = 3.3


CE_CHUNK_BYTES = 128 * 2**20
"""f32 logits per cross-entropy chunk on a CPU, and the least on an accelerator
(``ce_chunk_budget``'s CPU budget)."""

ATTENTION_GLOBAL_BLOCK = 128
"""Query block of the train step's block-sparse attention on global layers (``train/attention.py``)."""


def scored_keys(seq_len: int, window: int | None = None, global_block: int = ATTENTION_GLOBAL_BLOCK) -> float:
    """Mean keys scored per query by the train step's attention (``train.attention.block_sparse_attention``).

    A sliding-window layer scores ``2·window`` keys; a causal layer in blocks of ``global_block``
    about half of them; a sequence that does not split evenly scores all ``seq_len``.
    """
    if window is not None and window < seq_len and seq_len % window == 0:
        return float(2 * window)
    if seq_len > global_block and seq_len % global_block == 0:
        n = seq_len // global_block
        return seq_len * (n + 1) / (2 * n)
    return float(seq_len)


def _is_local(attention_type: Any) -> bool:
    return str(getattr(attention_type, "name", attention_type)).upper().endswith("LOCAL_SLIDING")


def estimate(config: Any, *, batch_size: int, seq_len: int, mesh_shape: tuple[int, int, int] = (1, 1, 1),
             lora_enabled: bool = True, lora_rank: int = 8,
             lora_targets: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down"),
             lora_dtype: str = "float32", param_dtype: str = "float32", compute_dtype: str = "float32",
             remat: bool = False, grad_accum: int = 1, chunked_ce: bool = True,
             ce_chunk_bytes: int = CE_CHUNK_BYTES, device_bytes: int = 0,
             quantize: str = "none", quantize_tile: int = 64, quantize_embedding: str = "auto",
             objective: str = "sft",
             reference: str = "base", platform: str = "cpu", lora_program: tuple[int, tuple] | None = None,
             ) -> MemoryEstimate:
    """Bytes per device of one train step of ``config`` (see the module docstring).

    ``batch_size`` is the global batch of one optimizer step; ``grad_accum`` splits it;
    ``mesh_shape`` is (data, fsdp, tensor), resolved. ``objective = "dpo"``: ``batch_size``
    pairs, two rows each (chosen, rejected), and the reference's forward (no activations
    kept; its weights are the base's with the adapters off, or a reference run's adapters).
    ``platform``: whose compiler the coefficients fit: ``cpu`` (also a GPU's) or ``tpu``.
    ``lora_program``: (rank, targets) of a LoRA family's program (``lora.family``): the device
    holds those adapters, gradients and optimizer state; the trainable count stays the run's.
    """
    pair_rows = 2 if objective == "dpo" else 1
    data, fsdp, tensor = mesh_shape
    sizes = {"data": data, "fsdp": fsdp, "tensor": tensor}
    transpose = bool(_cfg(config, "transpose_gating_einsum", True))
    heads = mesh_lib.heads_of(config)
    pb, cb, lb = DTYPE_BYTES[param_dtype], DTYPE_BYTES[compute_dtype], DTYPE_BYTES[lora_dtype]

    base_shapes = base_param_shapes(config)
    base_total, base_dev = _sharded_elems(base_shapes, sizes, transpose, heads)
    if quantize in (*quantize_lib.QUANTIZED, "gguf"):
        weights, compute_copy = _quantized_weights(base_shapes, sizes, transpose, heads, pb, cb,
                                                   quantize, quantize_tile, quantize_embedding)
    else:
        weights = base_dev * pb
        compute_copy = base_dev * cb if cb != pb else 0
    if lora_enabled:
        lora_total, lora_dev = _sharded_elems(_lora_shapes(config, lora_rank, tuple(lora_targets)),
                                              sizes, transpose, heads)
        if lora_program is not None:  # the family's padded adapters are what the device holds
            lora_targets = tuple(lora_program[1])
            _, lora_dev = _sharded_elems(_lora_shapes(config, lora_program[0], lora_targets), sizes, transpose, heads)
        adapters = lora_dev * lb
        trainable, trainable_dev, tb = lora_total, lora_dev, lb
        if cb != lb:
            compute_copy += lora_dev * cb
    else:
        adapters = 0
        trainable, trainable_dev, tb = base_total, base_dev, pb
    gradients = trainable_dev * tb
    optimizer = 2 * trainable_dev * tb
    accumulator = trainable_dev * tb if grad_accum > 1 else 0

    # activations, per device: the batch is split on data×fsdp, heads/MLP on tensor
    v, d, f = int(_cfg(config, "num_embed")), int(_cfg(config, "embed_dim")), int(_cfg(config, "hidden_dim"))
    n, h, k = int(_cfg(config, "num_heads")), int(_cfg(config, "head_dim")), int(_cfg(config, "num_kv_heads"))
    layers = num_layers(config)
    rows = max(1, pair_rows * batch_size // max(grad_accum, 1) // (data * fsdp))
    tokens = rows * seq_len
    n_loc = n // tensor if n % tensor == 0 else n
    k_loc = k // tensor if k % tensor == 0 else k
    f_loc = f // tensor if f % tensor == 0 else f
    v_loc = v // tensor if v % tensor == 0 else v
    lora_out = 0
    if lora_enabled:
        outs = {"q": n_loc * h, "k": k_loc * h, "v": k_loc * h, "o": d, "gate": f_loc, "up": f_loc, "down": d}
        lora_out = sum(outs[t] for t in lora_targets)
    # Gemma 3n carries its residual as AltUp's 4 streams (num_altup_inputs); the others as one
    streams = int(_cfg(config, "num_altup_inputs", 1) or 1) if _cfg(config, "use_altup", False) else 1
    per_layer = cb * tokens * (ACT_D * d * streams + ACT_QKV * (n_loc + 2 * k_loc) * h + ACT_F * f_loc
                               + ACT_LORA * lora_out)
    window = _cfg(config, "sliding_window_size")
    scores = [cb * ACT_S * rows * n_loc * seq_len * scored_keys(seq_len, window if _is_local(t) else None)
              for t in (_cfg(config, "attention_types") or ())] or [cb * ACT_S * rows * n_loc * seq_len**2] * layers
    tpu = platform == "tpu"
    if tpu:  # see TPU_ACT_QKV
        per_layer = cb * tokens * (TPU_ACT_QKV * (n_loc + 2 * k_loc) * h + TPU_ACT_DF * (d * streams + f_loc))
        activations = (cb * tokens * TPU_REMAT_INPUT * layers * d * streams + per_layer if remat
                       else layers * per_layer)
    elif remat:
        activations = layers * cb * tokens * d * streams + REMAT_LAYER * (per_layer + max(scores))
    else:
        activations = layers * per_layer + sum(scores)

    if not lora_enabled and fsdp > 1:  # gathered weights and gradients, see FSDP_GATHER_COPIES
        activations += FSDP_GATHER_COPIES * base_dev * fsdp * pb

    chunk = seq_len
    if chunked_ce:
        chunk = max((c for c in range(1, seq_len + 1)
                     if seq_len % c == 0 and rows * c * v_loc * 4 <= ce_chunk_bytes), default=1)
    copies = LOGITS_COPIES if chunk == seq_len else LOGITS_COPIES_SCAN
    if tpu:  # the step's kernel cross-entropy keeps no logits (a LoRA run; DPO's per-row sums: XLA)
        table_quantized = quantize in (*quantize_lib.QUANTIZED, "gguf") and quantize_embedding != "none"
        kernel = lora_enabled and objective != "dpo" and kernel_ce_why_not(
            _cfg(config, "final_logit_softcap"), d, v, tensor, table_quantized) is None
        copies = 0.0 if kernel else TPU_LOGITS_COPIES_REMAT if remat else TPU_LOGITS_COPIES
    logits = int(copies * rows * chunk * v_loc * 4)

    # batch: five [B, L] int32/f32 arrays (the whole step's batch) and the [b, L, L] mask
    batch = 5 * 4 * (pair_rows * batch_size // (data * fsdp)) * seq_len + rows * seq_len * seq_len
    ref_bytes, ref_note = 0, ""
    if objective == "dpo":
        if reference == "base":
            ref_note = "DPO reference: the base with the adapters off (no second copy, 0 B)"
        else:
            ref_bytes = adapters
            ref_note = f"DPO reference: {reference}'s adapters ({fmt_bytes(ref_bytes)})"

    return MemoryEstimate(
        weights=int(weights), compute_copy=int(compute_copy), adapters=int(adapters),
        gradients=int(gradients), optimizer=int(optimizer), accumulator=int(accumulator),
        activations=int(activations), logits=logits, batch=int(batch), reference=int(ref_bytes),
        reference_note=ref_note, device_bytes=int(device_bytes),
        trainable_params=int(trainable), total_params=int(base_total + (trainable if lora_enabled else 0)),
    )


KERNEL_CE_LANE = 128


def kernel_ce_why_not(softcap: float | None, dim: int, vocab: int, tensor: int,
                      table_quantized: bool) -> str | None:
    """Why the cross-entropy kernels (``kernels.ce_splash.KERNELS``) cannot serve a run's steps
    (None: they may), from what the model and the mesh decide: the train step's rule
    (``ce_splash.why_not_run``) and the estimate's (no logits kept), in one place."""
    if softcap is not None:
        return f"final-logit soft-cap {softcap}"
    if table_quantized:
        return "a quantized embedding table"
    if dim % KERNEL_CE_LANE:
        return f"head dim {dim} not a multiple of {KERNEL_CE_LANE}"
    if tensor > 1 and vocab % tensor == 0:
        return f"vocabulary split over tensor={tensor}"
    return None


def ce_chunk_budget_for(platform: str, device_bytes: int) -> int:
    """The train step's f32 logits per cross-entropy chunk on a device of ``platform`` with
    ``device_bytes`` (``ce_chunk_budget``'s rule, for a chip named, not held)."""
    if platform == "cpu":
        return CE_CHUNK_BYTES
    # a TPU: 1/16 of its memory (v5e: ~1 GiB, 1,024 positions of a 262k vocabulary), so each
    # chunk's two passes over the [V, D] table are matmuls wide enough to be compute-bound
    # (at 1/64 the Gemma-3-1B step read the table 64 times a pass); a GPU: 1/64 (H200, measured)
    return max(CE_CHUNK_BYTES, device_bytes // (16 if platform == "tpu" else 64))


def ce_chunk_budget(device: Any = None) -> int:
    """Bytes of f32 logits per cross-entropy chunk on ``device`` (a ``jax.Device``; None: a
    CPU): 128 MiB on a CPU, else ``ce_chunk_budget_for`` its memory. Every chunk reads the whole
    ``[V, D]`` embedding table (forward, recompute, backward), so narrow chunks on a GPU are
    bound by that read, not by the matmul (an H200's Gemma-3-1B step: 285 ms at 16 positions
    a chunk, 256 ms at 128; bench/results/gpu-h200-ce128mib.json and gpu-h200-headline.json)."""
    platform = getattr(device, "platform", "cpu") if device is not None else "cpu"
    if platform == "cpu":
        return CE_CHUNK_BYTES
    try:
        limit = int((device.memory_stats() or {}).get("bytes_limit", 0))
    except Exception:  # noqa: BLE001 - a backend without memory stats keeps the CPU budget
        limit = 0
    return ce_chunk_budget_for(platform, limit)

