"""A generation copy's projection weights laid out for decoding: no weight copied per token.

Profiled on the real 270M (f32, A/B decode of 17 tokens, 2 cores): more than half of a decode
step was XLA:CPU copying every projection weight into the layout its dot reads
(``copy_bitcast_fusion`` of each ``q``/``kv``/``attn_vec``/``gating`` weight, inside the
decode loop: layout assignment runs after loop-invariant code motion, so the copy is made at
every token). A generation copy (``models.loader.load_model(generation_dtype=...)``: made once, kept)
holds those weights already transposed into that layout — ``Permuted`` leaves, the array and
its permutation — and the model reads them through an Einsum interceptor that applies the
einsum with the equation permuted alike (``permuted_eqn``): the same product, no copy left in
the loop (tests/test_decode_timing.py compiles the decode and looks).

``PERMS``: the layout XLA:CPU's dot asked for, per Gemma 2/3 einsum kind (read from the
compiled decode program's copies): the contracted axes first, in the order of the
activation's. Other families are not permuted (their weights stay as they are).

Leaves that are not ``Permuted`` (a quantized base's ``QArray``, the embedding table, the
norms) are read as before; ``standard(params)`` undoes the layout (an export of a model that
holds one).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

PERMS = {
    "q_einsum": (1, 0, 2),  # N D H → D N H        (BTD,NDH->BTNH)
    "kv_einsum": (0, 1, 3, 2),  # C K D H → C K H D  (BSD,CKDH->CBSKH)
    "attn_vec_einsum": (1, 0, 2),  # N H D → H N D   (BTNH,NHD->BTD)
    "gating_einsum": (2, 0, 1),  # C F D → D C F     (BTD,CFD->BTCF)
}
FAMILIES = ("gemma2", "gemma3")


def _pytree() -> type:
    import jax

    @jax.tree_util.register_pytree_node_class
    class Permuted:
        """A weight stored transposed: ``value = transpose(w, perm)``."""

        def __init__(self, value: Any, perm: tuple[int, ...]):
            self.value, self.perm = value, perm

        def tree_flatten(self):
            return (self.value,), self.perm

        @classmethod
        def tree_unflatten(cls, perm, children):
            return cls(children[0], perm)

        @property
        def shape(self) -> tuple[int, ...]:
            """The weight's own shape (what the module declares)."""
            return tuple(self.value.shape[self.perm.index(i)] for i in range(len(self.perm)))

        @property
        def dtype(self) -> Any:
            return self.value.dtype

    return Permuted


Permuted = functools.cache(_pytree)
"""``Permuted()`` is the leaf class (made once, when JAX is imported)."""


def permuted_eqn(eqn: str, perm: tuple[int, ...]) -> str:
    """``eqn`` with its second operand's labels permuted as the weight was."""
    lhs, rest = eqn.split(",", 1)
    rhs, out = rest.split("->", 1)
    return f"{lhs},{''.join(rhs[p] for p in perm)}->{out}"


def _perm_for(kind: str, shape: tuple[int, ...], config: Any) -> tuple[int, ...] | None:
    perm = PERMS.get(kind)
    if perm is None or len(shape) != len(perm):
        return None
    if kind == "gating_einsum" and shape[-1] != config.embed_dim:  # the (2, D, F) variant
        return (1, 0, 2) if shape[1] == config.embed_dim else None
    return perm


def permute(params: Any, config: Any, family: str) -> Any:
    """``params`` with the projection weights in the decode layout (new arrays; the others
    as they are). Only Gemma 2/3 (``FAMILIES``); anything else comes back unchanged."""
    import jax
    import jax.numpy as jnp

    if family not in FAMILIES:
        return params
    leaf_class = Permuted()

    def one(path: Any, x: Any) -> Any:
        names = [str(getattr(k, "key", k)) for k in path]
        kind = names[-2] if names[-1] == "w" and len(names) > 1 else names[-1]
        perm = _perm_for(kind, tuple(getattr(x, "shape", ())), config) if isinstance(x, jax.Array) else None
        if perm is None:
            return x
        return leaf_class(jnp.transpose(x, perm), perm)

    return jax.tree_util.tree_map_with_path(one, params)


def standard(params: Any) -> Any:
    """``params`` back in the model's own layout."""
    import jax
    import jax.numpy as jnp

    leaf_class = Permuted()

    def back(x: Any) -> Any:
        if isinstance(x, leaf_class):
            inverse = tuple(x.perm.index(i) for i in range(len(x.perm)))
            return jnp.transpose(x.value, inverse)
        return x

    return jax.tree.map(back, params, is_leaf=lambda x: isinstance(x, leaf_class))


def holds(params: Any) -> bool:
    import jax

    leaf_class = Permuted()
    return any(isinstance(x, leaf_class) for x in jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, leaf_class)))


def _interceptor(next_fun: Any, args: Any, kwargs: Any, context: Any) -> Any:
    import jax.numpy as jnp
    from gemma.gm.nn import _layers

    module = context.module
    if (context.method_name == "__call__" and isinstance(module, _layers.Einsum)
            and module.has_variable("params", module.weight_name)):
        w = module.get_variable("params", module.weight_name)
        if isinstance(w, Permuted()):
            eqn, x = args
            return jnp.einsum(permuted_eqn(eqn, w.perm), x, w.value)
    return next_fun(*args, **kwargs)


@functools.cache
def _layout_class(cls: type) -> type:
    from flax import linen as nn

    def __call__(self, *args, **kwargs):  # noqa: N807
        with nn.intercept_methods(_interceptor):
            return super(new_cls, self).__call__(*args, **kwargs)

    new_cls = type(f"{cls.__name__}DecodeLayout", (cls,), {
        "__call__": __call__, "__module__": cls.__module__, "_decode_layout": True})
    return new_cls


def with_decode_layout(model: Any) -> Any:
    """The same gemma Transformer, reading ``Permuted`` weights where its params hold them (a
    subclass: gemma's ``nn.jit`` keys traces on the module; inside the LoRA wrapper's
    interceptor, so a targeted einsum still gets its adapters)."""
    if getattr(type(model), "_decode_layout", False):
        return model
    kwargs = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
              if f.init and f.name not in ("parent", "name")}
    return _layout_class(type(model))(**kwargs)


def decode_copy(loaded: Any) -> Any:
    """A ``LoadedModel`` in the decode layout (its model reads it)."""
    family = getattr(loaded, "family", "")
    if family not in FAMILIES:
        return loaded
    return dataclasses.replace(loaded, params=permute(loaded.params, loaded.config, family),
                               model=with_decode_layout(loaded.model))
