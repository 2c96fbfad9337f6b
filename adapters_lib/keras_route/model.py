"""The Keras model of a run: the tiny demo Gemma 3 (same tokenizer as the gemma demo), a
Keras preset folder (Gemma 2, 3, 3n, 4), or any catalog model keras-hub can convert — a Hugging
Face Gemma 2/3/4 folder as it is, a GGUF (the starter 270M among them) through the HF export of
its dequantized weights (``preset_dir``) — built under the run's distribution, held in int8 when
``[model] quantize = "int8"`` (Keras' own ``quantize``, ``backbones.quantize_int8``), with LoRA
on the chosen targets (``backbones.enable_lora``).

Keras must run on JAX: ``import_keras()`` sets ``KERAS_BACKEND=jax`` before the first keras
import of the process, and refuses to go on if keras was already imported with another
backend (set ``KERAS_BACKEND=jax`` before any keras import in the engine process).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters_lib.config import RunConfig
from adapters_lib.errors import WorkbenchError
from adapters_lib.keras_route.backbones import BACKBONES
from adapters_lib.keras_route.layout import ModelDims
from adapters_lib.keras_route.options import keras_dtype_policy


def import_keras():
    """``keras`` on the JAX backend (sets KERAS_BACKEND before the first import)."""
    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = "jax"
    import keras

    if keras.backend.backend() != "jax":
        raise WorkbenchError(
            f"keras was imported with the {keras.backend.backend()!r} backend before the Keras route ran",
            where="KERAS_BACKEND", hint="set KERAS_BACKEND=jax before starting the engine")
    return keras


def demo_dims() -> ModelDims:
    """The demo's shape, the same as the gemma demo's (adapters_lib.models.demo)."""
    from adapters_lib.models.demo import DEMO_VOCAB

    return ModelDims(vocab=DEMO_VOCAB, hidden=256, heads=4, kv_heads=1, head_dim=64, ffw=1024, layers=4)


def preset_config(source: str | Path) -> tuple[str, dict[str, Any]]:
    p = Path(source).expanduser()
    raw = json.loads((p / "config.json").read_text())
    return raw.get("class_name", ""), raw.get("config", raw)


@dataclass(frozen=True)
class KerasSource:
    """What ``[model] source`` names, as the Keras route reads it (``keras_source``)."""

    format: str
    """"demo", "keras-preset" or "hf-safetensors" (a GGUF arrives as its HF export)."""
    folder: Path | None = None
    """The folder keras-hub's ``from_preset`` reads (None for the demo)."""


KERAS_READS = ("keras-preset", "hf-safetensors", "gguf", "demo")
"""The catalog formats the Keras route builds from (keras-hub reads no orbax checkpoint)."""


def keras_entry(cfg: RunConfig) -> Any:
    """The catalog entry ``[model] source`` names, checked for what keras-hub reads: metadata
    only (nothing is loaded or converted), so a run can be refused before its folder exists."""
    from adapters_lib.catalog import NoWeightsFound, resolve

    src = cfg.model.source
    where = f"[model] source = {src!r}"
    try:
        entry = resolve(src)
    except NoWeightsFound:
        raise WorkbenchError(f"{src} is not a Keras preset folder, and holds no weights the "
                             "Keras route converts", where=where,
                             hint="point at a Keras preset (config.json + model.weights.h5), "
                                  "a Hugging Face folder (config.json + *.safetensors) or a "
                                  ".gguf file") from None
    check_keras_reads(entry, where, tokenizer=cfg.model.tokenizer)
    return entry


def keras_source(cfg: RunConfig) -> KerasSource:
    """``[model] source`` for keras-hub, resolved once by the catalog (``catalog.resolve``, the
    resolution the gemma route loads from): a catalog id (``local:``, ``kaggle:``, ``hf:``,
    ``ollama:``, ``lmstudio:``, ``starter:``) and a path to the same files are one source, and
    what is read follows the entry's format, never the shape of the string.

    A Keras preset or an HF safetensors folder is used as it is (keras-hub converts HF Gemma
    itself); a GGUF is dequantized once into an HF folder under
    ``<data dir>/keras-hf/<file sha256>-<dtype>/`` (``gguf_weights.export_hf_from_gguf``), with
    the tokenizer rebuilt from its vocabulary.
    """
    entry = keras_entry(cfg)
    if entry.format == "demo":
        return KerasSource("demo")
    if entry.format == "gguf":
        return KerasSource("hf-safetensors", _gguf_as_hf(entry, cfg.train.param_dtype))
    return KerasSource(entry.format, Path(entry.path))


def check_keras_reads(entry: Any, where: str, *, tokenizer: str = "") -> None:
    """One line when the Keras route cannot build ``entry`` (a catalog entry), naming the true
    cause; nothing is read beyond the catalog's metadata (``tokenizer``: ``[model] tokenizer``,
    which stands in for a tokenizer the checkpoint lacks)."""
    if entry.format not in KERAS_READS:
        raise WorkbenchError(f"keras-hub does not read a {entry.format} checkpoint (the Keras route "
                             "reads Keras presets, HF safetensors and GGUF files)", where=where, hint='use [model] backend = "gemma" for this checkpoint')
    # "unsupported" on a Keras preset is the gemma route's word (its own reader's limits):
    # keras-hub reads the preset itself, and model_dims names a backbone it does not train
    readable = entry.status == "ok" or (entry.format == "keras-preset" and entry.status == "unsupported")
    tokenizer_only = entry.status == "incomplete" and entry.tokenizer is None and "tokenizer" in entry.reason
    if not readable and not (tokenizer_only and tokenizer):
        raise WorkbenchError(f"{entry.status}: {entry.reason}", where=where)
    if entry.family == "gemma3n" and entry.format in ("hf-safetensors", "gguf"):
        raise WorkbenchError("keras-hub converts a Hugging Face Gemma 3n only together with its "
                             "vision and audio towers", where=where,
                             hint='use [model] backend = "gemma" (it loads this Gemma 3n), or a Keras preset')


def preset_dir(cfg: RunConfig) -> Path:
    """The folder keras-hub's ``from_preset`` reads for a non-demo ``[model] source``
    (``keras_source``)."""
    folder = keras_source(cfg).folder
    if folder is None:
        raise WorkbenchError("the demo model is built, not read from a folder", where="[model] source")
    return folder


def _gguf_as_hf(entry: Any, dtype: str) -> Path:
    import fcntl
    import shutil

    from adapters_lib import paths
    from adapters_lib.models import starter
    from adapters_lib.models.gguf import export_hf_from_gguf, file_sha256, gguf_arch, read_info

    path = starter.ensure_starter() if entry.source == "starter" else Path(entry.path)
    folder = paths.data_dir() / "keras-hf" / f"{file_sha256(path)[:32]}-{dtype}"
    if (folder / "config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if not (folder / "config.json").is_file():
            info = read_info(path)
            tmp = folder.with_name(f".{folder.name}.{os.getpid()}.partial")
            shutil.rmtree(tmp, ignore_errors=True)
            export_hf_from_gguf(info, gguf_arch.arch_from_gguf(info), tmp, dtype=dtype,
                                tokenizer=entry.tokenizer)
            os.replace(tmp, folder)  # config.json appears with the finished folder only
    return folder


def model_dims(cfg: RunConfig, source: KerasSource | None = None) -> ModelDims:
    """Dimensions for validation, read without building anything (a GGUF is exported once).
    ``source``: ``keras_source(cfg)`` when the caller has it."""
    source = source or keras_source(cfg)
    if source.format == "demo":
        return demo_dims()
    assert source.folder is not None
    if source.format != "keras-preset":
        from adapters_lib.models import families

        return dims_from_arch(families.from_hf_config(json.loads((source.folder / "config.json").read_text())))
    name, c = preset_config(source.folder)
    shown = cfg.model.source
    if name not in BACKBONES:
        raise WorkbenchError(f"{shown}/config.json is a {name or 'unknown class'}, not a keras-hub Gemma "
                             "backbone", where="[model] source",
                             hint=f"the Keras route trains {', '.join(BACKBONES)}")
    try:
        return ModelDims.from_keras_config(name, c)
    except KeyError as e:
        raise WorkbenchError(f"{shown}/config.json has no {e.args[0]!r}: not a Gemma backbone "
                             f"({name or 'unknown class'})", where="[model] source") from None


def dims_from_arch(arch: Any) -> ModelDims:
    """The dimensions of a catalog architecture (``models.families``: an HF or GGUF Gemma)."""
    return ModelDims(vocab=arch.vocab_size, hidden=arch.embed_dim, heads=arch.num_heads,
                     kv_heads=arch.num_kv_heads, head_dim=arch.head_dim, ffw=arch.hidden_dim,
                     layers=arch.num_layers, global_kv_heads=getattr(arch, "num_global_kv_heads", 0),
                     experts=getattr(arch, "num_experts", 0), expert_dim=getattr(arch, "expert_dim", 0),
                     per_layer=getattr(arch, "per_layer_input_dim", 0), per_layer_vocab=arch.vocab_size)


def tokenizer_path(cfg: RunConfig, source: KerasSource | None = None) -> str:
    """The SentencePiece model: model.tokenizer, the preset's assets, or the demo tokenizer."""
    if cfg.model.tokenizer:
        return cfg.model.tokenizer
    source = source or keras_source(cfg)
    if source.format == "demo":
        from adapters_lib.models.demo import ensure_demo_tokenizer

        return str(ensure_demo_tokenizer())
    assert source.folder is not None
    if source.format == "keras-preset":
        spm = source.folder / "assets" / "tokenizer" / "vocabulary.spm"
    else:
        spm = source.folder / "tokenizer.model"
    if not spm.is_file():
        raise WorkbenchError(f"no tokenizer at {spm}", where="[model] tokenizer",
                             hint="set [model] tokenizer to the preset's vocabulary.spm / tokenizer.model")
    return str(spm)


def keras_tokenizer(proto_path: str):
    """A keras-hub ``GemmaTokenizer`` over ``proto_path`` (same ids). The demo model names its
    special pieces ``<s>``/``</s>``; keras-hub looks for ``<bos>``/``<eos>``, so they are
    renamed in an in-memory copy of the proto (ids and segmentation unchanged)."""
    import keras_hub
    from sentencepiece import sentencepiece_model_pb2 as pb

    m = pb.ModelProto()
    m.ParseFromString(Path(proto_path).read_bytes())
    rename = {"<s>": "<bos>", "</s>": "<eos>"}
    for piece in m.pieces:
        piece.piece = rename.get(piece.piece, piece.piece)
    return keras_hub.models.GemmaTokenizer(proto=m.SerializeToString())


# a multimodal backbone built without its towers: the text tower trains, the towers' weights in
# the file are not read (keras-hub's config arguments for them)
_NO_TOWERS = {"Gemma3Backbone": {"vision_encoder": None},
              "Gemma4Backbone": {"vision_encoder": None, "audio_encoder": None},
              "Gemma3nBackbone": {"vision_encoder_config": None, "audio_encoder_config": None}}


def text_only(folder: Path) -> tuple[dict[str, Any], list[str]]:
    """``from_preset`` arguments that leave a Gemma 3 / 4 / 3n backbone's vision and audio towers
    out (a Keras preset by its class; an HF folder by its ``model_type``: keras-hub converts HF
    Gemma 4 without them, Gemma 3n only with its towers' configs), and the towers left out."""
    raw = json.loads((folder / "config.json").read_text())
    name = raw.get("class_name") or {"gemma4": "Gemma4Backbone", "gemma3": "Gemma3Backbone"}.get(
        str(raw.get("model_type")), "")
    body = raw.get("config") or raw
    towers = [t for t in ("vision", "audio") if body.get(f"{t}_encoder") or body.get(f"{t}_encoder_config")
              or body.get(f"{t}_config")]
    return dict(_NO_TOWERS.get(name, {})), towers


@dataclass
class KerasModel:
    causal_lm: Any
    backbone: Any
    dims: ModelDims
    tokenizer_path: str
    lora_layers: list[str]
    notes: list[str] = field(default_factory=list)


def build_model(cfg: RunConfig, distribution: Any, source: KerasSource | None = None) -> KerasModel:
    """Build (under ``distribution``) the backbone + CausalLM and enable LoRA on the targets
    (``source``: ``keras_source(cfg)`` when the caller has it)."""
    keras = import_keras()
    import keras_hub

    from adapters_lib.keras_route.backbones import enable_lora, quantize_int8

    policy = keras_dtype_policy(cfg.train.param_dtype, cfg.train.compute_dtype)
    source = source or keras_source(cfg)
    dims = model_dims(cfg, source)
    scope = distribution.scope() if distribution is not None else _nullcontext()
    notes: list[str] = []
    with scope, _seeded(keras, cfg.train.seed):
        if source.format == "demo":
            backbone = keras_hub.models.Gemma3Backbone(
                vocabulary_size=dims.vocab, image_size=896, num_layers=dims.layers,
                num_query_heads=dims.heads, num_key_value_heads=dims.kv_heads, hidden_dim=dims.hidden,
                intermediate_dim=dims.ffw, head_dim=dims.head_dim, query_head_dim_normalize=True,
                use_query_key_norm=True, use_post_ffw_norm=True, use_post_attention_norm=True,
                use_sliding_window_attention=True, sliding_window_size=32, vision_encoder=None,
                dtype=policy, name="gemma3_backbone")
        else:
            assert source.folder is not None
            folder = source.folder
            no_towers, towers = text_only(folder)
            backbone = keras_hub.models.Backbone.from_preset(str(folder), dtype=policy, **no_towers)
            if towers and no_towers:
                notes.append(f"{' and '.join(towers)} tower(s) in the checkpoint: not loaded, the text "
                             "tower trains")
        notes += quantize_int8(backbone) if cfg.model.quantize == "int8" else []
        lm_class = getattr(keras_hub.models, type(backbone).__name__.replace("Backbone", "CausalLM"), None)
        if lm_class is None:
            raise WorkbenchError(f"{type(backbone).__name__} has no CausalLM in keras-hub", where="[model] source")
        causal_lm = lm_class(backbone=backbone, preprocessor=None)
        lora_layers: list[str] = []
        if cfg.lora.enabled:
            lora_layers = enable_lora(backbone, cfg.lora.rank, cfg.lora.alpha, tuple(cfg.lora.targets))
    return KerasModel(causal_lm, backbone, dims, tokenizer_path(cfg, source), lora_layers, notes)


@contextlib.contextmanager
def _seeded(keras: Any, seed: int) -> Iterator[None]:
    """Seed Keras' initializers (they draw their seeds from Python's ``random``) for a build,
    then put the process's ``random``/``numpy`` streams back as they were."""
    import random

    import numpy as np

    py_state, np_state = random.getstate(), np.random.get_state()
    keras.utils.set_random_seed(seed)
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None
