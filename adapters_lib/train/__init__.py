"""Training: the optimizer, the jitted step (``step.py``), checkpoints and the loop."""
