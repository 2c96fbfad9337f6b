"""gemma-workbench's headless engine: catalog, models, data, mesh, LoRA, training, sampling.

Importing this package is cheap: JAX, gemma and keras are imported lazily by the modules
that need them. It never imports textual or ``workbench``.
"""

import os as _os

# Keras must run on JAX in the engine (the Keras route shares the devices with the gemma route).
# Keras picks its backend once, at its first import — which TensorFlow-using dependencies can
# trigger early — so the default is set before anything else can import it.
_os.environ.setdefault("KERAS_BACKEND", "jax")

__version__ = "0.2.0"
