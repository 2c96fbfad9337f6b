"""Hugging Face names and files: the HF <-> gemma map, an ``Arch``'s HF layout, safetensors,
and Keras presets read under HF names.

- ``hf_convert``: HF safetensors <-> gemma param trees, exactly: ``hf_to_gemma``,
  ``gemma_to_hf``, ``leaf_plan``, ``gemma_shapes``, ``omitted``, ``save_hf``, ``export_hf``;
- ``hf_layout``: the HF tensor names and shapes of an ``Arch``, without numpy: ``hf_prefix``,
  ``hf_shapes``, ``check_hf_shapes``;
- ``safetensors_io``: the format with numpy alone: ``read_header``, ``read_tensor``,
  ``write_safetensors``, ``SafetensorsDir``, ``SafetensorsError``;
- ``keras_weights``: a Keras preset's tensors under their HF names, read with h5py (no
  keras): ``KerasPresetTensors``, ``hf_config``, ``preset_family``, ``read_preset_config``.

The GGUF route (``models.gguf``) and the Keras presets reach the gemma tree through this map.
The names are imported on first use (``adapters_lib.lazy_face``): importing this package imports
none of its modules.
"""

from typing import TYPE_CHECKING

from adapters_lib.lazy_face import lazy_face

if TYPE_CHECKING:
    from .hf_convert import export_hf as export_hf
    from .hf_convert import gemma_shapes as gemma_shapes
    from .hf_convert import gemma_to_hf as gemma_to_hf
    from .hf_convert import hf_to_gemma as hf_to_gemma
    from .hf_convert import leaf_plan as leaf_plan
    from .hf_convert import omitted as omitted
    from .hf_convert import save_hf as save_hf
    from .hf_layout import check_hf_shapes as check_hf_shapes
    from .hf_layout import hf_prefix as hf_prefix
    from .hf_layout import hf_shapes as hf_shapes
    from .keras_weights import KerasPresetTensors as KerasPresetTensors
    from .keras_weights import hf_config as hf_config
    from .keras_weights import preset_family as preset_family
    from .keras_weights import read_preset_config as read_preset_config
    from .safetensors_io import SafetensorsDir as SafetensorsDir
    from .safetensors_io import SafetensorsError as SafetensorsError
    from .safetensors_io import read_header as read_header
    from .safetensors_io import read_tensor as read_tensor
    from .safetensors_io import write_safetensors as write_safetensors

__getattr__, __dir__ = lazy_face(__name__)
