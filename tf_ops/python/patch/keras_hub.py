"""keras-hub's own layers, patched when keras-hub is importable (never a dependency).

keras-hub's decoder models normalise with layers of their own rather than Keras's
``RMSNormalization``: ``LlamaLayerNorm``, ``MistralLayerNormalization``, ... all compute
``cast(x, float32) * rsqrt(mean(x^2) + epsilon) * scale`` and cast the result to the
layer's compute dtype (Qwen 3's to the input's dtype), Gemma's with ``1 + scale``. Their
``call`` becomes one ``TfOps>RmsNorm`` (`make_rms_norm_call`). GPT-2 and BERT use
keras-hub's ``gelu_approximate`` as the feed-forward Dense's activation, which tf_ops
knows as ``gelu(approximate=True)`` (`ALIASES`), so that Dense fuses its bias and
activation. keras-hub's attention runs Keras's ``Softmax`` layer or
``ops.dot_product_attention``, patched with Keras's.
"""

from __future__ import annotations

from typing import Callable

import keras

from tf_ops.python.norm import functions as norm
from tf_ops.python.patch.keras_layers import floating

MODELS = "keras_hub.src.models"

# (target, the scale's offset, the output's dtype: "compute" or "input")
RMS_NORMS: tuple[tuple[str, float, str], ...] = (
    (f"{MODELS}.llama.llama_layernorm:LlamaLayerNorm.call", 0.0, "compute"),
    (f"{MODELS}.mistral.mistral_layer_norm:MistralLayerNormalization.call", 0.0, "compute"),
    (f"{MODELS}.mixtral.mixtral_layer_norm:MixtralLayerNormalization.call", 0.0, "compute"),
    (f"{MODELS}.phi3.phi3_layernorm:Phi3LayerNorm.call", 0.0, "compute"),
    (f"{MODELS}.qwen.qwen_layernorm:QwenLayerNorm.call", 0.0, "compute"),
    (f"{MODELS}.qwen3.qwen3_layernorm:Qwen3LayerNorm.call", 0.0, "input"),
    (f"{MODELS}.gpt_oss.gpt_oss_layer_norm:GptOssLayerNormalization.call", 0.0, "compute"),
    (f"{MODELS}.gemma.rms_normalization:RMSNormalization.call", 1.0, "compute"),
)

# keras-hub's activation functions that are tf_ops activations: where -> (name, attributes).
ALIASES = {"keras_hub.src.utils.keras_utils:gelu_approximate": ("gelu", {"approximate": True})}


def make_rms_norm_call(offset: float, output: str) -> Callable[[Callable], Callable]:
    """A factory of the fused call of a keras-hub RMS norm whose weight is ``scale``
    (multiplied as ``offset + scale``)."""

    def make(original: Callable) -> Callable:
        def call(self, x):
            if not floating(x) or not isinstance(self.epsilon, (int, float)):
                return original(self, x)
            scale = keras.ops.cast(self.scale, "float32")
            if offset:
                scale = offset + scale
            y = norm.rms_norm(x, scale, axis=-1, epsilon=float(self.epsilon))
            return keras.ops.cast(y, self.compute_dtype if output == "compute" else x.dtype)
        return call

    return make
