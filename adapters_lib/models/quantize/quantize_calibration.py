"""GPTQ's calibration (``models.quantize.quantize_gptq``): the rows of calibration text, the einsum
views GPTQ works in (a weight as rows × contracted columns, an input as positions × the same
columns), and every projection's ``H = XᵀX`` from one forward pass of the float base a row.

- ``calibration_rows``: ``CALIBRATION_ROWS`` rows of ``CALIBRATION_LENGTH`` tokens (BOS first)
  of ``[model] quantize_calibration``'s text (any ``[data] path``), each row consecutive
  records from one of ``CALIBRATION_ROWS`` places spread over the source.
- ``hessians``: a calibrating subclass of the model sows each gemma ``Einsum``'s ``XᵀX`` (and
  the tied table's, as the logits read it): gemma's ``nn.jit`` keeps one trace per class, so an
  interceptor around the plain class would meet a trace made without it and sow nothing.
"""

from __future__ import annotations

import functools
import string
from typing import Any

from adapters_lib.errors import WorkbenchError

CALIBRATION_ROWS = 64
CALIBRATION_LENGTH = 256
WHERE = "[model] quantize_calibration"
BOS = 2
"""Gemma's BOS id (every Gemma tokenizer's)."""


# --------------------------------------------------------------------------- einsum views


def _parse(eqn: str) -> tuple[str, str, str]:
    lhs, out = eqn.replace("...", "").split("->")
    x, w = lhs.split(",")
    return x, w, out


def contracted(eqn: str) -> str:
    """The weight's contracted axes' letters, in the weight's order."""
    x, w, out = _parse(eqn)
    return "".join(c for c in w if c in x and c not in out)


def as_matrix(eqn: str, w: Any) -> Any:
    """The weight as (kept axes, contracted axes) flattened: GPTQ's rows × columns."""
    import jax.numpy as jnp

    _, spec, _ = _parse(eqn)
    con = contracted(eqn)
    kept = "".join(c for c in spec if c not in con)
    m = jnp.einsum(f"{spec}->{kept}{con}", w)
    return m.reshape(-1, _size(m.shape[len(kept):]))


def from_matrix(eqn: str, m: Any, shape: tuple[int, ...], tiled_axis: int, tile: int) -> Any:
    """A (rows, columns) or (rows, columns / tile) array back to the weight's axis order
    (the scales: the tiled axis divided by ``tile``)."""
    import jax.numpy as jnp

    _, spec, _ = _parse(eqn)
    con = contracted(eqn)
    kept = "".join(c for c in spec if c not in con)
    dims = dict(zip(spec, shape, strict=True))
    if m.shape[1] != _size(dims[c] for c in con):
        dims[spec[tiled_axis]] //= tile
    m = m.reshape(*(dims[c] for c in kept), *(dims[c] for c in con))
    return jnp.einsum(f"{kept}{con}->{spec}", m)


def takes(eqn: str, shape: tuple[int, ...], axes: dict[int, int] | None) -> bool:
    """Whether GPTQ takes this weight: one tiled axis, the last contracted one."""
    if not axes or len(axes) != 1:
        return False
    _, spec, _ = _parse(eqn)
    con = contracted(eqn)
    (axis,) = axes
    return len(spec) == len(shape) and bool(con) and spec[axis] == con[-1]


def inputs_matrix(eqn: str, x: Any) -> Any:
    """The einsum's input as (positions, contracted features), features in the weight's order."""
    import jax.numpy as jnp

    xs, _, _ = _parse(eqn)
    con = contracted(eqn)
    rest = "".join(c for c in xs if c not in con)
    free = [c for c in string.ascii_letters if c not in xs]
    lead = "".join(free[:x.ndim - len(xs)])  # the "..." axes
    m = jnp.einsum(f"{lead}{xs}->{lead}{rest}{con}", x)
    return m.reshape(-1, _size(m.shape[m.ndim - len(con):])).astype(jnp.float32)


def _size(dims: Any) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


# --------------------------------------------------------------------------- calibration


def _texts(data: Any) -> list[str]:
    if isinstance(data, str):
        return [data] if data.strip() else []
    if isinstance(data, dict):
        return [t for v in data.values() for t in _texts(v)]
    if isinstance(data, (list, tuple)):
        return [t for v in data for t in _texts(v)]
    return []


def calibration_rows(source: str, tokenizer: Any, *, rows: int = CALIBRATION_ROWS,
                     length: int = CALIBRATION_LENGTH) -> list[list[int]]:
    """Up to ``rows`` rows of BOS + ``length - 1`` tokens of ``source``'s text, each from
    consecutive records starting at one of ``rows`` places spread evenly over it; one clear
    error when it has too little."""
    import numpy as np

    if not source:
        raise WorkbenchError('quantize_method = "gptq" needs calibration text', where=WHERE,
                             hint="name a data file or dataset, or set it in a run (its [data] path)")
    count, read = _records(source)
    body = length - 1
    starts = sorted({int(i) for i in np.linspace(0, count - 1, num=rows)}) if count else []
    out: list[list[int]] = []
    for start in starts:  # a row of consecutive records from each of ``rows`` places
        stream: list[int] = []
        at = start
        while len(stream) < body and at < count:
            for record in read(at, at + READ_AHEAD):
                for text in _texts(record):
                    stream.extend(tokenizer.encode(text + "\n"))
                if len(stream) >= body:
                    break
            at += READ_AHEAD
        if len(stream) >= 16:
            out.append([BOS, *stream[:body]])
    if not out:
        raise WorkbenchError(f"{source!r} holds too little text to calibrate GPTQ", where=WHERE,
                             hint='name a source with a few thousand tokens of text, or set '
                                  'quantize_method = "rtn"')
    return out


READ_AHEAD = 8
"""Records read at a time while a row fills (a dataset source is read only where rows start)."""


def _records(source: str) -> tuple[int, Any]:
    """(how many records ``source`` has, ``read(start, stop)`` → their data): a dataset
    (``hf:``/``tfds:``) is read a slice at a time, never whole; a file or folder is read once."""
    from adapters_lib.data.sources import is_dataset_ref, open_source

    if is_dataset_ref(source):
        opened = open_source(source, where=WHERE)
        return opened.num_rows, lambda a, b: [r.data for r in opened.read(a, b)]
    if source == "demo":
        from adapters_lib.models.demo_tasks import demo_splits

        records: list[Any] = demo_splits()[0]
    else:
        from adapters_lib.data.readers import read_path

        records = [r.data for r in read_path(source).records]
    return len(records), lambda a, b: records[a:b]


_EQUATIONS: dict[tuple[type, tuple[str, ...]], str] = {}
"""(calibrating class, weight path) → its einsum equation, noted when the class is traced
(gemma's ``nn.jit`` keeps that trace: a later call runs it without calling the Einsums)."""


TABLE_EQN = "...D,VD->...V"
"""The logits' einsum: the tied table read as the last projection (``Embedder.decode``)."""


def _interceptor(next_fun, args, kwargs, context):
    from adapters_lib.models.gemma_layers import einsum_classes, embedder_classes

    module = context.module
    if context.method_name == "__call__" and isinstance(module, einsum_classes()):
        eqn, x = args
        _sow(module, module.weight_name, eqn, x)
    elif context.method_name == "decode" and isinstance(module, embedder_classes()):
        _sow(module, "input_embedding", TABLE_EQN, args[0])
    return next_fun(*args, **kwargs)


def _sow(module: Any, name: str, eqn: str, x: Any) -> None:
    _EQUATIONS[(_tracing[-1], (*module.scope.path, name))] = eqn
    m = inputs_matrix(eqn, x)
    module.sow("gptq", name, m.T @ m, init_fn=lambda: 0, reduce_fn=lambda a, b: a + b)


_tracing: list[type] = []


@functools.cache
def _calibrating_class(cls: type) -> type:
    """``cls`` whose call sows each Einsum's ``XᵀX``: a class of its own, so gemma's
    ``nn.jit`` traces it apart from the model's plain calls (an interceptor around a call of
    ``cls`` itself would meet a trace made without it, and sow nothing)."""
    from flax import linen as nn

    def __call__(self, *args, **kwargs):  # noqa: N807
        _tracing.append(new_cls)
        try:
            with nn.intercept_methods(_interceptor):
                return super(new_cls, self).__call__(*args, **kwargs)
        finally:
            _tracing.pop()

    new_cls = type(f"{cls.__name__}Calibrating", (cls,), {"__call__": __call__, "__module__": cls.__module__})
    return new_cls


@functools.lru_cache(maxsize=4)
def _sown(model: Any) -> tuple[type, Any]:
    """(the calibrating class, the jitted ``(params, tokens) -> sown XᵀX``) of ``model``: made
    once a model, so that another load of the same base (another spec, a run's Compare after
    its training) traces and compiles its calibration pass no more."""
    import dataclasses

    import jax

    kwargs = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
              if f.init and f.name not in ("parent", "name")}
    cls = _calibrating_class(type(model))
    calibrating = cls(**kwargs)

    @jax.jit
    def one(params, tokens):
        _, state = calibrating.apply({"params": params}, tokens, mutable=["gptq"])
        return state["gptq"]

    return cls, one


def hessians(loaded: Any, rows: list[list[int]]) -> dict[tuple[str, ...], Any]:
    """``XᵀX`` of each gemma ``Einsum``'s input over ``rows`` (the float base), keyed by the
    weight's params path, with its einsum equation under ``path + ("eqn",)``."""
    import jax
    import jax.numpy as jnp

    cls, one = _sown(loaded.model)
    total: dict[tuple[str, ...], Any] = {}
    for row in rows:
        got = one(loaded.params, jnp.asarray([row], jnp.int32))
        for path, h in jax.tree_util.tree_flatten_with_path(got)[0]:
            key = tuple(str(getattr(k, "key", k)) for k in path)
            total[key] = total[key] + h if key in total else h
    eqns = {(*path, "eqn"): eqn for (c, path), eqn in _EQUATIONS.items() if c is cls and path in total}
    return {**total, **eqns}
