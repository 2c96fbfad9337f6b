"""Export a Keras run's adapter in keras-hub's own format.

``export_keras_adapter(run_dir, out, step=None)`` writes ``out/adapter.lora.h5`` (load it with
``backbone.enable_lora(rank, target_layer_names=...)`` then ``backbone.load_lora_weights(path)``)
and ``out/adapter_config.json`` (rank, alpha, targets, the keras layer names, the source).
"""

from __future__ import annotations

import json
from pathlib import Path

from adapters_lib.errors import WorkbenchError
from adapters_lib.keras_route.options import KERAS_LORA_LAYERS


def export_keras_adapter(run_dir: str | Path, out: str | Path, step: int | None = None, *,
                         force: bool = False) -> Path:
    """Write the adapter (staged and swapped into ``out``, see ``export.target``)."""
    from adapters_lib.export.target import resolve_target, write_export
    from adapters_lib.keras_route.generate import load_keras_tuned

    target = resolve_target(out, force=force)
    tuned = load_keras_tuned(run_dir, step)
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

    return write_export(target, write, {"format": "keras-adapter", "run_id": Path(run_dir).name,
                                        "step": tuned.step, "base_model": tuned.cfg.model.source},
                        force=force)
