"""gemma-workbench's headless engine: catalog, models, data, mesh, LoRA, training, sampling.

Importing this package is cheap: JAX, gemma and keras are imported lazily by the modules
that need them. It never imports textual or ``workbench``.
"""

__version__ = "0.1.0"
