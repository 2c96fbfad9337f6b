"""Every route of the engine's API × malformed values: a 4xx with a one-line error, never a 5xx,
and nothing made.

The routes and their fields come from the API's own table (``api.COMMANDS`` and each command's
type hints), so a route or a field added later is fuzzed too. For each field: values of the
wrong JSON type, integers past 64 bits, NaN and ±Infinity (raw JSON tokens, as a careless
client writes them), nesting past the parser's depth, and lists/objects inside a record field
(``messages``); for each route: an unknown key, a body that is not an object, a body that is not
JSON. Every value is refused while the body is parsed, before a handler runs: one engine
without JAX answers them all (``--no-warm``), in seconds, and no run is created.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator
from typing import Any, Literal, get_args, get_origin

import httpx
import pytest

from adapters_lib.engine import api
from adapters_lib.jsontypes import Record, type_hints

RUN = "fuzz-no-such-run"
"""Path parameters: a run that does not exist (a parsed request is then a 404, not a 5xx)."""
HUGE = "1" + "0" * 30
"""An integer of 31 digits: past 64 bits."""
DEEP = "[" * 3000 + "]" * 3000


@pytest.fixture(scope="module")
def engine(engine_factory):
    return engine_factory(args=["--no-warm"])


@pytest.fixture(scope="module")
def http(engine) -> Iterator[httpx.Client]:
    token = (engine.runtime / "engine.token").read_text().strip()
    transport = httpx.HTTPTransport(uds=str(engine.runtime / "engine.sock"))
    with httpx.Client(base_url="http://engine", transport=transport, timeout=60,
                      headers={"Authorization": f"Bearer {token}",
                               "Content-Type": "application/json"}) as client:
        yield client


def _base(typ: Any) -> Any:
    """``X | None`` → X."""
    if get_origin(typ) in (typing.Union, types.UnionType):
        args = [a for a in get_args(typ) if a is not type(None)]
        return args[0] if len(args) == 1 else typ
    return typ


def malformed(typ: Any) -> list[tuple[str, str]]:
    """(name, raw JSON) values a field of type ``typ`` must refuse."""
    typ = _base(typ)
    origin = get_origin(typ)
    wrong = {"a string": '"x"', "a number": "1.5", "a bool": "true", "a list": "[1]",
             "an object": '{"a": 1}', "null": "null"}
    if typ is bool:
        out = ["a string", "a number", "a list", "an object"]
    elif typ is int:
        out = ["a string", "a number", "a bool", "a list", "an object"]
    elif typ is float:
        out = ["a string", "a bool", "a list", "an object"]
    elif typ is str or origin is Literal:
        out = ["a number", "a bool", "a list", "an object"]
    elif origin in (list, tuple):
        out = ["a string", "a number", "an object"]
    elif origin is dict or typ is dict:
        out = ["a string", "a number", "a list"]
    elif typ is Any:
        out = []
    else:
        raise AssertionError(f"no malformed values for {typ!r}: extend the fuzz")
    values = [(name, wrong[name]) for name in out]
    if typ in (int, float):
        values += [("past 64 bits", HUGE), ("minus past 64 bits", "-" + HUGE)]
    if typ is float:
        values += [("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity")]
    if typ is not Any:
        values.append(("nested too deep", DEEP))
    if origin in (list, tuple):
        item = [a for a in get_args(typ) if a is not Ellipsis][0]
        if isinstance(item, type) and issubclass(item, Record):
            values += [(f"an item's {f.name} is {n}", f'[{{"{f.name}": {v}}}]')
                       for f in dataclasses.fields(item) if f.name != "extra"
                       for n, v in malformed(type_hints(item)[f.name])[:2]]
        elif item is str:
            values.append(("an item that is a number", "[1]"))
    return values


def _fields(cls: type[api.Command]) -> dict[str, Any]:
    hints = type_hints(cls)
    path = {f for f in cls.route.path.split("/") if f.startswith("{")}
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)
            if f.name != "extra" and "{" + f.name + "}" not in path}


def cases() -> list[tuple[str, str, str, str]]:
    """(id, method, path, raw body or query) for every route × malformed value. (An empty body
    or ``null`` is a valid request of defaults: never sent, it would create a run or stop the
    engine.)"""
    out = []
    for name, cls in sorted(api.COMMANDS.items()):
        method, path, source = cls.route
        url = api.PREFIX + path.replace("{run_id}", RUN).replace("{sweep_id}", "fuzz-sweep")
        if source == "query":  # a query carries text: every typed field takes a value it cannot read
            for field, typ in _fields(cls).items():
                if _base(typ) in (bool, int):
                    out.append((f"{name}?{field}=bad", method, f"{url}?{field}=not-a-value", ""))
            out.append((f"{name}?unknown", method, f"{url}?no_such_field=1", ""))
            continue
        for field, typ in _fields(cls).items():
            for what, raw in malformed(typ):
                out.append((f"{name}.{field} {what}", method, url, f'{{"{field}": {raw}}}'))
        out += [(f"{name} unknown key", method, url, '{"no_such_field": 1}'),
                (f"{name} body a list", method, url, "[1, 2]"),
                (f"{name} body not JSON", method, url, "{'single': quotes}"),
                (f"{name} body nested too deep", method, url, '{"a": ' + DEEP + "}")]
    return out


def test_every_route_refuses_every_malformed_value_in_one_line_and_makes_nothing(engine, http):
    before = sorted(p.name for p in (engine.home / "data").rglob("*") if p.is_dir())
    failures = []
    sent = set()
    for case, method, url, body in cases():
        sent.add(case.split(" ")[0].split(".")[0].split("?")[0])
        r = http.request(method, url, content=body.encode() if body else None)
        error = (r.json().get("error") or {}) if r.headers.get("content-type", "").startswith(
            "application/json") else {}
        message = str(error.get("message") or "")
        if not 400 <= r.status_code < 500 or not message or "\n" in message:
            failures.append(f"{case}: {r.status_code} {r.text[:200]!r}")
    assert failures == [], "\n".join(failures[:40]) + f"\n({len(failures)} in all)"
    assert sent == set(api.COMMANDS)  # every route was sent malformed values
    assert engine.client.status().api_version == api.API_VERSION  # still serving
    assert engine.client.list_runs() == []
    after = sorted(p.name for p in (engine.home / "data").rglob("*") if p.is_dir())
    assert after == before  # no run folder, no upload, nothing
