"""Tiny Gemma 4 and Gemma 3n GGUFs written the way llama.cpp's converter writes them
(``conversion/gemma.py``: ``Gemma4Model``, ``Gemma3NModel``, their ``set_gguf_parameters``,
``set_vocab`` and ``modify_tensors``), with gguf-py's ``GGUFWriter`` (plain builders).

- names: gguf-py's tensor map for the arch (``blk.N.attn_q``, ``ffn_gate_up_exps``,
  ``altup_proj`` …); norms stored as they are (no ``1 + w``);
- Gemma 4: ``router.scale``/``per_expert_scale`` as ``ffn_gate_inp.scale``/``ffn_down_exps.scale``,
  ``layer_scalar`` as ``layer_output_scale``, a ``rope_freqs`` tensor (1.0 × rotated pairs, 1e30
  × the rest), ``key_length`` the global head size and ``key_length_swa`` the local one, the KV
  heads and (double-wide) MLP widths per layer; the tokenizer as ``gemma4`` tokens + merges;
- Gemma 3n: the AltUp projections stacked, ``per_layer_token_embd`` padded with zeros to
  ``token_embd``'s rows, the sparsity as Gaussian quantiles, the vocabulary padded with
  ``[PADn]`` pieces to the embedding's rows (SentencePiece ``llama`` tokenizer).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from adapters_lib.models import families
from adapters_lib.models.hf import hf_convert


def _gguf_of(hf: str, own) -> tuple[str, int | None]:
    head, _, rest = hf.partition(".")
    if hf in own.GGUF_TOP:
        return own.GGUF_TOP[hf], None
    if head in getattr(own, "GGUF_STACKED", {}):
        return own.GGUF_STACKED[head], int(rest.split(".")[0])
    layer, _, inner = rest.partition(".")
    return f"blk.{layer}.{own.GGUF_BLOCK[inner]}", None


def gguf_e_tensors(params: dict, arch, *, drop_shared_kv: bool = False,
                   split_experts: bool = False) -> dict[str, np.ndarray]:
    """GGUF name → float32 tensor, llama.cpp's layout."""
    own = families.hf_map(arch)
    out: dict[str, np.ndarray] = {}
    stacked: dict[str, dict[int, np.ndarray]] = {}
    for name, value in hf_convert.gemma_to_hf(params, arch=arch).items():
        hf = name[len("model."):]
        if drop_shared_kv and own.omitted_fill(hf, arch) is not None:
            continue  # transformers' save drops the KV-shared layers' k/v
        gguf_name, row = _gguf_of(hf, own)
        value = np.asarray(value, np.float32)
        if row is not None:
            stacked.setdefault(gguf_name, {})[row] = value
        elif split_experts and gguf_name.endswith("ffn_gate_up_exps.weight"):
            half = value.shape[1] // 2
            stem = gguf_name[: -len("ffn_gate_up_exps.weight")]
            out[stem + "ffn_gate_exps.weight"], out[stem + "ffn_up_exps.weight"] = value[:, :half], value[:, half:]
        else:
            out[gguf_name] = value
    for gguf_name, rows in stacked.items():
        out[gguf_name] = np.stack([rows[i] for i in sorted(rows)])
    if arch.family == "gemma3n":  # padded to the embedding's rows, as llama.cpp pads it
        table = out["per_layer_token_embd.weight"]
        pad = out["token_embd.weight"].shape[0] - table.shape[0]
        out["per_layer_token_embd.weight"] = np.concatenate([table, np.zeros((pad, table.shape[1]), np.float32)])
    if arch.family == "gemma4":
        rotated = int(arch.global_head_dim * arch.global_rope_proportion / 2)
        out["rope_freqs.weight"] = np.array([1.0] * rotated + [1e30] * (arch.global_head_dim // 2 - rotated),
                                            np.float32)
    return out


def bpe_merges(tokenizer: Path) -> tuple[list[str], list[str]]:
    """(pieces, merges) of a SentencePiece BPE model as transformers' ``tokenizer.json`` holds
    them: the pieces as they are (``▁`` kept), the merges ``"a b"`` for every split of each
    normal piece into two pieces, in the order of the merged piece (its score)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.ParseFromString(Path(tokenizer).read_bytes())
    pieces = [p.piece for p in proto.pieces]
    ids = {p: i for i, p in enumerate(pieces)}
    merges = []
    for p in proto.pieces:
        if p.type != pb.ModelProto.SentencePiece.NORMAL or len(p.piece) < 2:
            continue
        splits = [(p.piece[:k], p.piece[k:]) for k in range(1, len(p.piece))]
        merges += [f"{a} {b}" for a, b in sorted((x for x in splits if x[0] in ids and x[1] in ids),
                                                 key=lambda x: (ids[x[0]], ids[x[1]]))]
    return pieces, merges


def _tokenizer(w, tokenizer: Path, arch, rows: int) -> None:
    from fixtures_gguf import sp_vocab

    v = sp_vocab(tokenizer)
    tokens, scores, types = v["tokens"], v["scores"], v["types"]
    if arch.family == "gemma4":  # LlamaHfVocab: tokenizer.json's pieces, score -1000, merges beside
        pieces, merges = bpe_merges(tokenizer)
        w.add_tokenizer_model("gemma4")
        w.add_token_list(pieces)
        w.add_token_scores([-1000.0] * len(pieces))
        w.add_token_types(types)
        w.add_token_merges(merges)
    else:  # SentencePiece ("llama"), padded to vocab_size with [PADn] pieces
        pad = list(range(len(tokens), rows))
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens + [f"[PAD{i}]" for i in pad])
        w.add_token_scores(scores + [-1000.0] * len(pad))
        w.add_token_types(types + [5] * len(pad))
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(False)


def write_gguf_e(path: Path, params: dict, arch, *, tokenizer: Path | None = None,
                 drop_shared_kv: bool = False, split_experts: bool = False, name: str = "") -> Path:
    import gguf

    w = gguf.GGUFWriter(path, arch.family)
    w.add_name(name or f"{families.family(arch.family).label} Tiny")
    w.add_block_count(arch.num_layers)
    w.add_context_length(32768)
    w.add_embedding_length(arch.embed_dim)
    w.add_head_count(arch.num_heads)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(float(arch.global_rope))
    w.add_rope_freq_base_swa(float(arch.local_rope))
    w.add_sliding_window(arch.sliding_window)
    if arch.final_logit_softcap:
        w.add_final_logit_softcapping(arch.final_logit_softcap)
    w.add_sliding_window_pattern([a == "local" for a in arch.attention])
    w.add_shared_kv_layers(arch.kv_shared_layers)
    w.add_embedding_length_per_layer_input(arch.per_layer_input_dim)
    if arch.family == "gemma4":
        gh = arch.global_head_dim or arch.head_dim
        w.add_key_length(gh)
        w.add_value_length(gh)
        w.add_key_length_swa(arch.head_dim)
        w.add_value_length_swa(arch.head_dim)
        first_shared = arch.num_layers - arch.kv_shared_layers
        w.add_feed_forward_length([arch.hidden_dim if i < first_shared or not arch.kv_shared_ffw_hidden
                                   else arch.kv_shared_ffw_hidden for i in range(arch.num_layers)])
        w.add_head_count_kv([arch.num_kv_heads if a == "local" else (arch.num_global_kv_heads or arch.num_kv_heads)
                             for a in arch.attention])
        w.add_rope_dimension_count(gh)
        w.add_rope_dimension_count_swa(int(arch.head_dim * arch.local_rope_proportion))
        if arch.moe:
            w.add_expert_count(arch.num_experts)
            w.add_expert_used_count(arch.top_k_experts)
            w.add_expert_feed_forward_length(arch.expert_dim)
    else:
        w.add_key_length(arch.head_dim)
        w.add_value_length(arch.head_dim)
        w.add_feed_forward_length([arch.hidden_dim] * arch.num_layers)
        w.add_head_count_kv(arch.num_kv_heads)
        w.add_altup_active_idx(0)
        w.add_altup_num_inputs(arch.altup_inputs)
        w.add_activation_sparsity_scale([_ppf(s) for s in arch.activation_sparsity])
    values = gguf_e_tensors(params, arch, drop_shared_kv=drop_shared_kv, split_experts=split_experts)
    if tokenizer is not None:
        _tokenizer(w, tokenizer, arch, values["token_embd.weight"].shape[0])
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    for tname, value in values.items():
        w.add_tensor(tname, value.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _ppf(p: float) -> float:
    """The standard normal quantile (what llama.cpp stores: ``Normal(0, 1).icdf(s)``); -inf at 0."""
    if p <= 0.0:
        return -math.inf
    lo, hi = -10.0, 10.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
