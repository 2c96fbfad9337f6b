"""TensorFlow is imported on first use, not when gemma's model code is imported
(``adapters_lib.import_shields.tf_deferred``): training on the gemma route, orbax checkpoints included, the
engine's estimate, and decoding text (gemma's ``Tokenizer.decode`` asks etils' ``is_array``,
which reads TensorFlow's tensor types once ``tensorflow`` is in ``sys.modules``) never load it.
Where TensorFlow is not installed at all: tests/test_no_tensorflow.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

STORY = r"""
import json, sys
from pathlib import Path
from adapters_lib.import_shields import tf_deferred

def tf_mapped():
    maps = Path("/proc/self/maps").read_text()
    return "libtensorflow" in maps or "_pywrap_tensorflow" in maps

out = {"installed": tf_deferred.install(), "again": tf_deferred.install()}
from gemma import gm
from adapters_lib.lora import targeted as lora  # gemma's layers and peft, kauldron's typing under them
from adapters_lib.models import demo
gm.nn.Transformer, gm.text.Gemma3Tokenizer
demo.demo_tokenizer()
import tensorflow as tf  # the name is bound now; TensorFlow is still not imported
sys.path.insert(0, TESTS)
from fixtures_engine import demo_run_config
from adapters_lib import runs
from adapters_lib.config import config_from_dict
from adapters_lib.evals.hooks import default_hooks
from adapters_lib.train.loop import run_training
cfg = config_from_dict(demo_run_config(steps=4, checkpoint_every=2))
trained = run_training(cfg, runs.create_run(cfg, root=Path(ROOT)), hooks=default_hooks)  # with orbax checkpoints
out["trained"] = trained.state
from adapters_lib.engine import compute  # what the engine's /v1/estimate runs
out["estimated"] = compute.estimate(cfg, [{"id": 0, "kind": "cpu"}])["ok"]
tok = demo.demo_tokenizer()
out["decoded"] = tok.decode(tok.encode("odd or even")) == "odd or even"  # etils' is_array of a list
from etils import enp
import numpy as np
out["is_tf_of_numpy"] = enp.lazy.is_tf(np.zeros(2))
import tensorflow.experimental.numpy as tnp  # as etils' is_tf does: a placeholder part
out["deferred_after_gemma"] = tf_deferred.is_deferred()
out["mapped_after_gemma"] = tf_mapped()
out["tf_python_after_gemma"] = "tensorflow.python" in sys.modules
import tensorflow.compat.v1 as v1  # a submodule as the first use
out["deferred_after_use"] = tf_deferred.is_deferred()
out["mapped_after_use"] = tf_mapped()
out["v1_is_the_module"] = v1 is sys.modules["tensorflow.compat.v1"]
out["held_part_works"] = tnp.ndarray is tf.experimental.numpy.ndarray and tnp.asarray is not None
out["is_tf_of_a_tensor"] = enp.lazy.is_tf(tf.constant([1]))
out["v1_spec_kept"] = v1.__spec__.name == "tensorflow.compat.v1" and v1.__spec__.origin is not None
t = tf.constant([1, 2])
out["held_name_works"] = t.numpy().tolist() == [1, 2] and isinstance(t, tf.Tensor)
out["version"] = isinstance(tf.__version__, str) and tf.__version__[0].isdigit()
print(json.dumps(out))
"""


def test_gemma_imports_and_training_leave_tensorflow_unloaded_until_its_first_use(tmp_path):
    story = STORY.replace("TESTS", repr(str(Path(__file__).parent))).replace("ROOT", repr(str(tmp_path)))
    done = subprocess.run([sys.executable, "-c", story], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {
        "installed": True, "again": True, "trained": "completed", "estimated": True, "decoded": True,
        "is_tf_of_numpy": False,
        "deferred_after_gemma": True, "mapped_after_gemma": False, "tf_python_after_gemma": False,
        "deferred_after_use": False, "mapped_after_use": True,  # the check below can fail
        "v1_is_the_module": True, "v1_spec_kept": True,
        "held_part_works": True, "is_tf_of_a_tensor": True, "held_name_works": True, "version": True,
    }
    assert "oneDNN" not in done.stderr and "cuda drivers" not in done.stderr  # loaded quietly


def test_install_is_a_no_op_when_tensorflow_is_imported_already():
    code = ("import tensorflow, sys\nfrom adapters_lib.import_shields import tf_deferred\n"
            "print(tf_deferred.install(), tf_deferred.is_deferred(), type(sys.modules['tensorflow']).__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False", "False", "module"]
