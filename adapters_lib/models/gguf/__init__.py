"""GGUF files (llama.cpp's format) read as a Gemma: header, architecture, tokenizer, weights.

- ``gguf_info``: what a file says about itself, as plain data without numpy or the ``gguf``
  package (the catalog's header cache reads it alone): ``GGUFInfo``, ``TensorInfo``,
  ``GGUFError``, ``info_to_json``, ``info_from_json``;
- ``gguf_file``: the header and tensor table read with llama.cpp's reader: ``read_info``,
  ``open_reader``, ``is_gguf``, ``split_shards``;
- ``gguf_arch``: the architecture from the metadata, llama.cpp's Gemma conventions undone:
  ``arch_from_gguf``, ``family_of``, ``gguf_names``, ``hf_name``, ``norm_offset``,
  ``SUPPORTED``; ``gguf_arch_e``: the same for Gemma 4 and Gemma 3n;
- ``gguf_tokenizer``: the SentencePiece ``tokenizer.model`` rebuilt from the vocabulary:
  ``tokenizer_for_gguf``, ``file_sha256``, ``TokenizerError``;
- ``gguf_weights``: the tensors dequantized into gemma params on the mesh, and a GGUF written
  as a Hugging Face folder: ``load_gguf_params``, ``export_hf_from_gguf``, ``TensorSource``,
  ``aligned``.

A GGUF base held in its own blocks is ``models.quantize``'s (``quantize_gguf``). The names
are imported on first use (``adapters_lib.lazy_face``): importing this package imports none of its
modules, so a cached header comes back without numpy.
"""

from typing import TYPE_CHECKING

from adapters_lib.lazy_face import lazy_face

if TYPE_CHECKING:
    from .gguf_arch import SUPPORTED as SUPPORTED
    from .gguf_arch import arch_from_gguf as arch_from_gguf
    from .gguf_arch import family_of as family_of
    from .gguf_arch import gguf_names as gguf_names
    from .gguf_arch import hf_name as hf_name
    from .gguf_arch import norm_offset as norm_offset
    from .gguf_file import is_gguf as is_gguf
    from .gguf_file import open_reader as open_reader
    from .gguf_file import read_info as read_info
    from .gguf_file import split_shards as split_shards
    from .gguf_info import GGUFError as GGUFError
    from .gguf_info import GGUFInfo as GGUFInfo
    from .gguf_info import TensorInfo as TensorInfo
    from .gguf_info import info_from_json as info_from_json
    from .gguf_info import info_to_json as info_to_json
    from .gguf_tokenizer import TokenizerError as TokenizerError
    from .gguf_tokenizer import file_sha256 as file_sha256
    from .gguf_tokenizer import tokenizer_for_gguf as tokenizer_for_gguf
    from .gguf_weights import TensorSource as TensorSource
    from .gguf_weights import aligned as aligned
    from .gguf_weights import export_hf_from_gguf as export_hf_from_gguf
    from .gguf_weights import load_gguf_params as load_gguf_params

__getattr__, __dir__ = lazy_face(__name__)
