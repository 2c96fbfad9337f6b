"""Import stand-ins for packages that gemma's import chain names but the model never uses.

``from gemma import gm`` then ``gm.nn`` imports kauldron's trainer, which imports clu's
metric writers (TensorBoard, TensorFlow), tensorflow-datasets and OpenCV. A GPU machine
that has JAX but not TensorFlow (the device image this project benchmarks on) cannot
import ``gm.nn`` at all, although the transformer itself is pure JAX/Flax. ``install()``
puts a permissive stand-in module in front of each of those packages *that is not
installed*; an installed package is always used as is. Only ``python -m bench`` uses this,
and only when ``BENCH_STUB_MISSING=1`` (see ``bench/gpu_run.sh``).
"""

from __future__ import annotations

import abc
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

ROOTS = ("tensorflow", "tensorflow_datasets", "tensorflow_text", "keras", "cv2", "clu")
"""Top-level packages stood in for when missing: kauldron/gemma import them, the model uses none."""


class _Anything(abc.ABCMeta):
    """A class whose every attribute is another such class: subclassable, callable, subscriptable."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (), {})

    def __call__(cls, *args, **kwargs):
        return cls

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    def __ror__(cls, other):
        return cls

    def __iter__(cls):
        return iter(())

    def __bool__(cls) -> bool:
        return False


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (), {})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: set[str]):
        self.roots = roots

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        return None


def install(roots: tuple[str, ...] = ROOTS) -> list[str]:
    """Stand in for each of ``roots`` that cannot be imported; returns the ones stood in for."""
    missing = [r for r in roots if r not in sys.modules and importlib.util.find_spec(r) is None]
    if missing:
        sys.meta_path.insert(0, _Finder(set(missing)))
    return missing
