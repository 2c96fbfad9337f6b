"""Generation over gemma's Transformer: our own prefill + decode loop, streaming, and A/B.

One ``Sampler`` holds a base model, its tokenizer and (optionally) a LoRA spec. It decodes a
grid of *variants × prompts* in one batched computation: a variant is a LoRA tree (or None
for the base model), stacked on a leading axis and ``vmap``-ed over, so that the base
weights are shared and the A/B pair (base row: zero adapters, tuned row: the run's
adapters) costs little more than one stream. With zero adapters the LoRA update is exactly
zero, so the base row is bit-for-bit the base model.

Shapes are bucketed so that compilation happens once per bucket: the prompt is padded to
32/64/128/…, the KV cache to the next power of two ≥ prompt bucket + max new tokens, the
batch to a power of two. Decoding runs ``chunk`` tokens per device call (a
``lax.while_loop``) and streams text pieces between calls; incremental decoding holds back
a piece until the bytes of a multi-byte character (SentencePiece byte fallback) are
complete.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from adapters_lib.config import LoraSpec
from adapters_lib.errors import WorkbenchError

log = logging.getLogger(__name__)

PROMPT_BUCKETS = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
DECODE_CHUNK = 8  # tokens per device call, streaming or not (8-64 measured alike on CPU; see docs)


@dataclasses.dataclass(frozen=True)
class SamplingSettings:
    """Decoding settings. ``temperature == 0`` means greedy."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    """Keep the k most likely tokens (0 = off)."""
    top_p: float = 1.0
    """Keep the smallest set of tokens whose probability reaches p (1.0 = off)."""
    seed: int = 0

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise WorkbenchError(f"max_new_tokens is {self.max_new_tokens}", where="--max-new-tokens",
                                 hint="use a positive number of tokens")
        if self.temperature < 0:
            raise WorkbenchError(f"temperature is {self.temperature}", where="--temperature",
                                 hint="use 0 (greedy) or a positive temperature")
        if self.top_k < 0:
            raise WorkbenchError(f"top_k is {self.top_k}", where="--top-k", hint="use 0 (off) or a positive k")
        if not 0.0 < self.top_p <= 1.0:
            raise WorkbenchError(f"top_p is {self.top_p}", where="--top-p", hint="use a value in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Piece:
    """One streamed event: new text (possibly empty) for one (variant, prompt) stream."""

    variant: int
    row: int
    text: str
    token: int | None
    done: bool = False


# --------------------------------------------------------------------------- prompts


def format_chat(messages: Sequence[Mapping[str, str]]) -> str:
    """The Gemma chat template as text, ending with the open model turn (no BOS)."""
    from adapters_lib.data.chat_template import format_prompt

    return format_prompt([dict(m) for m in messages])


def chat_ids(tokenizer: Any, messages: Sequence[Mapping[str, str]], codec: Any = None) -> list[int]:
    """BOS + the prompt for the next model turn, tokenized exactly as training does.

    Template pieces and contents are encoded one by one (``adapters_lib.data.tokenize``): a
    piece-wise encoding can differ from encoding the joined text, and the model saw the
    pieces. The turn markers follow the tokenizer (Gemma 2/3 or Gemma 4).
    """
    from adapters_lib.data import chat_template
    from adapters_lib.data.tokenize import TokenCodec

    codec = codec or TokenCodec.from_any(tokenizer)
    msgs = [dict(m) for m in messages]
    if msgs and msgs[-1]["role"] in ("assistant", "model"):
        msgs = msgs[:-1]
    fixed = chat_template.marker_pieces(codec.markers)
    pieces = [text for text, _ in chat_template.segments(msgs, markers=codec.markers)]
    pieces.append(f"{codec.markers[0]}model\n")
    ids = [codec.bos]
    for piece in pieces:
        ids.extend(codec.encode_fixed(piece) if piece in fixed else codec.encode_batch([piece])[0])
    return [int(i) for i in ids]


Prompt = str | Sequence[Mapping[str, str]]
"""A user message (str) or a whole conversation (list of {"role", "content"})."""


def check_prompt(prompt: str, where: str = "--prompt") -> str:
    if not prompt or not prompt.strip():
        raise WorkbenchError("the prompt is empty", where=where, hint="give some text to complete")
    return prompt


# --------------------------------------------------------------------------- incremental text


class TextStream:
    """Turns token ids into text pieces as they come, never splitting a character."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.emitted = ""

    def push(self, token: int) -> str:
        self.ids.append(int(token))
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):  # an incomplete UTF-8 sequence: wait for its other bytes
            return ""
        if not text.startswith(self.emitted):  # decoding changed earlier text: re-sync
            self.emitted = text
            return ""
        piece = text[len(self.emitted):]
        self.emitted = text
        return piece

    def flush(self) -> str:
        text = self.tokenizer.decode(self.ids) if self.ids else ""
        piece = text[len(self.emitted):] if text.startswith(self.emitted) else ""
        self.emitted = text
        return piece


# --------------------------------------------------------------------------- the sampler


def bucket(n: int, buckets: Sequence[int] = PROMPT_BUCKETS) -> int:
    for b in buckets:
        if n <= b:
            return b
    return 1 << (n - 1).bit_length()


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class _Program:
    """The compiled device functions for one (model, LoRA spec, stop tokens, dtype).

    Holds no weights: params and adapters are arguments, so one program (and its compiled
    executables) serves every Sampler of the same model, e.g. each checkpoint of a run.
    """

    def __init__(self, model: Any, spec: LoraSpec | None, end_tokens: tuple[int, ...],
                 forbidden: tuple[int, ...], cache_dtype: str, decodable: int = 0):
        import jax

        from adapters_lib import lora as lora_lib

        self.model = model
        self.net = lora_lib.wrap(model, spec) if spec else model
        self.end_tokens = end_tokens
        self.forbidden = forbidden
        self.decodable = decodable
        """Ids from here on have embedding rows but no tokenizer piece: never emitted (0 = all)."""
        self.cache_dtype = cache_dtype
        self.traces: dict[str, int] = {"prefill": 0, "decode": 0}
        self.prefill = jax.jit(self._prefill_impl, static_argnames=("cache_len", "variants", "greedy"))
        self.decode = jax.jit(self._decode_impl, static_argnames=("chunk", "greedy"), donate_argnums=(2,))


    def _forward(self, base, lora, tokens, positions, mask, cache, last_only):
        from adapters_lib import lora as lora_lib

        params = lora_lib.merge_lora(base, lora) if lora else base
        net = self.net if lora else self.model  # no adapters: the plain model
        out = net.apply({"params": params}, tokens, positions=positions, attention_mask=mask,
                             cache=cache, return_last_only=last_only)
        return out.logits, out.cache

    def _vforward(self, base, lora, variants, tokens, positions, mask, cache, *, per_variant, last_only):
        """The model over ``variants`` adapter sets.

        ``per_variant``: tokens and KV cache carry a leading variant axis (decode) or are
        shared (prefill). The cache's ``end_index`` is never batched: a batched write index
        would turn every cache update into a scatter (3× slower decode on CPU).
        """
        import jax

        def one(lo, tok, c):
            return self._forward(base, lo, tok, positions, mask, c, last_only)

        layer_axes = {"k": 0, "v": 0, "positions": 0, "end_index": None}
        cache_axes = {name: layer_axes for name in cache}
        in_axes = (0, 0 if per_variant else None, cache_axes if per_variant else None)
        return jax.vmap(one, in_axes=in_axes, out_axes=(0, cache_axes), axis_size=variants)(lora, tokens, cache)

    def _choose(self, logits, keys, temperature, top_k, top_p, greedy):
        import jax
        import jax.numpy as jnp

        logits = logits.astype(jnp.float32)
        if self.forbidden:
            logits = logits.at[..., list(self.forbidden)].set(-jnp.inf)
        if self.decodable:
            ids = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
            logits = jnp.where(ids < self.decodable, logits, -jnp.inf)
        if greedy:
            return jnp.argmax(logits, axis=-1).astype(jnp.int32)

        def one(row_logits, key):
            x = row_logits / temperature
            desc = -jnp.sort(-x)
            k = jnp.where(top_k > 0, jnp.minimum(top_k, x.shape[-1]), x.shape[-1])
            desc = jnp.where(jnp.arange(x.shape[-1]) < k, desc, -jnp.inf)
            probs = jax.nn.softmax(desc)
            keep = (jnp.cumsum(probs) - probs) < top_p  # always keeps the first
            threshold = jnp.min(jnp.where(keep, desc, jnp.inf))
            x = jnp.where(x >= threshold, x, -jnp.inf)
            return jax.random.categorical(key, x).astype(jnp.int32)

        # logits: [V, B, vocab]; the same key for every variant of a prompt (same seed for A/B)
        return jax.vmap(lambda lv: jax.vmap(one)(lv, keys))(logits)

    def _prefill_impl(self, base, lora, tokens, lengths, live, keys, temperature, top_k, top_p, *,
                      cache_len, variants, greedy):
        import jax
        import jax.numpy as jnp

        self.traces["prefill"] += 1
        b, lp = tokens.shape
        cache = self.model.config.init_cache(batch_size=b, dtype=self.cache_dtype, cache_length=lp)
        positions = jnp.broadcast_to(jnp.arange(lp, dtype=jnp.int32), (b, lp))
        j = jnp.arange(lp)
        mask = (j[None, None, :] <= j[None, :, None]) & (j[None, None, :] < lengths[:, None, None])
        logits, cache = self._vforward(base, lora, variants, tokens, positions, mask, cache,
                                       per_variant=False, last_only=True)

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
        first = self._choose(logits, step_keys, temperature, top_k, top_p, greedy)
        valid = (jnp.arange(cache_len)[None, :] < lengths[:, None]) | (jnp.arange(cache_len)[None, :] >= lp)
        done = jnp.isin(first, jnp.asarray(self.end_tokens)) | ~live[None, :]  # padding rows: done
        return {
            "cache": cache, "last": first, "done": done, "step": jnp.zeros((), jnp.int32),
            "valid": valid, "lengths": lengths, "keys": keys, "start": jnp.asarray(lp, jnp.int32),
        }

    def _decode_impl(self, base, lora, state, max_new, temperature, top_k, top_p, *, chunk, greedy):
        """Up to ``chunk`` decode steps; returns the new state and the tokens [chunk, V, B]."""
        import jax
        import jax.numpy as jnp

        self.traces["decode"] += 1
        variants, b = state["last"].shape
        cache_len = state["valid"].shape[1]
        ends = jnp.asarray(self.end_tokens)

        def cond(carry):
            i, st, _ = carry
            return (i < chunk) & ~jnp.all(st["done"]) & (st["step"] + 1 < max_new)

        def body(carry):
            i, st, out = carry
            end = st["start"] + st["step"]  # cache slot of the token fed now
            j = jnp.arange(cache_len)
            mask = (st["valid"] & (j[None, :] <= end))[:, None, :]
            positions = (st["lengths"] + st["step"])[:, None]
            logits, cache = self._vforward(base, lora, variants, st["last"][..., None], positions, mask,
                                           st["cache"], per_variant=True, last_only=True)
            keys = jax.vmap(lambda k: jax.random.fold_in(k, st["step"] + 1))(st["keys"])
            nxt = self._choose(logits, keys, temperature, top_k, top_p, greedy)
            nxt = jnp.where(st["done"], 0, nxt)
            out = out.at[i].set(nxt)
            new = dict(st, cache=cache, last=nxt, step=st["step"] + 1,
                       done=st["done"] | jnp.isin(nxt, ends))
            return i + 1, new, out

        out = jnp.full((chunk, variants, b), -1, jnp.int32)
        _, state, out = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), state, out))
        return state, out



@functools.lru_cache(maxsize=8)
def _program(model: Any, spec: LoraSpec | None, end_tokens: tuple[int, ...], forbidden: tuple[int, ...],
             cache_dtype: str, decodable: int = 0) -> _Program:
    return _Program(model, spec, end_tokens, forbidden, cache_dtype, decodable)


class Sampler:
    """Generation for one base model; adapters are passed per call (a *variant*).

    ``spec`` is the LoRA spec the adapters were trained with (None: base model only).
    """

    def __init__(self, model: Any, params: Any, tokenizer: Any, spec: LoraSpec | None = None):
        import jax

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
        dtype = str(jax.tree.leaves(params)[0].dtype)
        # embedding rows beyond the tokenizer (Gemma 3 HF: 262,208 rows, 262,144 pieces) are
        # never emitted: decode would fail on them
        pieces = getattr(tokenizer, "vocab_size", 0)
        pieces = int((pieces() if callable(pieces) else pieces) or 0)
        decodable = pieces if 0 < pieces < vocab else 0
        self._program = _program(model, self.spec, self.end_tokens, forbidden, dtype, decodable)
        self._prefill = self._program.prefill
        self._decode = self._program.decode

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
        full = [a if a is not None else jax.tree.map(jnp.zeros_like, template) for a in adapters]
        return jax.tree.map(lambda *xs: jnp.stack(xs), *full), len(adapters)

    def encode(self, prompt: Prompt, chat: bool = True) -> list[int]:
        """Token ids of a prompt: chat (template, piece-wise) or raw text, BOS first."""
        if isinstance(prompt, str):
            check_prompt(prompt)
            if not chat:
                text = prompt[len("<bos>"):] if prompt.startswith("<bos>") else prompt
                return [int(t) for t in self.tokenizer.encode(text, add_bos=True)]
            prompt = [{"role": "user", "content": prompt}]
        if not prompt or not any(str(m.get("content", "")).strip() for m in prompt):
            check_prompt("")
        return chat_ids(self.tokenizer, prompt, self._codec())

    def _codec(self) -> Any:
        if getattr(self, "_codec_cache", None) is None:
            from adapters_lib.data.tokenize import TokenCodec

            self._codec_cache = TokenCodec.from_any(self.tokenizer)
        return self._codec_cache

    def stream_grid(self, prompts: Sequence[Prompt], adapters: Sequence[Any] = (None,),
                    settings: SamplingSettings = SamplingSettings(), *, chunk: int | None = None,
                    chat: bool = True) -> Iterator[Piece]:
        """Stream every (variant, prompt) pair, one batched computation for all of them.

        ``prompts`` are user messages or conversations (``chat=True``: the Gemma template)
        or raw text (``chat=False``). Yields ``Piece`` events; the last event of each stream has ``done=True``.
        """
        import jax
        import jax.numpy as jnp
        import numpy as np

        if not prompts:
            raise WorkbenchError("no prompts given", where="--prompt", hint="give at least one prompt")
        ids = [self.encode(p, chat) for p in prompts]
        n = len(ids)
        lp = bucket(max(len(x) for x in ids))
        rows = _pow2(n)
        cache_len = _pow2(lp + settings.max_new_tokens)
        tokens = np.zeros((rows, lp), np.int32)
        lengths = np.ones((rows,), np.int32)
        live = np.arange(rows) < n
        tokens[:, 0] = ids[0][0]  # padding rows: a lone BOS
        for r, x in enumerate(ids):
            tokens[r, : len(x)] = x
            lengths[r] = len(x)
        lora, variants = self._stack(adapters)
        base_key = jax.random.key(settings.seed)
        keys = jax.vmap(lambda i: jax.random.fold_in(base_key, i))(jnp.arange(rows))
        temp = jnp.float32(max(settings.temperature, 1e-6))
        top_k, top_p = jnp.int32(settings.top_k), jnp.float32(settings.top_p)
        state = self._prefill(self.params, lora, jnp.asarray(tokens), jnp.asarray(lengths), jnp.asarray(live), keys, temp,
                              top_k, top_p, cache_len=cache_len, variants=variants, greedy=settings.greedy)
        streams = {(v, r): TextStream(self.tokenizer) for v in range(variants) for r in range(n)}
        finished: set[tuple[int, int]] = set()

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
                        yield Piece(v, r, streams[v, r].flush(), tok, done=True)
                        continue
                    yield Piece(v, r, streams[v, r].push(tok), tok)

        first = np.asarray(state["last"])
        yield from emit(first)
        produced = 1
        step_chunk = chunk or DECODE_CHUNK
        max_new = jnp.int32(settings.max_new_tokens)
        while produced < settings.max_new_tokens and len(finished) < variants * n:
            state, out = self._decode(self.params, lora, state, max_new, temp, top_k, top_p,
                                      chunk=step_chunk, greedy=settings.greedy)
            out = np.asarray(out)
            for i in range(out.shape[0]):
                if out[i].max() < 0:
                    break
                yield from emit(out[i])
                produced += 1
            if bool(np.asarray(state["done"])[:, :n].all()):
                break
        for v in range(variants):
            for r in range(n):
                if (v, r) not in finished:
                    yield Piece(v, r, streams[v, r].flush(), None, done=True)

    def generate_grid(self, prompts: Sequence[Prompt], adapters: Sequence[Any] = (None,),
                      settings: SamplingSettings = SamplingSettings(), *, chunk: int | None = None,
                      chat: bool = True) -> list[list[dict[str, Any]]]:
        """Like ``stream_grid`` but collected: ``[variant][prompt] -> {"text", "tokens"}``."""
        variants = max(1, len(adapters))
        out = [[{"text": "", "tokens": [], "steps": 0} for _ in prompts] for _ in range(variants)]
        for piece in self.stream_grid(prompts, adapters, settings, chunk=chunk, chat=chat):
            cell = out[piece.variant][piece.row]
            cell["text"] += piece.text
            cell["steps"] += piece.token is not None
            if piece.token is not None and piece.token not in self.end_tokens:
                cell["tokens"].append(piece.token)
        return out

    # ---------------------------------------------------------------- conveniences

    def stream(self, prompt: Prompt, adapters: Any = None, settings: SamplingSettings = SamplingSettings(),
               *, chat: bool = True) -> Iterator[str]:
        """Text pieces of one completion, as they are produced."""
        for piece in self.stream_grid([prompt], [adapters], settings, chat=chat):
            if piece.text:
                yield piece.text

    def sample(self, prompt: Prompt, adapters: Any = None, settings: SamplingSettings = SamplingSettings(),
               *, chat: bool = True) -> str:
        return self.generate_grid([prompt], [adapters], settings, chat=chat)[0][0]["text"]

    def ab(self, prompts: Sequence[Prompt], adapters: Any, settings: SamplingSettings = SamplingSettings(),
           *, chat: bool = True) -> list[dict[str, Any]]:
        """Base vs tuned for each prompt, in one batched computation."""
        grid = self.generate_grid(prompts, [None, adapters], settings, chat=chat)
        return [{"prompt": p if isinstance(p, str) else list(p), "base": grid[0][i]["text"], "tuned": grid[1][i]["text"],
                 "settings": settings.to_dict()} for i, p in enumerate(prompts)]


class ChatSession:
    """A multi-turn conversation with the Gemma template (the whole history is re-sent)."""

    def __init__(self, sampler: Sampler, adapters: Any = None, settings: SamplingSettings = SamplingSettings()):
        self.sampler = sampler
        self.adapters = adapters
        self.settings = settings
        self.messages: list[dict[str, str]] = []

    def send(self, text: str) -> Iterator[str]:
        check_prompt(text)
        self.messages.append({"role": "user", "content": text})
        reply: list[str] = []
        for piece in self.sampler.stream(list(self.messages), self.adapters, self.settings):
            reply.append(piece)
            yield piece
        self.messages.append({"role": "assistant", "content": "".join(reply)})


# --------------------------------------------------------------------------- runs, adapters, A/B


@dataclasses.dataclass
class Tuned:
    """A tuned model ready for A/B: a LoRA run (one sampler + adapters) or a full fine-tune."""

    sampler: Sampler
    """Samples the base model (and, with ``adapters``, the tuned one)."""
    adapters: Any
    """The LoRA tree; None for a full fine-tune."""
    tuned_sampler: Sampler | None = None
    """A full fine-tune's own sampler (no shared base weights: two computations)."""
    step: int | None = None
    run_path: Any = None
    source: str = ""

    def sample(self, prompt: Prompt, settings: SamplingSettings, *, chat: bool = True) -> Iterator[str]:
        if self.tuned_sampler is not None:
            return self.tuned_sampler.stream(prompt, None, settings, chat=chat)
        return self.sampler.stream(prompt, self.adapters, settings, chat=chat)

    def compare(self, prompts: Sequence[Prompt], settings: SamplingSettings, *, chat: bool = True
                ) -> list[dict[str, Any]]:
        """Base and tuned outputs for each prompt (one batched computation for a LoRA run)."""
        if self.tuned_sampler is None:
            results = self.sampler.ab(prompts, self.adapters, settings, chat=chat)
        else:
            base = self.sampler.generate_grid(prompts, [None], settings, chat=chat)[0]
            tuned = self.tuned_sampler.generate_grid(prompts, [None], settings, chat=chat)[0]
            results = [{"prompt": p if isinstance(p, str) else list(p), "base": b["text"],
                        "tuned": t["text"], "settings": settings.to_dict()}
                       for p, b, t in zip(prompts, base, tuned, strict=True)]
        for r in results:
            r["step"] = self.step
        return results


def load_run(run: str, step: int | None = None) -> Tuned:
    """The base and tuned model of a run's checkpoint (latest when ``step`` is None)."""
    from adapters_lib import runs

    run_dir = runs.find_run(run)
    if run_dir.config().model.backend == "keras":
        return KerasRunTuned(run_dir.path, step)
    cfg, loaded, trainable, got = runs.load_tuned(run_dir.path, step)
    if cfg.lora.enabled:
        return Tuned(Sampler.from_loaded(loaded, cfg.lora), trainable, step=got, run_path=run_dir.path,
                     source=cfg.model.source)
    return Tuned(Sampler.from_loaded(loaded), None, Sampler(loaded.model, trainable, loaded.tokenizer),
                 step=got, run_path=run_dir.path, source=cfg.model.source)


class KerasRunTuned:
    """A/B for a Keras-route run: the same ``compare`` as ``Tuned``, through keras-hub's
    generation (greedy; the Keras model toggles its LoRA off for the base answers)."""

    def __init__(self, run_path: Any, step: int | None):
        from adapters_lib.keras_route import load_keras_tuned

        self.keras = load_keras_tuned(run_path, step)
        self.step = self.keras.step
        self.run_path = run_path
        self.source = self.keras.cfg.model.source

    def compare(self, prompts: Sequence[Prompt], settings: SamplingSettings, *, chat: bool = True
                ) -> list[dict[str, Any]]:
        n = settings.max_new_tokens
        base = self.keras.answers(list(prompts), tuned=False, max_new_tokens=n)
        tuned = self.keras.answers(list(prompts), tuned=True, max_new_tokens=n)
        return [{"prompt": p if isinstance(p, str) else list(p), "base": b, "tuned": t,
                 "settings": {**settings.to_dict(), "backend": "keras", "decoding": "greedy"},
                 "step": self.step}
                for p, b, t in zip(prompts, base, tuned, strict=True)]


def load_adapter_dir(directory: str, model: str = "") -> Tuned:
    """A base model plus an exported adapter folder (``model`` defaults to the adapter's base)."""
    from adapters_lib import export
    from adapters_lib.config import ModelSpec
    from adapters_lib.models.loader import load_model

    spec, base_model = export.read_adapter_config(directory)
    source = model or base_model or "demo"
    loaded = load_model(ModelSpec(source=source), param_dtype="float32")
    adapters = export.load_adapter(directory, loaded.model, spec)
    return Tuned(Sampler.from_loaded(loaded, spec), adapters, source=source)


def read_prompts(path: str) -> list[str]:
    """Prompts from a file: ``.jsonl`` objects with "prompt" (or chat "messages"), else one a line."""
    import json
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise WorkbenchError(f"prompt file {path!r} not found", where="--prompts")
    prompts: list[str] = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        if p.suffix == ".jsonl":
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise WorkbenchError(f"invalid JSON ({e.msg})", where=f"{path}:{n}") from None
            if isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
                prompts.append(obj["prompt"])
            elif isinstance(obj, dict) and isinstance(obj.get("messages"), list):
                users = [m for m in obj["messages"] if m.get("role") == "user"]
                prompts.append(users[-1]["content"] if users else "")
            else:
                raise WorkbenchError('expected an object with "prompt"', where=f"{path}:{n}")
            check_prompt(prompts[-1], where=f"{path}:{n}")
        else:
            prompts.append(line)
    if not prompts:
        raise WorkbenchError("the prompt file has no prompts", where=path)
    return prompts


def save_compare(run_path: Any, results: Sequence[Mapping[str, Any]]) -> Any:
    """Append-free record of one comparison: ``<run>/compare/<timestamp>.jsonl``."""
    import json
    from pathlib import Path

    folder = Path(run_path) / "compare"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = folder / f"{stamp}.jsonl"
    n = 1
    while path.exists():
        n += 1
        path = folder / f"{stamp}-{n}.jsonl"
    path.write_text("".join(json.dumps(dict(r)) + "\n" for r in results), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- speed


def measure_ab_speed(loaded: Any, spec: LoraSpec, lora: Any, prompts: Sequence[str], *,
                     max_new_tokens: int = 64, repeats: int = 5, ref_cache_length: int = 512) -> dict[str, Any]:
    """A/B pair tokens/s, ours (one batched computation) vs two sequential ``gm.text.Sampler`` calls.

    Greedy, the same prompts and stop tokens on both sides; tokens counted the same way
    (every generated token, the end token included). Median of ``repeats`` after one
    warm-up each, the two sides alternating.
    """
    import statistics

    from gemma import gm

    from adapters_lib import lora as lora_lib

    settings = SamplingSettings(max_new_tokens=max_new_tokens)
    ours = Sampler.from_loaded(loaded, spec)
    texts = [format_chat([{"role": "user", "content": p}]) for p in prompts]  # the reference's input
    # pad_length=None: the reference prefills the prompt unpadded (its strongest setting here;
    # the default pads every prompt to 256 tokens)
    ref_kwargs = dict(tokenizer=loaded.tokenizer, cache_length=ref_cache_length,
                      max_out_length=max_new_tokens, pad_length=None)
    ref_base = gm.text.Sampler(model=loaded.model, params=loaded.params, **ref_kwargs)
    ref_tuned = gm.text.Sampler(model=lora_lib.wrap(loaded.model, spec),
                                params=lora_lib.merge_lora(loaded.params, lora), **ref_kwargs)

    def run_ours() -> int:
        grid = ours.generate_grid(texts, [None, lora], settings, chat=False)  # the same ids
        return sum(c["steps"] for row in grid for c in row)

    def run_ref() -> int:
        n = 0
        for s in (ref_base, ref_tuned):
            out = s.sample(texts, max_new_tokens=max_new_tokens, return_state=True)
            n += int((out.state.predicted_tokens != 0).sum())
        return n

    def timed(fn) -> tuple[float, int]:
        t0 = time.perf_counter()
        n = fn()
        return time.perf_counter() - t0, n

    timed(run_ours), timed(run_ref)  # warm-up (compile)
    ours_t, ref_t = [], []
    for _ in range(repeats):  # alternate, so drifts hit both sides alike
        t, n_ours = timed(run_ours)
        ours_t.append(n_ours / t)
        t, n_ref = timed(run_ref)
        ref_t.append(n_ref / t)
    o, r = statistics.median(ours_t), statistics.median(ref_t)
    return {"ours_tokens_per_s": o, "ref_tokens_per_s": r, "ratio": o / r,
            "prompts": len(prompts), "max_new_tokens": max_new_tokens, "repeats": repeats}
