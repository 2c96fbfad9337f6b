"""Export a Keras run's adapter in keras-hub's own format.

``export_keras_adapter(run_dir, out, step=None)`` writes ``out/adapter.lora.h5`` (load it with
``backbone.enable_lora(rank, target_layer_names=...)`` then ``backbone.load_lora_weights(path)``)
and ``out/adapter_config.json`` (rank, alpha, targets, the keras layer names, the source),
staged beside ``out`` and swapped in (``export.target``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.keras_route.options import KERAS_LORA_LAYERS


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

    target = resolve_target(out, force=force, owned=owned)
    lora = tuned.cfg.lora
    if not lora.enabled:
        raise WorkbenchError("this Keras run is a full fine-tune: it has no adapter",
                             hint="export its checkpoint weights instead")

    def write(folder: Path) -> None:
        folder.mkdir(parents=True)
        tuned.model.backbone.save_lora_weights(str(folder / "adapter.lora.h5"))
        (folder / "adapter_config.json").write_text(json.dumps({
            "format": "keras-hub-lora", "backend": "keras", "rank": lora.rank, "alpha": lora.alpha,
            "targets": list(lora.targets), "keras_layers": [KERAS_LORA_LAYERS[t] for t in lora.targets],
            "base_model": tuned.cfg.model.source, "step": tuned.step,
        }, indent=1) + "\n")

    return write_export(target, write, {"format": "adapter", "backend": "keras", "run_id": run_id,
                                        "step": tuned.step, "base_model": tuned.cfg.model.source},
                        force=force, owned=owned)
