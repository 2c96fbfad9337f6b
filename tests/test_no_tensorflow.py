"""The gemma route without TensorFlow: estimate, training (a jsonl file, SentencePiece, orbax
checkpoints), sample and compare, in a process where ``tensorflow`` cannot be imported.

On a TPU with a lean install (no TensorFlow) the engine's ``/v1/estimate`` failed with "No
module named 'tensorflow'": gemma's model code imports ``kauldron.typing``, which imports
TensorFlow to read ``tf.Tensor`` (``adapters_lib.import_shields.tf_absent`` lets it import). Here TensorFlow
and its family are hidden from the import system (``find_spec`` answers None, as where they are
not installed), and the CLI's own commands run with ``--in-process``: the engine's handlers, in
the one process the story checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

HIDE_AND_RUN = r"""
import importlib.machinery, json, sys, traceback

HIDDEN = ("tensorflow", "tensorflow_datasets", "tf_keras", "tensorflow_text", "tensorboard")
asked = []

class Hidden(importlib.machinery.PathFinder):  # TensorFlow as if not installed
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in HIDDEN:
            asked.append(fullname)
            return None
        return super().find_spec(fullname, path, target)

sys.meta_path[sys.meta_path.index(importlib.machinery.PathFinder)] = Hidden
from workbench.cli import main

CONFIG, RUNS, PROMPT = sys.argv[1], sys.argv[2], "Is 17 even or odd?"
rc = {"estimate": main(["train", CONFIG, "--in-process", "--estimate", "--json"]),
      "train": main(["train", CONFIG, "--in-process", "--json", "-q"])}
import pathlib
[run] = [str(p) for p in pathlib.Path(RUNS).iterdir() if p.is_dir()]
rc["sample"] = main(["sample", "--run", run, "--prompt", PROMPT, "--max-new-tokens", "4", "--in-process"])
rc["compare"] = main(["compare", "--run", run, "--prompt", PROMPT, "--max-new-tokens", "4", "--in-process"])
from adapters_lib.errors import WorkbenchError
from adapters_lib.models.weights import load_orbax_params
try:  # orbax-format base weights go through gm.ckpts (kauldron → clu → TensorFlow): one line
    load_orbax_params(pathlib.Path(RUNS, "no-such-checkpoint"), None, "float32", None)
    orbax = None
except WorkbenchError as e:
    orbax = [e.message, e.where, e.hint]
array_types = sys.modules.get("kauldron.typing.array_types")
try:  # what kauldron holds is the stand-in: a real use says TensorFlow is missing
    array_types.tf.data
    missing = None
except ModuleNotFoundError as e:
    missing = [e.name, str(e)]
print(json.dumps({
    "rc": rc, "tensorflow_in_sys_modules": "tensorflow" in sys.modules,
    "kauldron_tf": type(getattr(array_types, "tf", None)).__name__, "missing": missing, "orbax": orbax,
    "checkpoints": sorted(p.name for p in pathlib.Path(run, "checkpoints").iterdir()),
    "asked": sorted(set(asked)),
}))
"""

CONFIG = """
[model]
source = "demo"
[data]
path = "{data}"
max_length = 32
eval_fraction = 0.25
[lora]
rank = 4
[mesh]
devices = 1
[train]
steps = 2
batch_size = 2
warmup_steps = 0
schedule = "constant"
eval_every = 1000
eval_batches = 1
eval_exact_match = 0
checkpoint_every = 2
log_every = 1
"""


def test_estimate_training_sample_and_compare_run_where_tensorflow_is_not_installed(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Is {n} even or odd?",
                                        "response": "even" if n % 2 == 0 else "odd"}) + "\n"
                            for n in range(16)))
    config = tmp_path / "run.toml"
    config.write_text(CONFIG.format(data=data))
    home = tmp_path / "home"
    env = {**os.environ, "GEMMA_WORKBENCH_HOME": str(home)}
    env.pop("GEMMA_WORKBENCH_RUNS", None)
    done = subprocess.run([sys.executable, "-c", HIDE_AND_RUN, str(config), str(home / "data" / "runs")],
                          capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["rc"] == {"estimate": 0, "train": 0, "sample": 0, "compare": 0}, done.stderr[-4000:]
    assert "No module named 'tensorflow'" not in done.stderr
    # gemma's model code was imported, its TensorFlow name held the stand-in, and none is left
    assert out["kauldron_tf"] == "_Absent" and out["tensorflow_in_sys_modules"] is False
    name, message = out["missing"]
    assert name == "tensorflow" and "tf.data (used by kauldron.typing.array_types)" in message
    assert "not installed" in message
    assert out["checkpoints"]  # orbax wrote the run's checkpoint
    message, where, hint = out["orbax"]
    assert "gm.ckpts, which needs" in message and message.endswith("(not installed)")
    assert "no-such-checkpoint" in where and "pip install tensorflow" in hint
    assert "tensorflow" in out["asked"]  # the hiding was in force (something looked for it)
