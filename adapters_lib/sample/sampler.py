"""Generation over gemma's Transformer: our own prefill + decode loop, streaming, and A/B.

One ``Sampler`` holds a base model, its tokenizer and (optionally) a LoRA spec. It decodes a
grid of *variants × prompts* in one batched computation (``program.Program``): a variant is
a LoRA tree (or None for the base model), stacked on a leading axis and ``vmap``-ed over, so
that the base weights are shared and the A/B pair (base row: zero adapters, tuned row: the
run's adapters) costs little more than one stream. With zero adapters the LoRA update is
exactly zero, so the base row is bit-for-bit the base model. Each variant may also have
prompts of its own (``variant_prompts``): the two sides of a multi-turn A/B, each with its
own history, still decode in one computation.

Shapes are bucketed so that compilation happens once per bucket, never per setting:

- the prompt is padded to 32/64/128/… tokens (``PROMPT_BUCKETS``), the batch (prompts) to a
  power of two;
- the KV cache holds ``cache_length(prompt bucket, max_new_tokens)``: the next power of two
  ≥ prompt bucket + max new tokens, and at least ``CACHE_MIN`` (512) slots. So every
  ``max_new_tokens`` up to 512 − prompt bucket (480 for a short prompt) shares one prefill
  and one decode program: the decode length is a runtime value (the device loop stops at
  ``max_new``, an int32), the cache length the only shape it touches;
- temperature, top-k, top-p and the seed are runtime values (greedy is a ``lax.cond`` in the
  program: changing them compiles nothing).

``compile_behind`` compiles the programs of one prompt bucket from abstract arguments on the
engine's compile thread (after a run, when Compare picks a checkpoint). Decoding runs ``chunk`` tokens per device call (a
``lax.while_loop``) and streams text pieces between calls; incremental decoding holds back
a piece until the bytes of a multi-byte character (SentencePiece byte fallback) are
complete.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from adapters_lib.config import LoraSpec
from adapters_lib.errors import WorkbenchError
from adapters_lib.sample import stack
from adapters_lib.sample.program import abstract, program
from adapters_lib.sample.prompts import (
    Prompt,
    as_messages,
    check_prompt,
    codec_of,
    prompt_ids,
    raw_ids,
)
from adapters_lib.sample.settings import Piece, SamplingSettings
from adapters_lib.sample.text_stream import TextStream

PROMPT_BUCKETS = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
CACHE_MIN = 512
"""The fewest KV-cache slots a program has: ``max_new_tokens`` up to 512 − prompt bucket
compiles nothing new (a decode step reads the cache: 512 slots of the 270M's one KV head
are ~3 % of its weights' bytes)."""
DEFAULT_SETTINGS = SamplingSettings()
DECODE_CHUNK = 8  # tokens per device call, streaming or not (8-64 measured alike on CPU; see docs)


def bucket(n: int, buckets: Sequence[int] = PROMPT_BUCKETS) -> int:
    for b in buckets:
        if n <= b:
            return b
    return 1 << (n - 1).bit_length()


def cache_length(prompt_bucket: int, max_new_tokens: int) -> int:
    """The KV-cache length (a compiled shape) for a prompt bucket and a decode length."""
    return max(CACHE_MIN, _pow2(prompt_bucket + max_new_tokens))


def _with_fallback(compiled: Any, jitted: Any) -> Any:
    """Call the ahead-of-time ``compiled`` decode; where its arguments' layout differs from
    the one it was compiled for (a sharded state coming back placed otherwise), the jitted
    one from then on (the arguments are checked before anything is donated)."""
    use = [compiled]

    def call(*args: Any, **statics: Any) -> Any:
        if use[0] is compiled:
            try:
                return compiled(*args)
            except (TypeError, ValueError):
                use[0] = jitted
        return jitted(*args, **statics)

    return call


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _inputs(ids: list[list[list[int]]], settings: SamplingSettings, per_variant: bool
            ) -> tuple[tuple, tuple, int]:
    """The prefill's device inputs for token ids ``[variant][prompt]`` (``tokens, lengths,
    live, keys``), the runtime scalars ``(max_new, temperature, top_k, top_p)`` and the KV-cache
    length: the buckets (module doc) in one place, for a call and a compile ahead alike."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    n = len(ids[0])
    lp = bucket(max(len(x) for s in ids for x in s))
    rows = _pow2(n)
    tokens = np.zeros((len(ids), rows, lp), np.int32)
    lengths = np.ones((len(ids), rows), np.int32)
    live = np.arange(rows) < n
    tokens[:, :, 0] = ids[0][0][0]  # padding rows: a lone BOS
    for v, s in enumerate(ids):
        for r, x in enumerate(s):
            tokens[v, r, : len(x)] = x
            lengths[v, r] = len(x)
    if not per_variant:
        tokens, lengths = tokens[0], lengths[0]
    base_key = jax.random.key(settings.seed)
    keys = jax.vmap(lambda i: jax.random.fold_in(base_key, i))(jnp.arange(rows))
    scalars = (jnp.int32(settings.max_new_tokens), jnp.float32(settings.temperature),
               jnp.int32(settings.top_k), jnp.float32(settings.top_p))
    inputs = (jnp.asarray(tokens), jnp.asarray(lengths), jnp.asarray(live), keys)
    return inputs, scalars, cache_length(lp, settings.max_new_tokens)


class Sampler:
    """Generation for one base model; adapters are passed per call (a *variant*).

    ``spec`` is the LoRA spec the adapters were trained with (None: base model only).
    """

    def __init__(self, model: Any, params: Any, tokenizer: Any, spec: LoraSpec | None = None):
        from adapters_lib.models.quantize import qarray

        self.model = model
        self.params = params
        self.tokenizer = tokenizer
        self.spec = spec if spec is not None and spec.enabled else None
        vocab = int(model.config.num_embed)
        st = tokenizer.special_tokens
        ends = {int(st.EOS), int(st.END_OF_TURN)}
        tool = getattr(st, "BEGIN_OF_TOOL_RESPONSE", None)
        if tool is not None and int(tool) < vocab:
            ends.add(int(tool))  # gm.text.Sampler stops on it too
        self.end_tokens = tuple(sorted(ends))
        forbidden = tuple(int(t) for t in getattr(tokenizer, "FORBIDDEN_TOKENS", ()) if int(t) < vocab)
        dtype = str(qarray.params_dtype(params))  # a quantized leaf: the dtype it stands for
        # embedding rows beyond the tokenizer (Gemma 3 HF: 262,208 rows, 262,144 pieces) are
        # never emitted: decode would fail on them
        pieces = getattr(tokenizer, "vocab_size", 0)
        pieces = int((pieces() if callable(pieces) else pieces) or 0)
        decodable = pieces if 0 < pieces < vocab else 0
        self._program = program(model, self.spec, self.end_tokens, forbidden, dtype, decodable)
        self._prefill = self._program.prefill
        self._decode = self._program.decode
        self._codec = None

    @property
    def traces(self) -> dict[str, int]:
        """How often the device functions were traced (compiled), for tests and logs."""
        return self._program.traces

    @classmethod
    def from_loaded(cls, loaded: Any, spec: LoraSpec | None = None) -> Sampler:
        return cls(loaded.model, loaded.params, loaded.tokenizer, spec)

    # ---------------------------------------------------------------- host side

    def _stack(self, adapters: Sequence[Any]) -> tuple[Any, int]:
        """Stack variants on a leading axis; None = the base model (zero adapters)."""
        import jax
        import jax.numpy as jnp

        if self.spec is None:
            if any(a is not None for a in adapters):
                raise ValueError("this Sampler has no LoRA spec: adapters cannot be applied")
            return {}, len(adapters)
        template = next((a for a in adapters if a is not None), None)
        if template is None:  # base only: the plain model
            return {}, len(adapters)
        parts = stack.parts(adapters)
        if parts is not None:  # base and one tuned side: one program
            return stack.stacked(*parts), len(adapters)
        full = [a if a is not None else jax.tree.map(jnp.zeros_like, template) for a in adapters]
        return jax.tree.map(lambda *xs: jnp.stack(xs), *full), len(adapters)

    def encode(self, prompt: Prompt, chat: bool = True) -> list[int]:
        """Token ids of a prompt: chat (template, piece-wise, as training) or raw text, BOS first."""
        if self._codec is None:
            self._codec = codec_of(self.tokenizer)
        if isinstance(prompt, str) and not chat:
            return raw_ids(self._codec, prompt)
        if not chat:
            raise WorkbenchError("a conversation needs the chat template", where="--raw",
                                 hint="drop --raw, or send one text prompt")
        return prompt_ids(self._codec, as_messages(prompt))

    def stream_grid(self, prompts: Sequence[Prompt], adapters: Sequence[Any] = (None,),
                    settings: SamplingSettings = DEFAULT_SETTINGS, *, chunk: int | None = None,
                    chat: bool = True, variant_prompts: Sequence[Sequence[Prompt]] | None = None,
                    ) -> Iterator[Piece]:
        """Stream every (variant, prompt) pair, one batched computation for all of them.

        ``prompts`` are user messages or conversations (``chat=True``: the Gemma template)
        or raw text (``chat=False``), shared by every variant; or ``variant_prompts`` gives
        each variant its own list (all of the same length). Yields ``Piece`` events; the last
        event of each stream has ``done=True`` and its ``stop_reason``.
        """
        import numpy as np

        per_variant = variant_prompts is not None
        sets = [list(p) for p in variant_prompts] if per_variant else [list(prompts)]
        if per_variant and len(sets) != max(1, len(adapters)):
            raise ValueError(f"{len(sets)} prompt lists for {len(adapters)} variants")
        if not sets[0] or any(len(s) != len(sets[0]) for s in sets):
            raise WorkbenchError("no prompts given", where="--prompt", hint="give at least one prompt")
        ids = [[self.encode(p, chat) for p in s] for s in sets]
        n = len(sets[0])
        lora, variants = self._stack(adapters)
        inputs, scalars, cache_len = _inputs(ids, settings, per_variant)
        max_new, temp, top_k, top_p = scalars
        state = self._prefill(self.params, lora, *inputs, temp, top_k, top_p, cache_len=cache_len,
                              variants=variants)
        step_chunk = chunk or DECODE_CHUNK
        decode = self._decode
        if settings.max_new_tokens > 1:  # compiled now, while the prefill runs on the device
            compiled = self._program.decoder(self.params, lora, state, *scalars, chunk=step_chunk)
            decode = _with_fallback(compiled, self._decode)
        streams = {(v, r): TextStream(self.tokenizer) for v in range(variants) for r in range(n)}
        finished: set[tuple[int, int]] = set()
        stamp: list[float | None] = [None]

        def emit(tok_grid) -> Iterator[Piece]:
            for v in range(variants):
                for r in range(n):
                    if (v, r) in finished:
                        continue
                    tok = int(tok_grid[v, r])
                    if tok < 0:
                        continue
                    if tok in self.end_tokens:
                        finished.add((v, r))
                        yield Piece(v, r, streams[v, r].flush(), tok, done=True, stop_reason="stop",
                                    time=stamp[0])
                        continue
                    yield Piece(v, r, streams[v, r].push(tok), tok, time=stamp[0])

        first = np.asarray(state["last"])
        yield from emit(first)
        produced = 1
        while produced < settings.max_new_tokens and len(finished) < variants * n:
            began = time.perf_counter()
            state, out = decode(self.params, lora, state, max_new, temp, top_k, top_p, chunk=step_chunk)
            out = np.asarray(out)
            steps = int((out.max(axis=(1, 2)) >= 0).sum()) or 1
            per_step = (time.perf_counter() - began) / steps
            for i in range(out.shape[0]):
                if out[i].max() < 0:
                    break
                # a chunk's tokens arrive together: each is stamped when its step was done
                stamp[0] = began + (i + 1) * per_step
                yield from emit(out[i])
                produced += 1
            if bool(np.asarray(state["done"])[:, :n].all()):
                break
        for v in range(variants):
            for r in range(n):
                if (v, r) not in finished:
                    yield Piece(v, r, streams[v, r].flush(), None, done=True, stop_reason="length")

    def compile_behind(self, submit: Any, adapters: Sequence[Any] = (None,),
                       settings: SamplingSettings = DEFAULT_SETTINGS, *, prompt_bucket: int = PROMPT_BUCKETS[0],
                       rows: int = 1, chunk: int | None = None) -> Any:
        """Compile the prefill and decode that ``stream_grid`` would run for ``rows`` prompts of
        one bucket over these variants (``adapters``: None, or a tree of the tuned side's
        shapes), from abstract params and adapters, through ``submit(fn) -> Future`` (the
        engine's compile thread): no device work here, no weights read. Returns the future,
        or None when they are compiled (or compiling) already. Any ``max_new_tokens`` and
        sampling settings share these programs (``cache_length``)."""
        import jax

        from adapters_lib.program_store import placement

        if any(not placement(x).startswith("replicated:") or "," in placement(x)
               for x in jax.tree.leaves([self.params, *[a for a in adapters if a is not None]])):
            return None  # placed over several devices: the call compiles (its placement is its own)
        if self.spec is not None:
            stack.compile_behind(submit, adapters)  # ~1 s on a TPU, or in the first Compare
        lora = jax.eval_shape(lambda a: self._stack(a)[0], list(adapters))
        device = next(iter(jax.tree.leaves(self.params)[0].devices()))
        one = jax.sharding.SingleDeviceSharding(device)
        lora = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=one), lora)
        bos = int(self.tokenizer.special_tokens.BOS)
        ids = [[[bos] * prompt_bucket] * rows]
        inputs, scalars, cache_len = _inputs(ids, settings, False)
        args = (abstract(self.params), lora, *inputs, *scalars[1:])
        return self._program.compile_ahead(submit, args, scalars, cache_len=cache_len,
                                           variants=max(1, len(adapters)), chunk=chunk or DECODE_CHUNK)

    def generate_grid(self, prompts: Sequence[Prompt], adapters: Sequence[Any] = (None,),
                      settings: SamplingSettings = DEFAULT_SETTINGS, *, chunk: int | None = None,
                      chat: bool = True, variant_prompts: Sequence[Sequence[Prompt]] | None = None,
                      ) -> list[list[dict[str, Any]]]:
        """Like ``stream_grid`` but collected: ``[variant][prompt] -> {"text", "tokens", ...}``."""
        variants = max(1, len(adapters))
        n = len(variant_prompts[0]) if variant_prompts is not None else len(prompts)
        out = [[{"text": "", "tokens": [], "steps": 0, "stop_reason": None} for _ in range(n)]
               for _ in range(variants)]
        for piece in self.stream_grid(prompts, adapters, settings, chunk=chunk, chat=chat,
                                      variant_prompts=variant_prompts):
            cell = out[piece.variant][piece.row]
            cell["text"] += piece.text
            cell["steps"] += piece.token is not None
            if piece.token is not None and piece.token not in self.end_tokens:
                cell["tokens"].append(piece.token)
            if piece.done:
                cell["stop_reason"] = piece.stop_reason
        return out

    # ---------------------------------------------------------------- conveniences

    def stream(self, prompt: Prompt, adapters: Any = None, settings: SamplingSettings = DEFAULT_SETTINGS,
               *, chat: bool = True) -> Iterator[str]:
        """Text pieces of one completion, as they are produced."""
        for piece in self.stream_grid([prompt], [adapters], settings, chat=chat):
            if piece.text:
                yield piece.text

    def sample(self, prompt: Prompt, adapters: Any = None, settings: SamplingSettings = DEFAULT_SETTINGS,
               *, chat: bool = True) -> str:
        return self.generate_grid([prompt], [adapters], settings, chat=chat)[0][0]["text"]

    def ab(self, prompts: Sequence[Prompt], adapters: Any, settings: SamplingSettings = DEFAULT_SETTINGS,
           *, chat: bool = True) -> list[dict[str, Any]]:
        """Base vs tuned for each prompt, in one batched computation."""
        grid = self.generate_grid(prompts, [None, adapters], settings, chat=chat)
        return [{"prompt": p if isinstance(p, str) else list(p), "base": grid[0][i]["text"], "tuned": grid[1][i]["text"],
                 "settings": settings.to_dict()} for i, p in enumerate(prompts)]


__all__ = ["CACHE_MIN", "DECODE_CHUNK", "PROMPT_BUCKETS", "Sampler", "bucket", "cache_length", "check_prompt"]

