"""TensorFlow imported when something uses it, not when gemma's model code is imported.

gemma's model modules import ``kauldron.typing``, which runs ``import tensorflow as tf`` and
reads ``tf.Tensor`` to define its TF array aliases; the gemma route never runs TensorFlow, yet
every process that imported gemma's model code paid its import (~4.5 s and ~700 MB of RSS on 2
cores). ``install()`` puts a stand-in
under the name ``tensorflow``; the first use beyond ``tf.Tensor`` (any other attribute, or a
``tensorflow.*`` submodule import) imports the real TensorFlow, with its native start-up lines
kept off the terminal, and the stand-in takes on the real module's namespace, so a ``tf`` name
held from before works as the real module from then on (``tf.Tensor`` included).

The one trade: an alias built from ``tf.Tensor`` before that moment (kauldron's ``TfArray``
family) holds a placeholder class that no object is an instance of. Nothing here hands
TensorFlow tensors to kauldron's type checks. The same goes for the three types etils'
``enp.lazy.is_tf`` reads once it sees ``tensorflow`` in ``sys.modules``: ``tf.TensorSpec``,
``tf.__internal__.types.Tensor`` and ``tensorflow.experimental.numpy.ndarray``. gemma's
``Tokenizer.decode`` asks ``is_array`` of every id list, so without them the first decoded
answer (a sample, an exact-match eval) imported TensorFlow (~5 s of CPU and ~700 MB of RSS
in every process that decodes; measured on 2 cores).

Installed by the processes that compute (the engine, its multi-host workers, a foreground CLI
command, ``python -m bench``, the test session), never by importing a module. Training, eval,
sampling and orbax checkpoints never need TensorFlow; ``gm.ckpts`` does (gemma's checkpoint
helpers import kauldron's trainer, whose clu TensorBoard writer builds TF protos at import), and
the engine resolves it on first use (``engine.devices.import_heavy``): processes that never
load orbax-format weights nor export the merged ``gemma`` format never import TensorFlow.
Where TensorFlow is not installed at all, ``install()`` hands over to ``tf_absent``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import threading
import traceback
import types

from adapters_lib.import_shields import tf_absent
from adapters_lib.import_shields.native_logs import fd2_silenced

NAME = "tensorflow"
_lock = threading.RLock()
_DUNDERS_THAT_LOAD = frozenset({"__version__", "__all__"})


class TensorPlaceholder:
    """Stands for ``tf.Tensor`` while TensorFlow is not imported: nothing is an instance of it."""


class _Deferred(types.ModuleType):
    """The stand-in module: ``Tensor`` is a placeholder; anything else imports TensorFlow."""

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__") and name not in _DUNDERS_THAT_LOAD:
            raise AttributeError(name)  # import machinery, inspect and module scanners ask these
        return getattr(_load(), name)

    def __dir__(self):
        return dir(_load())


class TensorSpecPlaceholder:
    """Stands for ``tf.TensorSpec`` while TensorFlow is not imported."""


class NdarrayPlaceholder:
    """Stands for ``tf.experimental.numpy.ndarray`` while TensorFlow is not imported."""


class _DeferredPart(types.ModuleType):
    """A stand-in for a part of TensorFlow (``tf.experimental``, ``tf.__internal__.types``):
    until TensorFlow is imported, the placeholders it was made with; anything else (and
    everything once TensorFlow is imported) from the real part, so a part held from before
    works as the real one."""

    def __init__(self, path: str, **placeholders):
        super().__init__(f"{NAME}.{path}")
        self.__path__ = []
        self._part, self._placeholders = path, placeholders

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if _REAL is None and name in self._placeholders:
            return self._placeholders[name]
        return getattr(_real_part(_load(), self._part), name)


def _real_part(real: types.ModuleType, path: str):
    obj = real
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


def _parts() -> dict[str, _DeferredPart]:
    """The stand-in's parts, by path: the types etils' ``enp.lazy.is_tf`` reads."""
    numpy = _DeferredPart("experimental.numpy", ndarray=NdarrayPlaceholder)
    types_ = _DeferredPart("__internal__.types", Tensor=TensorPlaceholder)
    return {"experimental": _DeferredPart("experimental", numpy=numpy), "experimental.numpy": numpy,
            "__internal__": _DeferredPart("__internal__", types=types_), "__internal__.types": types_}


class _ExistingModule(importlib.abc.Loader):
    """Hands the import system a submodule that importing TensorFlow itself already made (and
    gives it back its own spec, which the import system overwrote with this one's)."""

    def __init__(self, module: types.ModuleType):
        self.module, self.spec = module, getattr(module, "__spec__", None)

    def create_module(self, spec):
        return self.module

    def exec_module(self, module) -> None:
        if self.spec is not None:
            module.__spec__ = self.spec


class _Finder(importlib.abc.MetaPathFinder):
    """``import tensorflow.x`` while the stand-in is in place: import TensorFlow first."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(NAME + ".") or sys.modules.get(NAME) is not _STAND_IN:
            return None  # TensorFlow imported, or its own import running: its submodules are its business
        part = _PARTS.get(fullname[len(NAME) + 1:])
        if part is not None:  # ``import tensorflow.experimental.numpy as tnp`` (etils' is_tf)
            return importlib.machinery.ModuleSpec(fullname, _ExistingModule(part), is_package=True)
        real = _load()
        if fullname in sys.modules:  # TensorFlow's own import made it
            made = sys.modules[fullname]
            return importlib.machinery.ModuleSpec(fullname, _ExistingModule(made),
                                                  is_package=hasattr(made, "__path__"))
        parent = sys.modules.get(fullname.rpartition(".")[0], real)
        return importlib.machinery.PathFinder.find_spec(fullname, getattr(parent, "__path__", real.__path__))


_STAND_IN: _Deferred | None = None
_PARTS: dict[str, _DeferredPart] = {}
_REAL: types.ModuleType | None = None


def is_deferred() -> bool:
    """Whether the stand-in is installed and TensorFlow not yet imported."""
    return _STAND_IN is not None and _REAL is None


def _load() -> types.ModuleType:
    """Import the real TensorFlow (once), quietly, and give the stand-in its namespace."""
    global _REAL
    with _lock:
        if _REAL is not None:
            return _REAL
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        stand_in = sys.modules.get(NAME)
        if stand_in is _STAND_IN:
            del sys.modules[NAME]
        parts = {name: sys.modules.pop(name) for name in [f"{NAME}.{p}" for p in _PARTS]
                 if isinstance(sys.modules.get(name), _DeferredPart)}
        try:
            with fd2_silenced():
                real = importlib.import_module(NAME)
        except BaseException:
            if stand_in is _STAND_IN:
                sys.modules[NAME] = stand_in
            sys.modules.update(parts)
            raise
        _REAL = real
        if _STAND_IN is not None:
            _STAND_IN.__dict__.update(real.__dict__)
            logging.getLogger(__name__).info("TensorFlow imported on first use, by %s", _first_user())
        return real


def _first_user() -> str:
    """``file:line`` of the innermost frame outside the import system and this module."""
    for frame in reversed(traceback.extract_stack()):
        if not (frame.filename.startswith("<frozen") or frame.filename == __file__):
            return f"{frame.filename}:{frame.lineno}"
    return "?"


def install() -> bool:
    """Put the stand-in in place unless TensorFlow is imported already or not installed (then
    ``tf_absent`` lets gemma's model code import without it). Returns whether the stand-in is in
    place. Safe to call more than once."""
    global _STAND_IN
    with _lock:
        if _STAND_IN is not None:
            return is_deferred()
        if NAME in sys.modules:
            return False
        if importlib.util.find_spec(NAME) is None:
            tf_absent.install()
            return False
        stand_in = _Deferred(NAME, "TensorFlow, imported on first use (adapters_lib.import_shields.tf_deferred)")
        stand_in.__path__ = []
        stand_in.__spec__ = importlib.machinery.ModuleSpec(NAME, None, is_package=True)
        stand_in.__file__ = None
        stand_in.Tensor = TensorPlaceholder
        stand_in.TensorSpec = TensorSpecPlaceholder
        _PARTS.update(_parts())
        stand_in.experimental = _PARTS["experimental"]
        stand_in.__internal__ = _PARTS["__internal__"]
        sys.modules[NAME] = stand_in
        sys.meta_path.insert(0, _Finder())
        _STAND_IN = stand_in
        return True


def preimport_quietly() -> None:
    """Import JAX with its load-time lines silenced, and defer TensorFlow to its first use
    (imported silenced too, by ``_load``)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with fd2_silenced():
        import jax  # noqa: F401
    install()
