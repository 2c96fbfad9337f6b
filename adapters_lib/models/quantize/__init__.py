"""The quantized frozen base (``[model] quantize``, ``quantize_method``): its layout, its
arrays, GPTQ and a GGUF's own blocks.

- ``quantize_layout``: which weights are quantized, their tiles and bytes, pure (no JAX: the
  memory estimate, the Models screen and the config checks read it): ``QUANTIZED``,
  ``BITS``, ``DEFAULT_TILE``, ``QARRAY_FIELDS``, ``tiled_axes``, ``mode_of``,
  ``quantized_bytes``, ``held_bytes``, ``arch_shapes``;
- ``quantized_base``: the loaded base's weights quantized where they lie, and the model that
  reads them: ``quantize_loaded``, ``quantize_params``, ``dequantize_params``,
  ``is_quantized``, ``device_bytes``, ``with_quantized_base``;
- ``qarray``: the quantized leaves and the table read a block of rows at a time:
  ``BlockQArray``, ``PackedQArray``, ``is_qarray``, ``dequantize``, ``take_rows``,
  ``vocab_logits``, ``vocab_times``;
- ``quantize_gptq``: GPTQ on calibration text: ``held_leaves``, ``gptq_weight``,
  ``quantize_weight``, ``PROGRESS``; ``quantize_calibration``: its text and Hessians:
  ``calibration_rows``, ``hessians``;
- ``quantize_gguf``: ``quantize = "gguf"``, a GGUF's own blocks on the device:
  ``load_gguf_blocks``, ``read_blocks``, ``FORMS``.

The names are imported on first use (``adapters_lib.lazy_face``): importing this package imports
none of its modules (``qarray`` imports JAX, flax and qwix).
"""

from typing import TYPE_CHECKING

from adapters_lib.lazy_face import lazy_face

if TYPE_CHECKING:
    from .qarray import BlockQArray as BlockQArray
    from .qarray import PackedQArray as PackedQArray
    from .qarray import dequantize as dequantize
    from .qarray import is_qarray as is_qarray
    from .qarray import take_rows as take_rows
    from .qarray import vocab_logits as vocab_logits
    from .qarray import vocab_times as vocab_times
    from .quantize_calibration import calibration_rows as calibration_rows
    from .quantize_calibration import hessians as hessians
    from .quantize_gguf import FORMS as FORMS
    from .quantize_gguf import load_gguf_blocks as load_gguf_blocks
    from .quantize_gguf import read_blocks as read_blocks
    from .quantize_gptq import PROGRESS as PROGRESS
    from .quantize_gptq import gptq_weight as gptq_weight
    from .quantize_gptq import held_leaves as held_leaves
    from .quantize_gptq import quantize_weight as quantize_weight
    from .quantize_layout import BITS as BITS
    from .quantize_layout import DEFAULT_TILE as DEFAULT_TILE
    from .quantize_layout import QARRAY_FIELDS as QARRAY_FIELDS
    from .quantize_layout import QUANTIZED as QUANTIZED
    from .quantize_layout import arch_shapes as arch_shapes
    from .quantize_layout import held_bytes as held_bytes
    from .quantize_layout import mode_of as mode_of
    from .quantize_layout import quantized_bytes as quantized_bytes
    from .quantize_layout import tiled_axes as tiled_axes
    from .quantized_base import dequantize_params as dequantize_params
    from .quantized_base import device_bytes as device_bytes
    from .quantized_base import is_quantized as is_quantized
    from .quantized_base import quantize_loaded as quantize_loaded
    from .quantized_base import quantize_params as quantize_params
    from .quantized_base import with_quantized_base as with_quantized_base

__getattr__, __dir__ = lazy_face(__name__)
