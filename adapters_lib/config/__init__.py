"""The run config (contract): TOML in, frozen validated specs out.

- ``run_config`` — ``RunConfig`` and its sections (``ModelSpec``, ``DataSpec``, ``LoraSpec``,
  ``MeshSpec``, ``TrainSpec``, ``RunSpec``, ``SweepSpec``), the vocabularies
  (``LORA_TARGETS``, ``SCHEDULES``, ``PROGRAMS`` …), ``load_config``, ``config_from_dict``,
  ``parse_override``, ``dumps_toml``;
- ``checks`` — where a key was set (``Where``, ``file:line [section] key``) and value ranges;
- ``paths`` — every path made absolute before anything reaches the engine;
- ``sweep`` — the ``[sweep]`` section's checks and ``grid_items``;
- ``backends`` — which options each backend (gemma, keras) accepts;
- ``toml`` — reading a config's TOML, every failure one line citing the file;
- ``model_defaults`` — the training defaults that depend on the model, each with its origin.

Importing the package is cheap (no JAX, no numpy): the TUI validates a config as it is typed.
The modules import each other by their module names, never through this ``__init__``.
"""

from adapters_lib.config import checks as checks
from adapters_lib.config.backends import check_backend_options as check_backend_options
from adapters_lib.config.run_config import ALL_LORA_TARGETS as ALL_LORA_TARGETS
from adapters_lib.config.run_config import BACKENDS as BACKENDS
from adapters_lib.config.run_config import DATA_FORMATS as DATA_FORMATS
from adapters_lib.config.run_config import DTYPES as DTYPES
from adapters_lib.config.run_config import EVAL_METRICS as EVAL_METRICS
from adapters_lib.config.run_config import LORA_TARGETS as LORA_TARGETS
from adapters_lib.config.run_config import PROGRAMS as PROGRAMS
from adapters_lib.config.run_config import QUANTIZE_METHODS as QUANTIZE_METHODS
from adapters_lib.config.run_config import QUANTIZE_MODES as QUANTIZE_MODES
from adapters_lib.config.run_config import SCHEDULES as SCHEDULES
from adapters_lib.config.run_config import SECTIONS as SECTIONS
from adapters_lib.config.run_config import DataSpec as DataSpec
from adapters_lib.config.run_config import LoraSpec as LoraSpec
from adapters_lib.config.run_config import MeshSpec as MeshSpec
from adapters_lib.config.run_config import ModelSpec as ModelSpec
from adapters_lib.config.run_config import RunConfig as RunConfig
from adapters_lib.config.run_config import RunSpec as RunSpec
from adapters_lib.config.run_config import SweepSpec as SweepSpec
from adapters_lib.config.run_config import TrainSpec as TrainSpec
from adapters_lib.config.run_config import config_from_dict as config_from_dict
from adapters_lib.config.run_config import dumps_toml as dumps_toml
from adapters_lib.config.run_config import load_config as load_config
from adapters_lib.config.run_config import parse_override as parse_override
from adapters_lib.config.toml import parse_toml as parse_toml
from adapters_lib.config.toml import read_toml as read_toml
