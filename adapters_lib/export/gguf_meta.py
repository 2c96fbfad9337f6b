"""The metadata of an exported GGUF: the keys llama.cpp's own Gemma converter writes.

``convert_hf_to_gguf.py`` (``conversion/gemma.py``: ``Gemma2Model``, ``Gemma3Model``; the
``TextModel`` base) writes, and these functions write the same from an ``Arch``:

- ``general.*``: architecture, type (``model``/``adapter``), name, size label, file type,
  quantization version;
- ``<arch>.*``: context length, embedding/feed-forward length, block count, heads, kv heads,
  key/value length, RMS eps, RoPE base (global; ``rope.freq_base_swa`` for the local layers),
  linear RoPE scaling, sliding window, soft-caps (Gemma 2: attention and final; Gemma 3:
  final when set). llama.cpp hard-codes the attention pattern (Gemma 2: every 2nd layer
  global, Gemma 3: every 6th) and reads ``attention.sliding_window_pattern`` (one bool per
  layer) when the file has it: it is written only when the model's pattern differs;
- ``tokenizer.ggml.*``: the pieces, scores and types, the special ids, ``add_bos`` and the
  chat template. A base GGUF's tokenizer keys are copied as they are; a SentencePiece
  ``tokenizer.model`` is turned into them as ``_create_vocab_sentencepiece`` does, with the
  special pieces (``<start_of_turn>``…, HF's ``added_tokens_decoder`` entries marked
  special) typed CONTROL.

llama.cpp derives the query scale from the layer count (the 27B sizes: ``embed / heads``,
else ``head_dim``); a model whose scale it would get wrong is refused (``check_arch``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.models.families import Arch

GGUF_FAMILIES = ("gemma2", "gemma3")
"""Families written as GGUF here (``general.architecture`` is the family name)."""
RMS_EPS = 1e-6
DEFAULT_PATTERN = {"gemma2": 2, "gemma3": 6}
"""llama.cpp's attention pattern when the file has none: every n-th layer global."""
LARGE_LAYERS = {"gemma2": 46, "gemma3": 62}
"""The layer count of the 27B sizes, where llama.cpp scales queries by embed / heads."""

# token types (llama.cpp's LLAMA_TOKEN_TYPE_*, gguf.TokenType)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_SPECIAL_LOOK = re.compile(r"^(<[^<>\s]+>|\[[^\[\]\s]+\])$")

GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\\n'}}\n"
    "{%- endif -%}\n"
)
"""The Gemma 3 instruction-tuned models' template (their ``tokenizer_config.json``; image
items left out): a system message is folded into the first user turn, as the workbench
trains it. Written for Gemma 2 too (its own template refuses a system message)."""
STOP_TOKENS = ("<end_of_turn>",)


def check_arch(arch: Arch) -> None:
    """Refuse a model llama.cpp would run differently from the workbench (one line)."""
    if arch.family not in GGUF_FAMILIES:
        raise WorkbenchError(f"a {arch.family} model cannot be written as GGUF by this build",
                             where="--format gguf",
                             hint="export --format hf and convert it with llama.cpp's "
                                  "convert_hf_to_gguf.py")
    large = arch.num_layers == LARGE_LAYERS[arch.family]
    llama_scalar = arch.embed_dim / arch.num_heads if large else arch.head_dim
    if float(arch.query_pre_attn_scalar) != float(llama_scalar):
        raise WorkbenchError(
            f"query_pre_attn_scalar {arch.query_pre_attn_scalar:g}: llama.cpp would scale "
            f"queries by 1/sqrt({llama_scalar:g}) for a {arch.num_layers}-layer {arch.family}",
            where="--format gguf", hint="export --format hf instead")


def context_length(arch: Arch) -> int:
    """The trained context length llama.cpp's converter copies from ``config.json``."""
    if arch.family == "gemma2":
        return 8192
    return 32_768 if arch.embed_dim <= 1152 else 131_072


def pattern_differs(arch: Arch) -> bool:
    every = DEFAULT_PATTERN[arch.family]
    default = tuple("local" if i % every < every - 1 else "global" for i in range(arch.num_layers))
    return tuple(arch.attention) != default


def add_arch_keys(writer: Any, arch: Arch, *, context: int | None = None) -> None:
    """The ``<arch>.*`` hyper-parameters (see the module doc)."""
    import gguf

    w = writer
    w.add_context_length(int(context or context_length(arch)))
    w.add_embedding_length(arch.embed_dim)
    w.add_block_count(arch.num_layers)
    w.add_feed_forward_length(arch.hidden_dim)
    w.add_head_count(arch.num_heads)
    w.add_head_count_kv(arch.num_kv_heads)
    w.add_key_length(arch.head_dim)
    w.add_value_length(arch.head_dim)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_rope_freq_base(float(arch.global_rope))
    if arch.family == "gemma3" or arch.local_rope != arch.global_rope:
        w.add_rope_freq_base_swa(float(arch.local_rope))
    if arch.global_rope_scale != 1.0:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(arch.global_rope_scale))
    if arch.sliding_window:
        w.add_sliding_window(int(arch.sliding_window))
        if pattern_differs(arch):
            w.add_sliding_window_pattern([a == "local" for a in arch.attention])
    if arch.attn_logit_softcap:
        w.add_attn_logit_softcapping(float(arch.attn_logit_softcap))
    if arch.final_logit_softcap:
        w.add_final_logit_softcapping(float(arch.final_logit_softcap))


def add_general(writer: Any, *, name: str, kind: str = "model", finetune: str = "",
                size_label: str = "", file_type: int | None = None) -> None:
    import gguf

    writer.add_type(kind)
    writer.add_name(name)
    if finetune:
        writer.add_finetune(finetune)
    if size_label:
        writer.add_size_label(size_label)
    if file_type is not None:
        writer.add_file_type(int(file_type))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


# --------------------------------------------------------------------------- tokenizer


def vocab_from_sentencepiece(path: str | Path, vocab_size: int) -> dict[str, Any]:
    """Pieces, scores, types and special ids as llama.cpp's converter makes them."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.ParseFromString(Path(path).read_bytes())
    kinds = pb.ModelProto.SentencePiece.Type
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    scores = [-10000.0] * vocab_size
    types = [UNUSED] * vocab_size
    for i, p in enumerate(proto.pieces[:vocab_size]):
        kind = {kinds.NORMAL: NORMAL, kinds.UNKNOWN: UNKNOWN, kinds.CONTROL: CONTROL,
                kinds.USER_DEFINED: USER_DEFINED, kinds.BYTE: BYTE, kinds.UNUSED: UNUSED}[p.type]
        text, score = p.piece, float(p.score)
        if kind == USER_DEFINED:  # HF's added tokens: special ones CONTROL, others pre-normalized
            score = -1000.0
            if _SPECIAL_LOOK.match(text):
                kind = CONTROL
            else:
                text = text.replace("\u2581", " ")
        tokens[i], scores[i], types[i] = text, score, kind
    ts = proto.trainer_spec
    return {"tokens": tokens, "scores": scores, "types": types,
            "bos": ts.bos_id, "eos": ts.eos_id, "unk": ts.unk_id, "pad": ts.pad_id,
            "add_space_prefix": bool(proto.normalizer_spec.add_dummy_prefix)}


def add_vocab(writer: Any, vocab: dict[str, Any], chat_template: str = GEMMA_CHAT_TEMPLATE) -> None:
    """``tokenizer.ggml.*`` from ``vocab_from_sentencepiece``'s dict."""
    w = writer
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(vocab["tokens"])
    w.add_token_scores(vocab["scores"])
    w.add_token_types(vocab["types"])
    for key, add in (("bos", w.add_bos_token_id), ("eos", w.add_eos_token_id),
                     ("unk", w.add_unk_token_id), ("pad", w.add_pad_token_id)):
        if vocab[key] >= 0:
            add(int(vocab[key]))
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(chat_template)
    w.add_add_space_prefix(vocab["add_space_prefix"])


def copy_tokenizer_keys(writer: Any, reader: Any, vocab_size: int) -> None:
    """The base GGUF's ``tokenizer.*`` keys, as they are (plus the chat template if absent)."""
    import gguf

    fields = [f for name, f in reader.fields.items() if name.startswith("tokenizer.")]
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is not None and len(tokens.data) != vocab_size:
        raise WorkbenchError(f"the base GGUF has {len(tokens.data)} tokens, the model "
                             f"{vocab_size} rows", where="--format gguf")
    for f in fields:
        kind = f.types[0]
        sub = f.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, f.contents(), kind, sub_type=sub)
    if "tokenizer.chat_template" not in reader.fields:
        writer.add_chat_template(GEMMA_CHAT_TEMPLATE)


def base_context_length(reader: Any) -> int | None:
    arch = reader.fields.get("general.architecture")
    if arch is None:
        return None
    f = reader.fields.get(f"{arch.contents()}.context_length")
    return int(f.contents()) if f is not None else None
