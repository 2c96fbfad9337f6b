"""The Keras route's names for our options: dtypes → a Keras dtype policy (LoRA targets → keras-hub
layers are ``keras_route.backbones.lora_layers``).

Which options each backend accepts is ``adapters_lib.config.backends`` (the config layer checks
them on every config, keras or not).
"""

from __future__ import annotations


def keras_dtype_policy(param_dtype: str, compute_dtype: str) -> str:
    """The Keras dtype policy for (param, compute) dtypes (checked by ``check_backend_options``)."""
    return {("float32", "float32"): "float32", ("float32", "bfloat16"): "mixed_bfloat16",
            ("bfloat16", "bfloat16"): "bfloat16"}[(param_dtype, compute_dtype)]
