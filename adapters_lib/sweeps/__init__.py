"""Grid sweeps: ``grid`` (grid → points → run overrides; pure) and ``results`` (a
sweep's table from its runs' directories). The ``sweep`` command queues the points through
the engine; ``sweep show SWEEP`` reads the results from the engine. Importing is cheap: no JAX.
"""
