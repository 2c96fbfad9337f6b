"""XLA flags of the test processes (the suite's and the engines it starts).

``FAST_XLA``: XLA:CPU's LLVM back end without its expensive passes. The suite compiles hundreds
of small programs and runs few long ones (test_attention 105 -> 58 s, test_step 126 -> 78 s on
2 cores; the real 270M's LoRA run 95 -> 118 s). The HLO programs are the same, only their
machine code is optimized less; every comparison in a test is between programs compiled with
these flags.
"""

FAST_XLA = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
