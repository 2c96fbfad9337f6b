"""Tiny GGUF files as llama.cpp writes them, and the stores that hold them.

Builders (plain functions):
- ``write_gguf(path, params, arch, …)``: a GGUF written with the ``gguf`` package's
  ``GGUFWriter`` the way llama.cpp's ``convert_hf_to_gguf.py`` writes Gemma: llama.cpp
  tensor names, every norm weight stored as ``1 + w``, the tokenizer as
  ``tokenizer.ggml.*`` metadata (from a SentencePiece model: unk typed CONTROL, the turn
  markers CONTROL, space-only pieces spelled with real spaces), tensors in the given
  GGML types (``qtypes``: GGUF name pattern → type; the rest ``default``);
- ``ollama_store(root, name, tag, blob_bytes)``: ``manifests/…/<tag>`` + ``blobs/sha256-…``;
- ``lmstudio_store(root, publisher, repo, files)``: ``<publisher>/<repo>/<file>.gguf``.

Fixture ``gguf_env`` (session): the demo-shaped Gemma 3 as GGUF in several types, a Gemma 2,
a truncated file, a Llama, one without a vocabulary, a split file, in an HF cache, an Ollama
store, an LM Studio folder and a plain folder. ``gguf_stores`` (per test) points
``HF_HUB_CACHE``/``OLLAMA_MODELS``/``LMSTUDIO_MODELS`` at them.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from adapters_lib.models import families
from adapters_lib.models.gguf import gguf_arch
from adapters_lib.models.hf import hf_convert


def sp_vocab(tokenizer: Path) -> dict[str, Any]:
    """A SentencePiece model's vocabulary as llama.cpp stores it in a GGUF."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.ParseFromString(Path(tokenizer).read_bytes())
    kinds = pb.ModelProto.SentencePiece.Type
    tokens, scores, types = [], [], []
    for i, p in enumerate(proto.pieces):
        text = p.piece
        if len(text) > 1 and set(text) == {"\u2581"}:
            text = " " * len(text)  # llama.cpp spells space-only pieces with spaces
        kind = {kinds.NORMAL: 1, kinds.UNKNOWN: 3, kinds.CONTROL: 3, kinds.USER_DEFINED: 4,
                kinds.BYTE: 6, kinds.UNUSED: 5}[p.type]
        if p.piece in ("<start_of_turn>", "<end_of_turn>"):
            kind = 3  # HF's added special tokens come out as CONTROL
        tokens.append(text)
        scores.append(p.score if kind == 1 else (0.0 if i > 3 else -1000.0))
        types.append(kind)
    return {"tokens": tokens, "scores": scores, "types": types}


def gguf_tensors(params: dict, arch: families.Arch) -> dict[str, np.ndarray]:
    """GGUF name → float32 tensor, llama.cpp's conventions applied (names, ``1 + w`` norms)."""
    hf = hf_convert.gemma_to_hf(params, arch=arch)
    names = gguf_arch.gguf_names(arch)
    out = {}
    for hf_name, value in hf.items():
        name = names[hf_name]
        out[name] = np.asarray(value, np.float32) + np.float32(gguf_arch.norm_offset(name))
    return out


def write_gguf(path: Path, params: dict | None, arch: families.Arch, *,
               tokenizer: Path | None = None, default: str = "F32",
               qtypes: dict[str, str] | None = None, architecture: str | None = None,
               name: str = "Gemma 3 Demo", finetune: str = "", vocab: bool = True,
               extra: dict[str, Any] | None = None, tensors: dict[str, np.ndarray] | None = None,
               split_max_tensors: int = 0) -> Path:
    import gguf

    arch_name = architecture or arch.family
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(path, arch_name, split_max_tensors=split_max_tensors)
    w.add_name(name)
    if finetune:
        w.add_string("general.finetune", finetune)
    w.add_block_count(arch.num_layers)
    w.add_context_length(32768)
    w.add_embedding_length(arch.embed_dim)
    w.add_feed_forward_length(arch.hidden_dim)
    w.add_head_count(arch.num_heads)
    w.add_head_count_kv(arch.num_kv_heads)
    w.add_key_length(arch.head_dim)
    w.add_value_length(arch.head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(float(arch.global_rope))
    if arch.sliding_window:
        w.add_sliding_window(arch.sliding_window)
    if arch.final_logit_softcap:
        w.add_float32(f"{arch_name}.final_logit_softcapping", arch.final_logit_softcap)
    if arch.attn_logit_softcap:
        w.add_float32(f"{arch_name}.attn_logit_softcapping", arch.attn_logit_softcap)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q8_0 if default == "Q8_0" else
                        gguf.LlamaFileType.ALL_F32 if default == "F32" else
                        gguf.LlamaFileType.MOSTLY_F16))
    for key, value in (extra or {}).items():
        if isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        else:
            w.add_uint32(key, int(value))
    if vocab:
        v = sp_vocab(tokenizer)
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(v["tokens"])
        w.add_token_scores(v["scores"])
        w.add_token_types(v["types"])
        w.add_bos_token_id(2)
        w.add_eos_token_id(1)
        w.add_unk_token_id(3)
        w.add_pad_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        w.add_add_space_prefix(False)
    values = tensors if tensors is not None else gguf_tensors(params, arch)
    for tname, value in values.items():
        kind = default if value.ndim > 1 else "F32"
        for pattern, qtype in (qtypes or {}).items():
            if re.search(pattern, tname):
                kind = qtype
        add_tensor(w, tname, value, kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def add_tensor(writer: Any, name: str, value: np.ndarray, kind: str) -> None:
    import gguf

    qtype = gguf.GGMLQuantizationType[kind]
    if kind == "F32":
        writer.add_tensor(name, value.astype(np.float32))
    elif kind == "F16":
        writer.add_tensor(name, value.astype(np.float16))
    else:
        writer.add_tensor(name, gguf.quants.quantize(value.astype(np.float32), qtype),
                          raw_dtype=qtype)


def ollama_store(root: Path, model: str, tag: str, blob: bytes | None, *,
                 host: str = "registry.ollama.ai", namespace: str = "library",
                 size: int | None = None) -> Path:
    """An Ollama model: manifest + blobs (``blob=None``: the blob is missing). Returns the blob."""
    digest = "sha256:" + hashlib.sha256(blob or model.encode()).hexdigest()
    blob_path = root / "blobs" / digest.replace(":", "-")
    blob_path.parent.mkdir(parents=True, exist_ok=True)
    if blob is not None:
        blob_path.write_bytes(blob)
    manifest = root / "manifests" / host / namespace / model / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    layers = [{"mediaType": "application/vnd.ollama.image.model", "digest": digest,
               "size": size if size is not None else len(blob or b"")},
              {"mediaType": "application/vnd.ollama.image.template",
               "digest": "sha256:" + "0" * 64, "size": 10}]
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers,
                                    "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                                    "config": {"digest": "sha256:" + "1" * 64, "size": 2}}))
    return blob_path


@dataclass
class GGUFEnv:
    root: Path
    hf: Path
    ollama: Path
    lmstudio: Path
    folder: Path
    params: dict
    tokenizer: Path
    files: dict[str, Path]
    """Short names → GGUF paths: f32, q8, mixed, f16, gemma2, truncated, llama, novocab, split."""
    ids: dict[str, str]
    """Short names → catalog ids."""


@pytest.fixture(scope="session")
def gguf_env(tmp_path_factory: pytest.TempPathFactory, workbench_home) -> GGUFEnv:
    from fixtures_weights import DEMO_ARCH, TINY_GEMMA2, hf_cache_repo, tiny_params

    from adapters_lib.models import demo

    root = tmp_path_factory.mktemp("gguf")
    tok = demo.ensure_demo_tokenizer()
    params = tiny_params(DEMO_ARCH, seed=3)
    folder = root / "models"
    files: dict[str, Path] = {}
    files["f32"] = write_gguf(folder / "gemma3-demo-f32.gguf", params, DEMO_ARCH, tokenizer=tok)
    files["q8"] = write_gguf(folder / "gemma3-demo-q8_0.gguf", params, DEMO_ARCH, tokenizer=tok,
                             default="Q8_0")
    files["mixed"] = write_gguf(folder / "quants" / "gemma3-demo-mixed.gguf", params, DEMO_ARCH,
                                tokenizer=tok, default="Q8_0",
                                qtypes={r"attn_q\.": "Q4_0", r"ffn_up": "Q5_0",
                                        r"ffn_down": "Q4_1", r"attn_output": "BF16",
                                        r"attn_v\.": "F16"})
    g2 = tiny_params(TINY_GEMMA2, seed=4)
    files["gemma2"] = write_gguf(folder / "gemma2-tiny.gguf", g2, TINY_GEMMA2, tokenizer=tok,
                                 name="Gemma 2 Tiny")
    full = files["f32"].read_bytes()
    files["truncated"] = folder / "broken" / "gemma3-demo-truncated.gguf"
    files["truncated"].parent.mkdir(parents=True)
    files["truncated"].write_bytes(full[: len(full) * 2 // 3])
    llama_arch = families.Arch("gemma3", 2, 64, 128, 4, 16, 4, 1024, ("local", "global"), 16,
                               use_qk_norm=False, transpose_gating=True, query_pre_attn_scalar=16)
    files["llama"] = write_gguf(folder / "broken" / "tiny-llama.gguf", None, llama_arch,
                                tokenizer=tok, architecture="llama", name="Llama 3.2 1B Instruct",
                                tensors={"token_embd.weight": np.zeros((1024, 64), np.float32),
                                         "output_norm.weight": np.ones(64, np.float32)})
    files["novocab"] = write_gguf(folder / "broken" / "gemma3-novocab.gguf", params, DEMO_ARCH,
                                  tokenizer=tok, vocab=False)
    files["split"] = write_gguf(folder / "split" / "gemma3-demo.gguf", params, DEMO_ARCH,
                                tokenizer=tok, default="Q8_0", split_max_tensors=20)
    files["split"] = folder / "split" / "gemma3-demo-00001-of-00003.gguf"
    ids = {k: f"local:{p.resolve()}" for k, p in files.items()}

    it = write_gguf(root / "it.gguf", params, DEMO_ARCH, tokenizer=tok, default="Q8_0",
                    name="Gemma 3 Demo It", finetune="it")
    hf = root / "hf-hub"
    snap = hf_cache_repo(hf, "someone/gemma-3-demo-it-GGUF",
                         {"gemma-3-demo-it-Q8_0.gguf": it.read_bytes(),
                          "README.md": b"# demo\n"})
    files["hf"] = snap / "gemma-3-demo-it-Q8_0.gguf"
    ids["hf"] = "hf:someone/gemma-3-demo-it-GGUF/gemma-3-demo-it-Q8_0.gguf"

    ollama = root / "ollama"
    files["ollama"] = ollama_store(ollama, "gemma3", "demo", files["mixed"].read_bytes())
    ids["ollama"] = "ollama:gemma3:demo"
    ollama_store(ollama, "gemma3", "missing", None)
    ids["ollama_missing"] = "ollama:gemma3:missing"
    ollama_store(ollama, "gemma-3-demo-it-GGUF", "Q8_0", it.read_bytes(),
                 host="hf.co", namespace="someone")
    ids["ollama_hf"] = "ollama:hf.co/someone/gemma-3-demo-it-GGUF:Q8_0"

    lms = root / "lmstudio"
    lms_file = lms / "someone" / "gemma-3-demo-GGUF" / "gemma-3-demo-F32.gguf"
    lms_file.parent.mkdir(parents=True)
    lms_file.write_bytes(files["f32"].read_bytes())
    files["lmstudio"] = lms_file
    ids["lmstudio"] = "lmstudio:someone/gemma-3-demo-GGUF/gemma-3-demo-F32.gguf"
    return GGUFEnv(root=root, hf=hf, ollama=ollama, lmstudio=lms, folder=folder, params=params,
                   tokenizer=tok, files=files, ids=ids)


@pytest.fixture
def gguf_stores(gguf_env: GGUFEnv, monkeypatch: pytest.MonkeyPatch) -> GGUFEnv:
    monkeypatch.setenv("HF_HUB_CACHE", str(gguf_env.hf))
    monkeypatch.setenv("OLLAMA_MODELS", str(gguf_env.ollama))
    monkeypatch.setenv("LMSTUDIO_MODELS", str(gguf_env.lmstudio))
    monkeypatch.setenv("HOME", str(gguf_env.root / "home"))
    return gguf_env
