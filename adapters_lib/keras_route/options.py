"""The Keras route's names for our options: LoRA targets → keras-hub layers, dtypes → a policy.

Which options each backend accepts is ``adapters_lib.config_backends`` (the config layer checks
them on every config, keras or not).
"""

from __future__ import annotations

# our LoRA target names → keras-hub Gemma layer names (GemmaBackbone, Gemma2, Gemma3Backbone)
KERAS_LORA_LAYERS = {
    "q": "query", "k": "key", "v": "value", "o": "attention_output",
    "gate": "ffw_gating", "up": "ffw_gating_2", "down": "ffw_linear",
}


def keras_dtype_policy(param_dtype: str, compute_dtype: str) -> str:
    """The Keras dtype policy for (param, compute) dtypes (checked by ``check_backend_options``)."""
    return {("float32", "float32"): "float32", ("float32", "bfloat16"): "mixed_bfloat16",
            ("bfloat16", "bfloat16"): "bfloat16"}[(param_dtype, compute_dtype)]
