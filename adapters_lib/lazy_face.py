"""A package's public names, imported on first use: gm's ``epy.lazy_api_imports``, without etils.

A package's ``__init__`` names its faces as gm's do, ``from .module import name as name``, under
``if TYPE_CHECKING:``, and ends with ``__getattr__, __dir__ = lazy_face(__name__)``: a name's
module is imported when the name is first read. Importing the package imports none of its
modules: the catalog reads a cached GGUF header through ``models.gguf`` without numpy, the
memory estimate reads ``models.quantize``'s layout without JAX. Readers, type checkers and
import-linter (which counts ``TYPE_CHECKING`` imports) see the imports as written, so the
contracts follow every module a face can reach.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from typing import Any


def faces(package: str) -> dict[str, tuple[str, str]]:
    """name -> (module, attribute): the ``if TYPE_CHECKING:`` imports of ``package``'s ``__init__``."""
    path = sys.modules[package].__file__
    assert path is not None
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom) and imp.level == 1 and imp.module:
                    for alias in imp.names:
                        out[alias.asname or alias.name] = (imp.module, alias.name)
    return out


def lazy_face(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: its faces, each imported on first use."""
    table: dict[str, tuple[str, str]] = {}

    def __getattr__(name: str) -> Any:
        if not table:
            table.update(faces(package))
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = table[name]
        value = getattr(importlib.import_module(f"{package}.{module}"), attribute)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        if not table:
            table.update(faces(package))
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__
