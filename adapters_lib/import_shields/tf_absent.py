"""Where TensorFlow is not installed, gemma's model code still imports.

Two modules under gemma's model and tokenizer code run ``import tensorflow as tf`` at import
time without running TensorFlow there: ``kauldron.typing.array_types`` reads ``tf.Tensor`` to
build its TF array aliases, and ``gemma.gm.nn.vision._image`` uses ``tf.image`` only inside
image preprocessing, which text training never calls. On a machine without TensorFlow (a lean
TPU install) that import failed, and with it every gemma model: training, sampling and the
engine's ``/v1/estimate`` ("No module named 'tensorflow'").

``install()`` (``tf_deferred.install`` calls it when TensorFlow is not installed) lets just
those modules import: while one of them executes, ``tensorflow`` in ``sys.modules`` is a
stand-in whose ``Tensor`` is a placeholder class no object is an instance of; afterwards the
stand-in is gone again, so every other library still sees no TensorFlow (etils' ``is_tf``
checks, keras' optional TF paths, ``importlib.util.find_spec``). What those two modules hold is
the stand-in: a use of anything else raises ``ModuleNotFoundError`` saying TensorFlow is not
installed and what to do. keras-hub's six such modules (``KERAS_HUB_NAME_ONLY``) import the
same way, so the Keras route runs without TensorFlow too. What really needs TensorFlow (``tfds:`` data, the keras route's
TF paths, ``gm.ckpts``' kauldron trainer) fails as it would without this module.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
import types

NAME = "tensorflow"
KERAS_HUB_NAME_ONLY = frozenset({
    f"keras_hub.src.models.{m}" for m in (
        "gemma3.gemma3_causal_lm_preprocessor", "gemma3n.gemma3n_causal_lm_preprocessor",
        "gemma4.gemma4_causal_lm_preprocessor", "qwen3_5.qwen3_5_causal_lm_preprocessor",
        "qwen3_5.qwen3_5_image_converter", "qwen3_5.qwen3_5_video_converter")})
"""keras-hub 0.29's modules that ``import tensorflow`` unconditionally: ``import keras_hub`` runs
them (``keras_hub.layers``/``keras_hub.models``), and only their preprocessing calls use ``tf``.
The Keras route tokenizes with SentencePiece itself and never calls them; every other keras-hub
module imports TensorFlow inside ``try``/``except ImportError`` and sees it absent."""
NAME_ONLY_IMPORTERS = frozenset({"kauldron.typing.array_types", "gemma.gm.nn.vision._image"}) | KERAS_HUB_NAME_ONLY
"""The modules that import TensorFlow at import time and run none of it there."""

_lock = threading.Lock()
_FINDER: _NameOnlyFinder | None = None


class TensorPlaceholder:
    """Stands for ``tf.Tensor`` where TensorFlow is not installed: nothing is an instance of it."""


class TensorSpecPlaceholder:
    """Stands for ``tf.TensorSpec`` where TensorFlow is not installed."""


class _Absent(types.ModuleType):
    """The stand-in: ``Tensor``/``TensorSpec`` are placeholders; anything else says TensorFlow
    is not installed."""

    def __init__(self, importer: str):
        super().__init__(NAME, "TensorFlow is not installed (adapters_lib.import_shields.tf_absent)")
        self.__path__ = []
        self.__file__ = None
        self.Tensor, self.TensorSpec = TensorPlaceholder, TensorSpecPlaceholder
        self._importer = importer

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        raise ModuleNotFoundError(
            f"No module named 'tensorflow': tf.{name} (used by {self._importer}) needs TensorFlow, "
            "which is not installed; install it (pip install tensorflow) or use a path without it",
            name=NAME)


class _WithStandIn(importlib.abc.Loader):
    """Runs the real loader with the stand-in under ``tensorflow`` for the length of the
    module's own execution."""

    def __init__(self, loader: importlib.abc.Loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        stand_in = _Absent(module.__name__)
        placed = sys.modules.setdefault(NAME, stand_in) is stand_in
        try:
            self._loader.exec_module(module)
        finally:
            if placed and sys.modules.get(NAME) is stand_in:
                del sys.modules[NAME]

    def __getattr__(self, name: str):  # get_source, get_filename, …: tracebacks, inspect
        return getattr(self._loader, name)


class _NameOnlyFinder(importlib.abc.MetaPathFinder):
    """Finds a name-only importer as the other finders do, and wraps its loader."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in NAME_ONLY_IMPORTERS or NAME in sys.modules:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _WithStandIn(spec.loader)
                return spec
        return None


def install() -> bool:
    """Let the name-only importers import without TensorFlow (once; safe to call again).
    Returns whether this is in place."""
    global _FINDER
    with _lock:
        if _FINDER is None:
            _FINDER = _NameOnlyFinder()
            sys.meta_path.insert(0, _FINDER)
        return True


def is_installed() -> bool:
    return _FINDER is not None
