"""The TPU kernels: Pallas programs and a custom VJP, each beside what replaces it elsewhere.

- ``attention_splash`` — training attention by JAX's Pallas splash kernel (``splash_attention``;
  ``supported`` says which shapes it takes); the TPU's default in ``train.attention``;
- ``ce_flash`` — the cross-entropy's ``lse`` and ``Σ softmax·T`` by the project's own Pallas
  kernel, the table read once a tile;
- ``ce_splash`` — the cross-entropy and its ∂hidden by either kernel (``parts``; ``why_not``
  says when ``train.loss``'s chunked XLA path runs instead);
- ``lora_matmul`` — LoRA's low-rank product with its own backward (``lora_matmul``,
  ``lora_matmul_slots``), on every platform.

Each module's docstring says where it applies and what runs off a TPU. The modules are the
public faces (``from adapters_lib.kernels import ce_splash``): each imports JAX, and a kernel's
name is its module's. Importing the package imports nothing.
"""
