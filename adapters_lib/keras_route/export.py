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


def export_keras_adapter(run_dir: str | Path, out: str | Path, step: int | None = None) -> Path:
    from adapters_lib.keras_route.generate import load_keras_tuned

    tuned = load_keras_tuned(run_dir, step)
    lora = tuned.cfg.lora
    if not lora.enabled:
        raise WorkbenchError("this Keras run is a full fine-tune: it has no adapter",
                             hint="export its checkpoint weights instead")
    folder = Path(out).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    tuned.model.backbone.save_lora_weights(str(folder / "adapter.lora.h5"))
    (folder / "adapter_config.json").write_text(json.dumps({
        "format": "keras-hub-lora", "backend": "keras", "rank": lora.rank, "alpha": lora.alpha,
        "targets": list(lora.targets), "keras_layers": [KERAS_LORA_LAYERS[t] for t in lora.targets],
        "base_model": tuned.cfg.model.source, "step": tuned.step,
    }, indent=1) + "\n")
    return folder
