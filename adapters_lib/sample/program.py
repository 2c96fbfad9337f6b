"""The compiled device functions of the sampler: prefill and a chunked decode loop.

A *variant* is one adapter set (a LoRA tree, or zero adapters for the base model): variants
sit on a leading axis that the model is ``vmap``-ed over, so the base weights are shared and
an A/B pair costs little more than one stream. Prompts are either shared by every variant
(``tokens [B, L]``: one prompt set, several models) or given per variant (``tokens [V, B, L]``:
each side of a multi-turn A/B has its own history); the shapes pick the mode at trace time,
and the shared mode is the program as it always was.

What compiles: one prefill a (prompt bucket, rows, variants, KV-cache length) and one decode
a (rows, variants, KV-cache length); nothing else is a shape. The sampling settings
(temperature, top-k, top-p, greedy or not) and ``max_new_tokens`` are runtime values: the
decode loop stops on device when ``step + 1 == max_new`` (a host-side limit in an int32), and
greedy or sampled is a ``lax.cond`` inside the one program. The buckets themselves are the
sampler's (``sampler.cache_length``). ``compile_ahead`` compiles a prefill and its decode
from abstract arguments (on the engine's compile thread): a call that needs them then waits
for that compile instead of starting its own, and one whose compile was dropped (its future
cancelled) compiles as it always did.
"""

from __future__ import annotations

import functools
from typing import Any

from adapters_lib.config import LoraSpec
from adapters_lib.import_shields import trace_context


class Program:
    """The compiled device functions for one (model, LoRA spec, stop tokens, dtype).

    Holds no weights: params and adapters are arguments, so one program (and its compiled
    executables) serves every Sampler of the same model, e.g. each checkpoint of a run.
    """

    def __init__(self, model: Any, spec: LoraSpec | None, end_tokens: tuple[int, ...],
                 forbidden: tuple[int, ...], cache_dtype: str, decodable: int = 0):
        import jax

        # before any program is traced (see trace_context); here, not at import: importing
        # adapters_lib.sample (e.g. its settings, in the CLI) must not load JAX
        trace_context.complete()

        from adapters_lib.lora import targeted as lora_lib

        self.model = model
        self.net = lora_lib.wrap(model, spec) if spec else model
        self.end_tokens = end_tokens
        self.forbidden = forbidden
        self.decodable = decodable
        """Ids from here on have embedding rows but no tokenizer piece: never emitted (0 = all)."""
        self.cache_dtype = cache_dtype
        self.traces: dict[str, int] = {"prefill": 0, "decode": 0}
        # what the programs depend on beside their arguments: the key of the program store
        # (``program_store``, on in the engine), which spares a new engine their tracing
        self.store_key = (type(model).__module__, type(model).__qualname__, repr(model), repr(spec),
                          end_tokens, forbidden, cache_dtype, decodable)
        self.prefill = _Stored(jax.jit(self._prefill_impl, static_argnames=("cache_len", "variants")),
                               "prefill", self.store_key)
        self.decode = jax.jit(self._decode_impl, static_argnames=("chunk",), donate_argnums=(2,))
        self._decoders: dict[tuple, Any] = {}
        self._pending: dict[tuple, Any] = {}
        """Decode programs compiling ahead (``compile_ahead``): their futures."""

    def decoder(self, base, lora, state, max_new, temperature, top_k, top_p, *, chunk):
        """The decode program compiled for these shapes (ahead of its first call, once per
        length bucket): the sampler compiles it while the prefill runs, so the first token's
        wait holds every compile and the decode rate none."""

        from adapters_lib import program_store

        args = (base, lora, state, max_new, temperature, top_k, top_p)
        key = (signature(args), chunk)
        _wait(self._pending.get(key))
        compiled = self._decoders.get(key)
        if compiled is None:
            compiled = program_store.load_or_compile(
                "decode", (self.store_key, key), lambda: self.decode.lower(*args, chunk=chunk))
            self._decoders[key] = compiled
        return compiled

    def compile_ahead(self, submit: Any, prefill_args: tuple, decode_scalars: tuple, *, cache_len: int,
                      variants: int, chunk: int) -> Any:
        """Compile the prefill for ``prefill_args`` (abstract params and adapters will do:
        ``jax.ShapeDtypeStruct`` with their shardings) and the decode for its output state,
        through ``submit(fn) -> Future`` (the engine's compile thread). Returns the future, or
        None when both are compiled already. ``decode_scalars``: (max_new, temperature, top_k,
        top_p) as the sampler passes them."""
        statics = {"cache_len": cache_len, "variants": variants}
        psig = self.prefill.key_of(prefill_args, statics)
        base, lora = prefill_args[:2]
        done = self.prefill.compiled.get(psig)
        if psig in self.prefill.pending or (done is not None and hasattr(done, "out_info") and (
                signature((base, lora, done.out_info, *decode_scalars)), chunk) in self._decoders):
            return None

        def work() -> None:
            import jax

            from adapters_lib import program_store

            prefill = self.prefill.ahead(prefill_args, statics)
            state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                                 prefill.out_info)  # the placement, not a fixed layout
            args = (base, lora, state, *decode_scalars)
            dkey = (signature(args), chunk)
            if dkey not in self._decoders:
                self._decoders[dkey] = program_store.load_or_compile(
                    "decode", (self.store_key, dkey), lambda: self.decode.lower(*args, chunk=chunk))

        future = submit(work)
        self.prefill.pending[psig] = future
        future.add_done_callback(lambda _f: self.prefill.pending.pop(psig, None))
        if future.done():  # done before it was noted
            self.prefill.pending.pop(psig, None)
        return future

    def _forward(self, base, lora, tokens, positions, mask, cache, last_only):
        from adapters_lib.lora import targeted as lora_lib

        params = lora_lib.merge_lora(base, lora) if lora else base
        net = self.net if lora else self.model  # no adapters: the plain model
        out = net.apply({"params": params}, tokens, positions=positions, attention_mask=mask,
                        cache=cache, return_last_only=last_only)
        return out.logits, out.cache

    def _vforward(self, base, lora, variants, tokens, positions, mask, cache, *, axes, last_only):
        """The model over ``variants`` adapter sets.

        ``axes``: for tokens, positions, mask and cache, 0 (a leading variant axis) or None
        (shared by every variant). The cache's ``end_index`` is never batched: a batched
        write index would turn every cache update into a scatter (3× slower decode on CPU).
        """
        import jax

        def one(lo, tok, pos, msk, c):
            return self._forward(base, lo, tok, pos, msk, c, last_only)

        layer_axes = {"k": 0, "v": 0, "positions": 0, "end_index": None}
        cache_axes = {name: layer_axes for name in cache}
        if getattr(self.model.config, "enable_moe", False):
            return self._mapped(one, variants, (lora, tokens, positions, mask, cache), axes)
        in_axes = (0, axes["tokens"], axes["positions"], axes["mask"],
                   cache_axes if axes["cache"] == 0 else None)
        return jax.vmap(one, in_axes=in_axes, out_axes=(0, cache_axes), axis_size=variants)(
            lora, tokens, positions, mask, cache)

    @staticmethod
    def _mapped(one, variants, args, axes):
        """``one`` over the variants one after the other (``jax.lax.map``): a MoE expert bank's
        ``jax.lax.ragged_dot`` has no batching rule for operands batched differently (the
        variants' adapters route their tokens differently), so it cannot be ``vmap``-ped. Same
        inputs and outputs as the ``vmap`` (the cache's ``end_index`` shared)."""
        import jax
        import jax.numpy as jnp

        lora, tokens, positions, mask, cache = args
        per = (True, axes["tokens"] == 0, axes["positions"] == 0, axes["mask"] == 0, axes["cache"] == 0)

        def body(i):
            picked = [jax.tree.map(lambda x: x[i], a) if batched else a for a, batched in zip(args, per, strict=True)]
            if per[4]:  # the shared write index stays shared
                picked[4] = {n: {**layer, "end_index": cache[n]["end_index"]} for n, layer in picked[4].items()}
            return one(*picked)

        logits, out = jax.lax.map(body, jnp.arange(variants))
        return logits, {n: {**layer, "end_index": layer["end_index"][0]} for n, layer in out.items()}

    def _choose(self, logits, keys, temperature, top_k, top_p):
        """The next tokens: greedy when ``temperature`` is 0 (a runtime ``lax.cond``: one program
        serves both), else sampled with top-k and top-p."""
        import jax
        import jax.numpy as jnp

        logits = logits.astype(jnp.float32)
        if self.forbidden:
            logits = logits.at[..., list(self.forbidden)].set(-jnp.inf)
        if self.decodable:
            ids = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
            logits = jnp.where(ids < self.decodable, logits, -jnp.inf)

        def greedy(logits):  # the first index of the max: two plain reductions (XLA:CPU's argmax
            # reduces (value, index) pairs, ~6× slower over a 262,144 vocabulary)
            ids = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
            top = jnp.max(logits, axis=-1, keepdims=True)
            first = jnp.min(jnp.where(logits == top, ids, logits.shape[-1]), axis=-1)
            return (first % logits.shape[-1]).astype(jnp.int32)  # NaN logits: id 0, never out of range

        def one(row_logits, key):
            x = row_logits / jnp.maximum(temperature, 1e-6)
            desc = -jnp.sort(-x)
            k = jnp.where(top_k > 0, jnp.minimum(top_k, x.shape[-1]), x.shape[-1])
            desc = jnp.where(jnp.arange(x.shape[-1]) < k, desc, -jnp.inf)
            probs = jax.nn.softmax(desc)
            keep = (jnp.cumsum(probs) - probs) < top_p  # always keeps the first
            threshold = jnp.min(jnp.where(keep, desc, jnp.inf))
            x = jnp.where(x >= threshold, x, -jnp.inf)
            return jax.random.categorical(key, x).astype(jnp.int32)

        def sampled(logits):  # [V, B, vocab]; the same key for every variant of a prompt (A/B)
            return jax.vmap(lambda lv: jax.vmap(one)(lv, keys))(logits)

        return jax.lax.cond(temperature <= 0, greedy, sampled, logits)

    def _prefill_impl(self, base, lora, tokens, lengths, live, keys, temperature, top_k, top_p, *,
                      cache_len, variants):
        """``tokens`` [B, L] (shared) or [V, B, L] (per variant), ``lengths`` [B] or [V, B]."""
        import jax
        import jax.numpy as jnp

        self.traces["prefill"] += 1
        per_variant = tokens.ndim == 3
        b, lp = tokens.shape[-2:]
        cache = self.model.config.init_cache(batch_size=b, dtype=self.cache_dtype, cache_length=lp)
        positions = jnp.broadcast_to(jnp.arange(lp, dtype=jnp.int32), (b, lp))
        j = jnp.arange(lp)
        causal = j[None, :] <= j[:, None]
        mask = causal & (j[None, None, :] < lengths[..., None, None])  # [(V,) B, L, L]
        v_axis = 0 if per_variant else None
        logits, cache = self._vforward(base, lora, variants, tokens, positions, mask, cache,
                                       axes={"tokens": v_axis, "positions": None, "mask": v_axis,
                                             "cache": None}, last_only=True)

        def grow(layer):
            pad = cache_len - lp
            return {
                "k": jnp.pad(layer["k"], ((0, 0), (0, 0), (0, pad), (0, 0), (0, 0))),
                "v": jnp.pad(layer["v"], ((0, 0), (0, 0), (0, pad), (0, 0), (0, 0))),
                "positions": jnp.pad(layer["positions"], ((0, 0), (0, 0), (0, pad))),
                "end_index": layer["end_index"],
            }

        cache = {name: grow(layer) for name, layer in cache.items()}
        step_keys = jax.vmap(lambda k: jax.random.fold_in(k, 0))(keys)
        first = self._choose(logits, step_keys, temperature, top_k, top_p)
        slots = jnp.arange(cache_len)
        valid = (slots < lengths[..., None]) | (slots >= lp)  # [(V,) B, cache_len]
        done = jnp.isin(first, jnp.asarray(self.end_tokens)) | ~live[None, :]  # padding rows: done
        return {
            "cache": cache, "last": first, "done": done, "step": jnp.zeros((), jnp.int32),
            "valid": valid, "lengths": lengths, "keys": keys, "start": jnp.asarray(lp, jnp.int32),
        }

    def _decode_impl(self, base, lora, state, max_new, temperature, top_k, top_p, *, chunk):
        """Up to ``chunk`` decode steps; returns the new state and the tokens [chunk, V, B]."""
        import jax
        import jax.numpy as jnp

        self.traces["decode"] += 1
        variants, b = state["last"].shape
        cache_len = state["valid"].shape[-1]
        per_variant = state["valid"].ndim == 3
        ends = jnp.asarray(self.end_tokens)

        def cond(carry):
            i, st, _ = carry
            return (i < chunk) & ~jnp.all(st["done"]) & (st["step"] + 1 < max_new)

        def body(carry):
            i, st, out = carry
            end = st["start"] + st["step"]  # cache slot of the token fed now
            j = jnp.arange(cache_len)
            mask = (st["valid"] & (j <= end))[..., None, :]  # [(V,) B, 1, cache_len]
            positions = (st["lengths"] + st["step"])[..., None]  # [(V,) B, 1]
            v_axis = 0 if per_variant else None
            logits, cache = self._vforward(base, lora, variants, st["last"][..., None], positions, mask,
                                           st["cache"], axes={"tokens": 0, "positions": v_axis,
                                                              "mask": v_axis, "cache": 0},
                                           last_only=True)
            keys = jax.vmap(lambda k: jax.random.fold_in(k, st["step"] + 1))(st["keys"])
            nxt = self._choose(logits, keys, temperature, top_k, top_p)
            nxt = jnp.where(st["done"], 0, nxt)
            out = out.at[i].set(nxt)
            new = dict(st, cache=cache, last=nxt, step=st["step"] + 1,
                       done=st["done"] | jnp.isin(nxt, ends))
            return i + 1, new, out

        out = jnp.full((chunk, variants, b), -1, jnp.int32)
        _, state, out = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), state, out))
        return state, out


def abstract(tree: Any) -> Any:
    """``tree``'s arrays as ``jax.ShapeDtypeStruct`` with their placement (a compile's input)."""
    import jax

    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
                        if hasattr(x, "sharding") else x, tree)


def signature(args: Any) -> tuple:
    """The tree, shapes, dtypes and placements of ``args`` (a compiled program's key)."""
    import jax

    from adapters_lib.program_store import placement

    leaves, tree = jax.tree_util.tree_flatten(args)
    return (tree, tuple((getattr(x, "shape", ()), str(getattr(x, "dtype", type(x))), placement(x))
                        for x in leaves))


def _wait(future: Any) -> None:
    """Wait for a compile ahead that a call needs, under way (a dropped or failed one: the call
    compiles). One still queued is dropped and the call compiles it now: it may be held
    (``CompileQueue.hold``) by a run whose step 1 this call, a job between steps, delays."""
    if future is not None and not future.cancel():
        try:
            future.result()
        except BaseException:  # noqa: BLE001 - cancelled or failed: compiled in the call
            pass


class _Stored:
    """A jitted function called through the program store when it is on (the engine): its
    executable per argument signature read back or compiled ahead (and kept), so a new
    engine traces nothing; otherwise, and where the arguments do not fit, the jitted call.
    One compiled ahead (``ahead``, on the compile thread) serves a call either way."""

    def __init__(self, jitted: Any, name: str, key: tuple):
        self.jitted = jitted
        self.name = name
        self.key = key
        self.compiled: dict[tuple, Any] = {}
        self.pending: dict[tuple, Any] = {}

    @staticmethod
    def key_of(args: tuple, static: dict[str, Any]) -> tuple:
        return (signature(args), tuple(sorted(static.items())))

    def ahead(self, args: tuple, static: dict[str, Any]) -> Any:
        """The executable for ``args`` (abstract ones will do), read back or compiled, kept."""
        from adapters_lib import program_store

        sig = self.key_of(args, static)
        fn = self.compiled.get(sig)
        if fn is None or fn is self.jitted:
            fn = program_store.load_or_compile(self.name, (self.key, sig),
                                               lambda: self.jitted.lower(*args, **static))
            self.compiled[sig] = fn
        return fn

    def __call__(self, *args: Any, **static: Any) -> Any:
        from adapters_lib import program_store

        sig = self.key_of(args, static)
        _wait(self.pending.get(sig))
        fn = self.compiled.get(sig)
        if fn is None:
            if program_store.folder() is None:
                return self.jitted(*args, **static)
            fn = self.ahead(args, static)
        if fn is not self.jitted:
            try:
                return fn(*args)
            except (TypeError, ValueError):  # checked before anything runs
                self.compiled[sig] = self.jitted
        return self.jitted(*args, **static)


@functools.lru_cache(maxsize=8)
def program(model: Any, spec: LoraSpec | None, end_tokens: tuple[int, ...], forbidden: tuple[int, ...],
            cache_dtype: str, decodable: int = 0) -> Program:
    return Program(model, spec, end_tokens, forbidden, cache_dtype, decodable)
