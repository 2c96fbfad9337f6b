"""Reference implementations: the straightforward way the official docs do it, not weakened.

- ref-gemma: ``gm.nn.LoRA`` + ``optax.adamw`` + ``jax.jit``; batches padded to the longest
  example; the loss read back every step (its adapters made with gm.nn.LoRA's initialisers
  on abstractly traced shapes: setup, not timed).
- ref-sampler: ``gm.text.Sampler`` called once per model.
- ref-keras: keras-hub ``GemmaCausalLM`` + ``enable_lora`` + ``fit`` (see bench/measures.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from gemma import gm, peft


@dataclass
class RefGemmaTrainer:
    """gm.nn.LoRA (every einsum adapted, rank r) trained with optax.adamw under jax.jit."""

    model: Any
    base_params: Any
    rank: int = 8
    learning_rate: float = 1e-3
    dtype: Any = jnp.float32

    def __post_init__(self):
        self.lora_model = gm.nn.LoRA(rank=self.rank, model=self.model, dtype=self.dtype)
        self.lora = _lora_init(self.lora_model, self.dtype)
        self.optimizer = optax.adamw(self.learning_rate)
        self.opt_state = self.optimizer.init(self.lora)
        lora_model, optimizer = self.lora_model, self.optimizer

        def loss_fn(lora, base, tokens, mask):
            params = peft.merge_params(base, lora)
            logits = lora_model.apply({"params": params}, tokens[:, :-1]).logits
            ce = optax.softmax_cross_entropy_with_integer_labels(
                logits.astype(jnp.float32), tokens[:, 1:]
            )
            m = mask[:, 1:].astype(jnp.float32)
            return jnp.sum(ce * m) / jnp.maximum(jnp.sum(m), 1.0)

        @jax.jit
        def step(lora, opt_state, base, tokens, mask):
            loss, grads = jax.value_and_grad(loss_fn)(lora, base, tokens, mask)
            updates, opt_state = optimizer.update(grads, opt_state, lora)
            return optax.apply_updates(lora, updates), opt_state, loss

        self._step = step

    def trainable_count(self) -> int:
        return int(sum(x.size for x in jax.tree.leaves(self.lora)))

    def step(self, tokens: np.ndarray, mask: np.ndarray) -> float:
        self.lora, self.opt_state, loss = self._step(
            self.lora, self.opt_state, self.base_params, jnp.asarray(tokens), jnp.asarray(mask)
        )
        return float(loss)  # the reference reads the loss back every step


def _lora_init(lora_model, dtype) -> Any:
    """``gm.nn.LoRA``'s adapter params as its ``init`` makes them (A kaiming-uniform, B zeros),
    with the shapes from an abstract ``init``: a concrete one compiles and runs the whole model's
    initialisation (~40 s on 2 cores at 270M) only to throw the base weights away. Setup only:
    the timed step is the same either way."""
    from adapters_lib.lora import init_adapters

    shapes = jax.eval_shape(lora_model.init, jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
    _, lora_shapes = peft.split_params(shapes)
    flat, tree = jax.tree_util.tree_flatten_with_path(lora_shapes)
    return init_adapters(flat, tree, dtype, jax.random.key(0), is_b=lambda name: name == "b")


def pad_to_longest(examples: list[list[int]], loss_masks: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """The reference batching: each batch padded to its longest example."""
    width = max(len(e) for e in examples)
    tokens = np.zeros((len(examples), width), np.int32)
    mask = np.zeros((len(examples), width), np.int32)
    for i, (e, m) in enumerate(zip(examples, loss_masks, strict=True)):
        tokens[i, : len(e)] = e
        mask[i, : len(m)] = m
    return tokens, mask


def ref_chat_batches(tokenizer, examples: list[dict], batch: int, n_batches: int,
                     max_len: int) -> tuple[list[tuple[np.ndarray, np.ndarray]], float]:
    """The reference's training batches of chat ``examples``: BOS, then each turn's tokens (the
    loss on the answer, as ours: ``chat_template.segments``), cut to ``max_len``, ``batch`` rows
    padded to the longest. Returns the ``n_batches`` batches and their loss-bearing targets."""
    from adapters_lib.data.chat_template import segments

    batches, useful = [], 0.0
    for i in range(n_batches):
        toks, masks = [], []
        for ex in examples[i * batch:(i + 1) * batch]:
            ids, m = [2], [0]
            for text, counts in segments(ex["messages"]):
                piece = tokenizer.encode(text)
                ids += piece
                m += [int(counts)] * len(piece)
            toks.append(ids[:max_len])
            masks.append(m[:max_len])
        tk, mk = pad_to_longest(toks, masks)
        batches.append((tk, mk))
        useful += float(mk[:, 1:].sum())
    return batches, useful


def ref_sampler_pair(model, base_params, tuned_params, tokenizer, prompt: str, max_new_tokens: int,
                     tuned_model=None) -> tuple[str, str, float]:
    """Two sequential gm.text.Sampler calls (base, then tuned). Returns texts and seconds."""
    common = dict(tokenizer=tokenizer, cache_length=512, max_out_length=max_new_tokens,
                  pad_length=None)
    s_base = gm.text.Sampler(model=model, params=base_params, **common)
    s_tuned = gm.text.Sampler(model=tuned_model or model, params=tuned_params, **common)
    t = time.perf_counter()
    a = s_base.sample(prompt, max_new_tokens=max_new_tokens)
    b = s_tuned.sample(prompt, max_new_tokens=max_new_tokens)
    return a, b, time.perf_counter() - t
