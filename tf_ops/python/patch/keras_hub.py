"""keras-hub's own layers, patched when keras-hub is importable (never a dependency).

keras-hub's decoder models normalise with layers of their own rather than Keras's
``RMSNormalization``: ``LlamaLayerNorm``, ``MistralLayerNormalization``, ... all compute
``cast(x, float32) * rsqrt(mean(x^2) + epsilon) * scale`` and cast the result to the
layer's compute dtype (Qwen 3's to the input's dtype), Gemma's with ``1 + scale``. Their
``call`` becomes one ``TfOps>RmsNorm`` (`make_rms_norm_call`). GPT-2 and BERT use
keras-hub's ``gelu_approximate`` as the feed-forward Dense's activation, which tf_ops
knows as ``gelu(approximate=True)`` (`ALIASES`; CLIP's ``quick_gelu`` is ``swish`` with
beta 1.702), so that Dense fuses its bias and activation. keras-hub's attention runs Keras's ``Softmax`` layer or
``ops.dot_product_attention``, patched with Keras's. Their rotary position embedding,
``RotaryEmbedding`` (Mistral, Gemma, Qwen, ...) and its subclass ``LlamaRotaryEmbedding``
(LLaMA: it inherits ``call`` and computes its own frequencies), becomes one
``TfOps>RotaryEmbedding`` with the arguments `rotary_kwargs` gives (`make_rotary_call`);
other subclasses that inherit ``call`` (Phi-3's ``Phi3SuScaledRotaryEmbedding``) compute
other frequencies and run keras-hub's call.
"""

from __future__ import annotations

from typing import Callable

import keras
import tensorflow as tf

from tf_ops.python.norm import functions as norm
from tf_ops.python.patch.keras_layers import floating
from tf_ops.python.rotary import functions as rotary
from tf_ops.python.rotary.layers import rotary_kwargs

MODELS = "keras_hub.src.models"
ROTARY_CALL = "keras_hub.src.layers.modeling.rotary_embedding:RotaryEmbedding.call"

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
# CLIP's quick_gelu, x * sigmoid(1.702 x), is swish with beta 1.702. A module missing
# from the installed keras-hub is skipped.
ALIASES = {
    "keras_hub.src.utils.keras_utils:gelu_approximate": ("gelu", {"approximate": True}),
    f"{MODELS}.clip.clip_layers:quick_gelu": ("swish", {"beta": 1.702}),
    f"{MODELS}.metaclip_2.metaclip_2_layers:quick_gelu": ("swish", {"beta": 1.702}),
}


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


def rotary_reason_left(layer: keras.layers.Layer) -> str | None:
    """Why keras-hub's rotary `layer` runs keras-hub's call, or None (the op's)."""
    if rotary_kwargs(layer) is not None:
        return None
    if type(layer).__name__ == "LlamaRotaryEmbedding":
        return ("rope_type='yarn' (Llama's frequencies with YaRN's temperature: not an "
                "op's rope type)")
    return f"{type(layer).__name__} computes frequencies of its own"


def _rotary_covers(layer: keras.layers.Layer, x) -> bool:
    """Whether the op computes keras-hub's call on `x`: a float tensor of the layer's
    compute dtype, of known rank, the two axes in it and distinct, the feature axis of
    known even size (keras-hub raises its own errors for the rest)."""
    if not floating(x) or tf.as_dtype(x.dtype) != tf.as_dtype(layer.compute_dtype):
        return False
    shape = tf.TensorShape(x.shape)
    if shape.rank is None:
        return False
    axes = [a + shape.rank if a < 0 else a for a in (layer.sequence_axis, layer.feature_axis)]
    if not all(0 <= a < shape.rank for a in axes) or axes[0] == axes[1]:
        return False
    size = shape[axes[1]]
    return size is not None and size % 2 == 0


def make_rotary_call(original: Callable) -> Callable:
    """keras-hub's ``RotaryEmbedding.call`` (same signature) as one
    ``TfOps>RotaryEmbedding``, for the classes `rotary_kwargs` covers; 16-bit inputs are
    rotated in float32 and rounded once (keras-hub rounds cos and sin to the 16-bit
    type first: a few ulps apart)."""

    def call(self, inputs, start_index=0, positions=None):
        kwargs = rotary_kwargs(self)
        if kwargs is None or not _rotary_covers(self, inputs):
            return original(self, inputs, start_index, positions)
        return rotary.rotary_embedding(inputs, start_index, positions, **kwargs)

    return call
