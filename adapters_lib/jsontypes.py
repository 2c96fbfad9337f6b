"""JSON and TOML values checked against type hints: the one coercer, and the base of typed
replies (``adapters_lib.config.checks`` uses it for the run config).

``coerce(value, type, key=, where=)`` checks one JSON value against a type hint (``bool``,
``int``, ``float``, ``str``, ``X | None``, ``list[X]``, ``tuple[X, ...]``, ``dict[str, X]``,
``Any``, ``Literal[...]``, an ``enum.Enum`` of strings or a ``Record`` class) and returns it in that type, or raises a
``WorkbenchError`` that names the key. Two strictnesses:

- ``strict=True`` (input from a user: API bodies, config files): a float must be finite, an
  integer must fit in 64 bits, an int given for a float becomes a float;
- ``strict=False`` (replies we read back): numbers are taken as they are (a diverged run's
  loss is NaN, and an integer stays an integer).

``Record`` is a frozen dataclass that reads and writes itself as a JSON object
(``from_json`` / ``to_json``). Keys it does not declare are kept in ``extra`` and written
back, so a reply from a newer engine (same API version, new optional keys) survives a
round trip through an older client. Pure Python: no JAX, no aiohttp, no textual.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import types
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from adapters_lib.errors import WorkbenchError

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
R = TypeVar("R", bound="Record")
record = functools.partial(dataclass, frozen=True, eq=False)
"""The decorator of every ``Record`` subclass (frozen; equality by JSON content)."""


def describe(typ: Any) -> str:
    """A type hint in words, for error messages ("an integer", "a list of strings")."""
    origin = get_origin(typ)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(typ) if a is not type(None)]
        return " or ".join(describe(a) for a in args) + " or null"
    if origin in (list, tuple):
        args = [a for a in get_args(typ) if a is not Ellipsis]
        inner = describe(args[0]) if args else "values"
        return "a list of " + _plural(inner)
    if origin is dict:
        args = get_args(typ)
        if len(args) == 2 and args[1] is str:
            return "a table of strings"
        return "a JSON object"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(typ))
    if isinstance(typ, type) and issubclass(typ, Record):
        return "a JSON object"
    if isinstance(typ, type) and issubclass(typ, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in typ)
    return {bool: "true or false", int: "an integer", float: "a number",
            str: "a string"}.get(typ, getattr(typ, "__name__", str(typ)))


def _plural(words: str) -> str:
    for one, many in (("an integer", "integers"), ("a number", "numbers"),
                      ("a string", "strings"), ("a JSON object", "JSON objects"),
                      ("true or false", "booleans")):
        if words == one:
            return many
    return words


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def coerce(value: Any, typ: Any, *, key: str, where: str | None = None,
           strict: bool = True, one_as_list: bool = False) -> Any:
    """``value`` (parsed JSON/TOML) as ``typ``; a ``WorkbenchError`` naming ``key`` if not.

    ``one_as_list``: a single string where a list of strings is expected becomes a list
    (config files: ``targets = "q"``).
    """
    if typ is Any:
        return value
    origin = get_origin(typ)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in get_args(typ):
            return None
        args = [a for a in get_args(typ) if a is not type(None)]
        if len(args) == 1:
            return coerce(value, args[0], key=key, where=where, strict=strict,
                          one_as_list=one_as_list)
        for arg in args:  # the first that fits (e.g. int | str)
            try:
                return coerce(value, arg, key=key, where=where, strict=strict)
            except WorkbenchError:
                continue
        raise _bad(value, typ, key, where)
    if typ is bool:
        if isinstance(value, bool):
            return value
        raise _bad(value, typ, key, where)
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                raise _bad(value, typ, key, where, f"got {value!r} (write it without a "
                                                   "decimal point)")
            raise _bad(value, typ, key, where)
        if strict and not INT_MIN <= value <= INT_MAX:
            raise _bad(value, typ, key, where, f"got a {_digits(value)}-digit number (more "
                                               "than 64 bits)")
        return value
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(value, typ, key, where)
        if not strict:
            return value
        if isinstance(value, int) and not INT_MIN <= value <= INT_MAX:
            raise _bad(value, typ, key, where, f"got a {_digits(value)}-digit number")
        if not math.isfinite(value):
            raise WorkbenchError(f"{key} is {value!r}; it must be a finite number", where=where)
        return float(value)
    if typ is str:
        if isinstance(value, str):
            return value
        raise _bad(value, typ, key, where)
    if origin is Literal:
        if value in get_args(typ) and type(value) in {type(a) for a in get_args(typ)}:
            return value
        raise _bad(value, typ, key, where)
    if origin in (list, tuple):
        if one_as_list and isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise _bad(value, typ, key, where)
        item = ([a for a in get_args(typ) if a is not Ellipsis] or [Any])[0]
        try:
            items = [coerce(v, item, key=f"{key}[{i}]", where=where, strict=strict)
                     for i, v in enumerate(value)]
        except WorkbenchError:
            if item in (str, int, float, bool):  # say it of the list, as before
                raise _bad(value, typ, key, where) from None
            raise
        return tuple(items) if origin is tuple else items
    if origin is dict or typ is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise _bad(value, typ, key, where)
        args = get_args(typ)
        if len(args) == 2 and args[1] is not Any:
            try:
                return {str(k): coerce(v, args[1], key=f"{key}.{k}", where=where, strict=strict)
                        for k, v in value.items()}
            except WorkbenchError:
                raise _bad(value, typ, key, where) from None
        return dict(value)
    if isinstance(typ, type) and issubclass(typ, Record):
        if isinstance(value, typ):
            return value
        return typ.from_json(value, where=where, key=key, strict=strict)
    if isinstance(typ, type) and issubclass(typ, enum.Enum):
        try:
            return typ(value)
        except ValueError:
            raise _bad(value, typ, key, where) from None
    raise AssertionError(f"unhandled type {typ!r} for {key}")


def _bad(value: Any, typ: Any, key: str, where: str | None, got: str = "") -> WorkbenchError:
    return WorkbenchError(f"{key} must be {describe(typ)}, {got or 'got ' + _shown(value)}",
                          where=where)


def _digits(value: int) -> int:
    """How many digits ``value`` has, without ``str()`` (refused beyond 4300 digits)."""
    return max(1, math.floor(abs(value).bit_length() * math.log10(2)) + 1)


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


@functools.cache
def _fields(cls: type) -> tuple[dataclasses.Field, ...]:
    return tuple(f for f in dataclasses.fields(cls) if f.name != "extra")


def to_jsonable(value: Any) -> Any:
    """A ``Record`` (or a list/dict of them) as plain JSON data."""
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


@record
class Record:
    """A frozen dataclass that is a JSON object on the wire.

    Subclasses declare their keys as fields (decorated ``@record``). ``from_json`` checks
    every declared key's type (missing keys take the field's default; a missing key without
    one is an error) and keeps the others in ``extra``; ``to_json`` writes both. Read a
    record by its attributes (``status.jax.ready``); two records are equal when they are of
    one type and say the same JSON.
    """

    extra: dict[str, Any] = field(default_factory=dict, kw_only=True, repr=False)
    """Keys this version does not declare (kept, and written back by ``to_json``)."""

    OPEN: ClassVar[bool] = True
    """Keep undeclared keys in ``extra`` (False: refuse them)."""

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.to_json() == other.to_json()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # equal by content, and frozen only shallowly

    @classmethod
    def from_json(cls: type[R], data: Any, *, where: str | None = None, key: str = "",
                  strict: bool = False) -> R:
        name = key or cls.__name__
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise WorkbenchError(f"{name} must be a JSON object, got {_shown(data)}",
                                 where=where)
        hints = type_hints(cls)
        values: dict[str, Any] = {}
        known = set()
        for f in _fields(cls):
            known.add(f.name)
            if f.name in data:
                values[f.name] = coerce(data[f.name], hints[f.name],
                                        key=f"{key}.{f.name}" if key else f.name,
                                        where=where, strict=strict)
            elif (f.default is dataclasses.MISSING
                  and f.default_factory is dataclasses.MISSING):
                raise WorkbenchError(f"{name} has no {f.name!r}", where=where)
        extra = {k: v for k, v in data.items() if k not in known}
        if extra and not cls.OPEN:
            raise WorkbenchError(f"unknown key {next(iter(extra))!r} in {name}", where=where)
        return cls(**values, extra=extra)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: to_jsonable(getattr(self, f.name)) for f in _fields(type(self))}
        for k, v in self.extra.items():
            out.setdefault(k, to_jsonable(v))
        return out

    def replace(self: R, **changes: Any) -> R:
        return dataclasses.replace(self, **changes)
