"""Training: the optimizer, the jitted step (``step.py``), its attention (``attention.py``:
block-sparse, splash or fused, by platform), checkpoints and the loop. The TPU kernels the step
calls live in ``adapters_lib.kernels``."""
