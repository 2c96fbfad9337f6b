"""The Keras route where TensorFlow is not installed (the lent TPU, a lean install): keras-hub
imports, the demo trains, its adapter exports, and TensorFlow stays absent.

keras-hub 0.29 runs ``import tensorflow`` in six modules that ``import keras_hub`` loads
(``tf_absent.KERAS_HUB_NAME_ONLY``); the route tokenizes with SentencePiece itself and never
calls them. Here TensorFlow and its family are hidden from the import system, as where they are
not installed, and the route runs in that process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from xla_flags import FAST_XLA

HIDE_AND_TRAIN = r"""
import importlib.machinery, json, pathlib, sys

HIDDEN = ("tensorflow", "tensorflow_datasets", "tf_keras", "tensorflow_text", "tensorboard")

class Hidden(importlib.machinery.PathFinder):  # TensorFlow as if not installed
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in HIDDEN:
            return None
        return super().find_spec(fullname, path, target)

sys.meta_path[sys.meta_path.index(importlib.machinery.PathFinder)] = Hidden
from adapters_lib.import_shields import tf_deferred
tf_deferred.install()
from adapters_lib.config import config_from_dict
from adapters_lib.keras_route import run_keras_training
from adapters_lib.keras_route.export import export_keras_adapter
from adapters_lib.runs import create_run

root = pathlib.Path(sys.argv[1])
cfg = config_from_dict({"model": {"source": "demo", "backend": "keras"},
                        "data": {"path": "demo", "max_length": 32},
                        "lora": {"rank": 2}, "mesh": {"devices": 1},
                        "train": {"steps": 2, "batch_size": 2, "eval_every": 2, "checkpoint_every": 2,
                                  "eval_exact_match": 0, "eval_batches": 1, "warmup_steps": 0}})
run = create_run(cfg, root=root / "runs")
result = run_keras_training(cfg, run)
adapter = export_keras_adapter(run.path, root / "adapter")
preprocessor = sys.modules["keras_hub.src.models.gemma3.gemma3_causal_lm_preprocessor"]
try:
    preprocessor.tf.data
    use = None
except ModuleNotFoundError as e:
    use = str(e)
print(json.dumps({
    "losses": sorted(result.losses), "adapter": sorted(p.name for p in pathlib.Path(adapter).iterdir()),
    "tensorflow_in_sys_modules": "tensorflow" in sys.modules,
    "causal_lm_tf": repr(sys.modules["keras_hub.src.models.causal_lm"].tf), "use": use,
}))
"""


def test_keras_route_trains_and_exports_where_tensorflow_is_not_installed(tmp_path):
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=1 " + FAST_XLA}  # the suite's back end
    p = subprocess.run([sys.executable, "-c", HIDE_AND_TRAIN, str(tmp_path)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    found = json.loads(p.stdout.strip().splitlines()[-1])
    assert found["losses"] == [1, 2]
    assert {"adapter.lora.h5", "adapter_config.json"} <= set(found["adapter"])
    assert not found["tensorflow_in_sys_modules"]
    assert found["causal_lm_tf"] == "None"  # keras-hub's optional imports see no TensorFlow
    assert "needs TensorFlow, which is not installed" in found["use"]
