"""LoRA: adapters on a gemma model's chosen einsums and expert banks, their shapes, their
fusion into the base weights, and the compiled program's family.

- ``targeted`` — targeted LoRA through ``gemma.peft``: ``LoRAModel``, ``wrap``,
  ``split_lora``/``merge_lora``, ``count_params``; JAX;
- ``einsum`` — the adapted einsum (``TargetedLoRAEinsum``) and its layouts; JAX;
- ``traced_shapes`` — the adapters' shapes traced from the wrapped model (``adapter_shapes``) and
  fresh adapters in them (``init_lora``); JAX;
- ``experts`` — LoRA on a MoE expert bank (Gemma 4's ``experts`` target); JAX;
- ``fuse`` — adapters folded into the base weights and listed in PEFT terms (numpy only);
- ``family`` — one compiled program for a family of LoRA configs (rank bucket, masks);
- ``fresh`` — fresh adapters made on the host (numpy: no program compiled per rank);
- ``shapes`` — the adapters' shapes and count from a model config (arithmetic only).

Names are imported on first use (``adapters_lib.lazy_face``) (``from adapters_lib.lora import wrap`` imports JAX, ``from
adapters_lib.lora import lora_param_count`` does not): the TUI's LoRA form counts parameters
without JAX. Inside ``adapters_lib`` and ``workbench`` code imports the modules
(``from adapters_lib.lora import shapes``), so the import contracts see what it uses.
"""

from typing import TYPE_CHECKING

from adapters_lib.lazy_face import lazy_face

if TYPE_CHECKING:
    from .einsum import SLOT_MAJOR as SLOT_MAJOR
    from .einsum import TargetedLoRAEinsum as TargetedLoRAEinsum
    from .einsum import lora_in_out as lora_in_out
    from .experts import EXPERTS_PREFIX as EXPERTS_PREFIX
    from .experts import experts_param_count as experts_param_count
    from .family import LoraFamily as LoraFamily
    from .family import apply_runtime as apply_runtime
    from .family import family_targets as family_targets
    from .family import rank_bucket as rank_bucket
    from .family import run_family as run_family
    from .family import wants_family as wants_family
    from .fresh import init_adapters as init_adapters
    from .fuse import EXPERTS_KEY as EXPERTS_KEY
    from .fuse import LORA_PREFIX as LORA_PREFIX
    from .fuse import AdapterTensor as AdapterTensor
    from .fuse import fuse_experts as fuse_experts
    from .fuse import fuse_lora as fuse_lora
    from .fuse import iter_adapters as iter_adapters
    from .shapes import lora_param_count as lora_param_count
    from .shapes import lora_param_shapes as lora_param_shapes
    from .targeted import LoRAModel as LoRAModel
    from .targeted import count_params as count_params
    from .targeted import expected_lora_params as expected_lora_params
    from .targeted import kv_shared_layers as kv_shared_layers
    from .targeted import merge_lora as merge_lora
    from .targeted import split_lora as split_lora
    from .targeted import wrap as wrap
    from .traced_shapes import adapter_shapes as adapter_shapes
    from .traced_shapes import init_lora as init_lora

__getattr__, __dir__ = lazy_face(__name__)
