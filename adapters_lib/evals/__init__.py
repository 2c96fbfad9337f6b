"""Task evaluation: which metrics, how they are scored, where they are written.

- ``metrics`` — the contract metric names, their direction, the text scorers (pure Python);
- ``records`` — ``eval.jsonl`` in a run directory (one row per step and phase);
- ``selection`` — the best step and the early stop, from the rows as they come;
- ``task`` — scoring a model on eval examples (greedy answers, loss over the eval split; JAX);
- ``hooks`` — the trainer hooks that score, select, stop and log during a run;
- ``checkpoints`` — every checkpoint of a run scored into one table (``eval --all-checkpoints``).
- ``perplexity`` — loss and perplexity of a model over a data file (``gemma-workbench eval``;
  JAX).

Importing the package is cheap; JAX is imported by ``task`` and ``perplexity`` (and what uses
them) only.
"""
