"""Export a Keras run's adapter in keras-hub's own format.

``export_keras_adapter(run_dir, out, step=None)`` writes ``out/adapter.lora.h5`` (load it with
``backbone.enable_lora(rank, target_layer_names=...)`` then ``backbone.load_lora_weights(path)``;
Gemma 4's expert adapters, which keras-hub's format has no place for, are in the same file under
``lora_experts/<variable path>``, ``keras_route.experts``) and ``out/adapter_config.json`` (rank, alpha, targets, the keras layer names, the source),
staged beside ``out`` and swapped in (``export.target``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.keras_route.backbones import lora_layers


def export_keras_adapter(run_dir: str | Path, out: str | Path, step: int | None = None, *,
                         force: bool = False) -> Path:
    """Load a Keras run's checkpoint and write its adapter to ``out``."""
    from adapters_lib.export.target import resolve_target
    from adapters_lib.keras_route.generate import load_keras_tuned

    resolve_target(out, force=force)  # refuse before loading
    tuned = load_keras_tuned(run_dir, step)
    return write_keras_adapter(tuned, out, force=force, run_id=Path(run_dir).name)


def write_keras_adapter(tuned: Any, out: str | Path, *, force: bool = False, owned: bool = False,
                        run_id: str = "") -> Path:
    """Write a loaded ``KerasTuned``'s adapter (its LoRA kernels) to ``out``."""
    from adapters_lib.export.target import resolve_target, write_export
    from adapters_lib.keras_route.experts import expert_adapters

    target = resolve_target(out, force=force, owned=owned)
    lora = tuned.cfg.lora
    if not lora.enabled:
        raise WorkbenchError("this Keras run is a full fine-tune: it has no adapter",
                             hint="export its checkpoint weights instead")

    def write(folder: Path) -> None:
        folder.mkdir(parents=True)
        backbone = tuned.model.backbone
        names = lora_layers(type(backbone).__name__)
        if backbone._lora_enabled_layers:  # noqa: SLF001 - keras-hub's own list
            backbone.save_lora_weights(str(folder / "adapter.lora.h5"))
        experts = expert_adapters(backbone)
        if experts:
            import h5py
            import numpy as np

            with h5py.File(folder / "adapter.lora.h5", "a") as f:
                for path, v in experts.items():
                    f.create_dataset(f"lora_experts/{path}", data=np.asarray(v.value))
        (folder / "adapter_config.json").write_text(json.dumps({
            "format": "keras-hub-lora", "backend": "keras", "rank": lora.rank, "alpha": lora.alpha,
            "targets": list(lora.targets), "keras_layers": [names[t] for t in lora.targets],
            "base_model": tuned.cfg.model.source, "step": tuned.step,
        }, indent=1) + "\n")

    return write_export(target, write, {"format": "adapter", "backend": "keras", "run_id": run_id,
                                        "step": tuned.step, "base_model": tuned.cfg.model.source},
                        force=force, owned=owned)
