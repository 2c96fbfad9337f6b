"""The adapter in HF PEFT's layout: write, read back, check against a model.

``adapter_model.safetensors`` + ``adapter_config.json`` in the layout of HF PEFT for
``Gemma{2,3,3n,4}ForCausalLM`` (a multimodal base's ``…ForConditionalGeneration``: its text
layers under ``model.language_model``; ``MULTIMODAL_PREFIX``); Gemma 4's expert bank through
PEFT's ``target_parameters`` (``peft_experts``). Our adapter pair is ``A: in×r``, ``B: r×out`` (``x @ A @ B``); HF
``nn.Linear`` weights are ``out×in`` (``x @ W.T``), so PEFT's ``lora_A.weight = A.T`` (r, in)
and ``lora_B.weight = B.T`` (out, r). Heads flatten the way HF's projections do: ``q_proj``
rows are ``n·H + h`` (our ``B`` columns reshape to (N, H) in that order), ``o_proj`` columns
likewise. The scale is PEFT's ``lora_alpha / r``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from adapters_lib.config import LORA_TARGETS, LoraSpec
from adapters_lib.errors import WorkbenchError
from adapters_lib.export import peft_experts

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
PEFT_MODULES = {
    "q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
    "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj",
}
PEFT_PREFIX = "base_model.model.model.layers"
MULTIMODAL_PREFIX = "base_model.model.model.language_model.layers"
"""The text layers of a ``Gemma{3,3n,4}ForConditionalGeneration`` (a base with media towers)."""


def peft_name(layer: int, target: str, which: str, prefix: str = PEFT_PREFIX) -> str:
    """``base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight`` and friends."""
    return f"{prefix}.{layer}.{PEFT_MODULES[target]}.lora_{which}.weight"


# --------------------------------------------------------------------------- adapter


def adapter_tensors(lora_tree: Mapping[str, Any], prefix: str = PEFT_PREFIX) -> dict[str, np.ndarray]:
    """Our LoRA tree as PEFT tensors (``lora_A`` (r, in), ``lora_B`` (out, r); the experts'
    as ``peft_experts`` lays them).

    Walks the tree itself: ``lora.fuse.iter_adapters`` misses the attention adapters, which sit
    one level deeper (``attn/q_einsum/lora/q_a``) than the MLP ones (``mlp/lora_linear/down_a``).
    """
    out: dict[str, np.ndarray] = {}
    for (layer, target, which), path in sorted(_slots(lora_tree).items()):
        leaf: Any = lora_tree
        for part in path:
            leaf = leaf[part]
        out[peft_name(layer, target, which, prefix)] = np.ascontiguousarray(np.asarray(leaf).T)
    for layer, node in _expert_nodes(lora_tree).items():
        out.update(peft_experts.layer_tensors(node, prefix, layer))
    return out


def _expert_nodes(tree: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    """layer → the ``mlp`` node holding its ``lora_experts_*`` leaves."""
    return {int(key.split("_")[1]): value["mlp"] for key, value in tree.items()
            if key.startswith("layer_") and isinstance(value, Mapping) and isinstance(value.get("mlp"), Mapping)
            and any(k.startswith(peft_experts.PREFIX) for k in value["mlp"])}


def adapter_config(spec: LoraSpec, base_model: str) -> dict[str, Any]:
    """``adapter_config.json`` as HF PEFT writes it for a LoRA adapter (``experts``: its
    ``target_parameters``, rank and alpha patterns, ``peft_experts``)."""
    experts = peft_experts.config_fields(spec.rank, spec.alpha) if "experts" in spec.targets else {}
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": spec.rank,
        "lora_alpha": spec.alpha,
        "lora_dropout": 0.0,
        "target_modules": [PEFT_MODULES[t].split(".")[1] for t in LORA_TARGETS
                           if t in spec.targets and t in PEFT_MODULES],
        "fan_in_fan_out": False,
        "bias": "none",
        "use_rslora": False,
        "use_dora": False,
        "inference_mode": True,
        "modules_to_save": None,
        "init_lora_weights": True,
        "layers_to_transform": None,
        "layers_pattern": None,
        "rank_pattern": {},
        "alpha_pattern": {},
        "revision": None,
        "target_parameters": None,
        **experts,
    }


def save_adapter(out: str | Path, lora_tree: Mapping[str, Any], spec: LoraSpec, base_model: str,
                 *, extra: Mapping[str, Any] | None = None, multimodal: bool = False) -> Path:
    """Write ``out/adapter_model.safetensors`` + ``out/adapter_config.json`` (``multimodal``: the
    base checkpoint has media towers, its text layers sit under ``model.language_model``)."""
    from adapters_lib.models.hf import write_safetensors

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    from adapters_lib.export.provenance import hub_id

    meta = {"format": "pt", "lora_dtype": spec.dtype}
    meta.update({k: str(v) for k, v in (extra or {}).items()})
    prefix = MULTIMODAL_PREFIX if multimodal else PEFT_PREFIX
    write_safetensors(out / ADAPTER_WEIGHTS, adapter_tensors(lora_tree, prefix), metadata=meta)
    config = adapter_config(spec, hub_id(base_model))
    (out / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return out


def read_adapter_config(directory: str | Path) -> tuple[LoraSpec, str]:
    """(LoraSpec, base model) from an adapter folder's ``adapter_config.json``; the base is the
    workbench's id of it (``gemma_workbench.json``) when the folder records one."""
    from adapters_lib.export.provenance import read_source

    directory = Path(directory)
    path = directory / ADAPTER_CONFIG
    if not path.is_file():
        raise WorkbenchError(f"{directory} has no {ADAPTER_CONFIG}", where=str(directory),
                             hint="pass a folder written by `gemma-workbench export --format adapter`")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
        by_module = {v.split(".")[1]: k for k, v in PEFT_MODULES.items()}
        modules = cfg["target_modules"]
        modules = [modules] if isinstance(modules, str) else list(modules)
        unknown = [m for m in modules if m not in by_module]
        if unknown:
            raise WorkbenchError(f"adapter targets {', '.join(unknown)} are not Gemma projections",
                                 where=str(path), hint=f"expected some of {', '.join(by_module)}")
        params = cfg.get("target_parameters") or []
        targets = tuple(t for t in LORA_TARGETS if t in PEFT_MODULES and PEFT_MODULES[t].split(".")[1] in modules)
        if set(peft_experts.PARAMETERS) <= set(params):
            targets += ("experts",)
        elif params:
            raise WorkbenchError(f"adapter target_parameters {', '.join(params)} are not a Gemma 4 "
                                 "expert bank's", where=str(path), hint=f"expected {', '.join(peft_experts.PARAMETERS)}")
        spec = LoraSpec(rank=int(cfg["r"]), alpha=float(cfg["lora_alpha"]), targets=targets)
    except (KeyError, TypeError, ValueError) as e:
        raise WorkbenchError(f"{ADAPTER_CONFIG} is not a LoRA config ({e})", where=str(path)) from None
    return spec, read_source(directory) or str(cfg.get("base_model_name_or_path", ""))


def expected_lora(model: Any, spec: LoraSpec) -> dict:
    """The abstract LoRA tree (shapes only) that ``model`` takes under ``spec``."""
    import jax

    from adapters_lib.lora import traced_shapes

    return jax.eval_shape(lambda: traced_shapes.init_lora(model, spec, None, jax.random.key(0)))


def _slots(tree: Mapping[str, Any]) -> dict[tuple[int, str, str], tuple[str, ...]]:
    """(layer, target, "A"|"B") → path of that leaf in our LoRA tree."""
    slots: dict[tuple[int, str, str], tuple[str, ...]] = {}

    def walk(node: Mapping[str, Any], path: tuple[str, ...]) -> None:
        for key, value in node.items():
            if isinstance(value, Mapping):
                walk(value, path + (key,))
            elif key.endswith(("_a", "_b")) and not key.startswith(peft_experts.PREFIX):
                layer = int(path[0].split("_")[1])
                slots[(layer, key[:-2], key[-1].upper())] = path + (key,)

    walk(tree, ())
    return slots


def load_adapter(directory: str | Path, model: Any, spec: LoraSpec | None = None) -> dict:
    """An exported adapter folder → our LoRA tree for ``model`` (shapes checked).

    ``spec`` defaults to the folder's ``adapter_config.json``. A tensor that does not fit
    the model (an adapter for another base model) raises a one-line ``WorkbenchError``.
    """
    import jax.numpy as jnp

    from adapters_lib.models.hf import SafetensorsError, read_header, read_tensor

    directory = Path(directory)
    if spec is None:
        spec, _ = read_adapter_config(directory)
    file = directory / ADAPTER_WEIGHTS
    if not file.is_file():
        raise WorkbenchError(f"{directory} has no {ADAPTER_WEIGHTS}", where=str(directory))
    try:
        header = read_header(file)
    except SafetensorsError as e:
        raise WorkbenchError(str(e), where=str(file)) from None
    names = {k for k in header if not k.startswith("__")}
    prefix = MULTIMODAL_PREFIX if any(n.startswith(MULTIMODAL_PREFIX + ".") for n in names) else PEFT_PREFIX
    expected = expected_lora(model, spec)
    slots = _slots(expected)
    tree: dict = {}
    taken = {peft_name(*key, prefix) for key in slots}
    for layer, node in _expert_nodes(expected).items():
        ours = peft_experts.names(prefix, layer)
        read = peft_experts.read_layer({n: read_tensor(file, header, n) for n in ours.values() if n in names},
                                       prefix, layer, int(node[f"{peft_experts.PREFIX}_gate_a"].shape[0]), str(file))
        for key, value in read.items():
            if value.shape != tuple(node[key].shape):
                raise WorkbenchError(f"adapter experts of layer {layer} have shape {value.shape}, the model "
                                     f"expects {tuple(node[key].shape)}", where=str(file),
                                     hint="this adapter was trained on another base model")
            tree.setdefault(f"layer_{layer}", {}).setdefault("mlp", {})[key] = jnp.asarray(value, node[key].dtype)
        taken |= set(ours.values())
    for (layer, target, which), path in sorted(slots.items()):
        name = peft_name(layer, target, which, prefix)
        leaf: Any = expected
        for part in path:
            leaf = leaf[part]
        want = tuple(leaf.shape)[::-1]  # PEFT stores the transpose
        if name not in names:
            raise WorkbenchError(f"adapter tensor {name} is missing", where=str(file),
                                 hint="the adapter was made for another model or other targets")
        got = tuple(header[name]["shape"])
        if got != want:
            raise WorkbenchError(
                f"adapter tensor {name} has shape {got}, the model expects {want}", where=str(file),
                hint="this adapter was trained on another base model")
        value = jnp.asarray(np.asarray(read_tensor(file, header, name)).T, dtype=leaf.dtype)
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    extra = sorted(names - taken)
    if extra:
        raise WorkbenchError(f"adapter tensor {extra[0]} has no place in the model"
                             f"{f' ({len(extra)} such tensors)' if len(extra) > 1 else ''}",
                             where=str(file), hint="this adapter was trained on another base model")
    return tree
