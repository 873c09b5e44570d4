"""The replaced ``call`` of Keras's own layers: each runs what the tf_ops layer of the
same name runs (``tf_ops.layers.Dense``, ``BatchNormalization``, ...: the same
functions, `*_call` in those modules), on Keras's layer, and falls back to Keras's own
``call`` for what the ops do not cover. `reason_left` says, for the report, why a
layer runs Keras's own code.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import keras
import tensorflow as tf

from keras.src.backend.common import global_state

from tf_ops.python.batch_norm import folding as batch_norm_folding
from tf_ops.python.batch_norm import functions as batch_norm_functions
from tf_ops.python.batch_norm import layers as batch_norm_layers
from tf_ops.python.activation.resolver import resolve
from tf_ops.python.core.composite import xla_lowered
from tf_ops.python.fused.dense import bias_activation_call, bias_add
from tf_ops.python.fused import functions as fused_functions
from tf_ops.python.norm import layers as norm_layers
from tf_ops.python.patch import activations, convolution
from tf_ops.python.patch.functional import folding, paired_activation
from tf_ops.python.softmax import layers as softmax_layers

FLOATS = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
_IDENTITY = resolve(None)


def floating(x) -> bool:
    """Whether x is a tensor of a dtype the ops take."""
    try:
        return tf.as_dtype(getattr(x, "dtype", None)) in FLOATS
    except TypeError:
        return False


def _epsilon_reason(epsilon: Any, strictly_positive: bool) -> str | None:
    """Why the ops cannot take `epsilon` (they need it finite and >= 0, > 0 for batch
    norm), or None."""
    ok = isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and (
        epsilon > 0 if strictly_positive else epsilon >= 0)
    return None if ok else f"epsilon={epsilon!r} (the ops need a finite epsilon " + (
        "> 0)" if strictly_positive else ">= 0)")


# --- Add and the activation after it (a residual block's) ------------------------------

def _add_activation(x, addend, spec) -> Any:
    """f(x + addend) in one ``TfOps>Add{Act}`` where both have one static shape and
    dtype the op takes; else None."""
    if (not floating(x) or getattr(addend, "dtype", None) != x.dtype
            or x.shape.rank is None or x.shape.as_list() != addend.shape.as_list()):
        return None
    return fused_functions.add_activation_op(spec.entry, x, addend, dict(spec.attrs), None)


def make_add_merge(original: Callable) -> Callable:
    """``Add._merge_function`` that, where the model's plan pairs the Add with the
    activation layer after it, computes both in one op (two inputs of one shape);
    otherwise Keras's sum, then the activation."""
    def _merge_function(self, inputs):
        spec = paired_activation(self)
        if spec is None:
            return original(self, inputs)
        out = _add_activation(*inputs, spec) if len(inputs) == 2 else None
        return out if out is not None else spec.apply(original(self, inputs))
    return _merge_function


def make_custom_scale_call(original: Callable) -> Callable:
    """InceptionResNetV2's ``CustomScaleLayer.call`` (``x + r * scale``) that, paired
    with the activation after it, computes ``f(x + r * scale)`` with the add in the
    activation's op (``r * scale`` rounded first, as Keras's)."""
    def call(self, inputs):
        spec = paired_activation(self)
        if spec is None:
            return original(self, inputs)
        x, r = inputs
        out = _add_activation(x, r * self.scale, spec) if floating(r) else None
        return out if out is not None else spec.apply(original(self, inputs))
    return call


# --- Dense ----------------------------------------------------------------------------

def dense_reason_left(layer: keras.layers.Dense) -> str | None:
    """Why `layer`'s bias and activation are not one op, or None."""
    own = activations.of_function(layer.activation)
    if own is None:
        name = getattr(layer.activation, "__name__", repr(layer.activation))
        return f"its activation {name!r} has no tf_ops kernel"
    if own.entry is None:
        return "no activation to fuse with the bias"
    if layer.bias is None:
        # The activation alone, as an Activation layer's: a ReLU is TensorFlow's Relu
        from tf_ops.python.patch import keras_backend  # (which imports this module)

        return (keras_backend.LEFT_TO_TENSORFLOW.get(activations.display_name(own))
                or "no bias (the activation alone runs tf_ops's kernel)")
    if getattr(layer, "quantization_mode", None) is not None:
        return f"quantized ({layer.quantization_mode})"
    return None


def make_dense_call(original: Callable) -> Callable:
    def call(self, inputs, training=None):
        paired = paired_activation(self)
        spec = paired or activations.of_function(self.activation)
        if (spec is None or spec.entry is None or self.bias is None
                or getattr(self, "quantization_mode", None) is not None):
            out = original(self, inputs, training=training)
            return out if paired is None else paired.apply(out)
        return bias_activation_call(self, inputs, spec.entry.function, dict(spec.attrs))
    return call


EINSUM_DENSE_CALL = "keras.src.layers.core.einsum_dense:EinsumDense.call"


def einsum_dense_reason_left(layer: keras.layers.EinsumDense) -> str | None:
    """Why `layer` runs Keras's own call, or None."""
    if layer.bias is None:
        return "no bias"
    if getattr(layer, "quantization_mode", None) is not None:
        return f"quantized ({layer.quantization_mode})"
    shape = tuple(layer.bias.shape)
    if sum(d != 1 for d in shape) <= 1:
        return "a bias of one axis (Keras's add runs it as BiasAdd already)"
    if tuple(layer.partial_output_shape)[-len(shape):] != shape:
        return "its bias broadcasts over the output's last axes (Keras's add)"
    return None


def make_einsum_dense_call(original: Callable) -> Callable:
    """EinsumDense (MultiHeadAttention's query, key and value projections): the einsum,
    then a bias of several axes by one ``BiasAdd`` (`bias_add`), then the activation."""
    def call(self, inputs, training=None):
        if einsum_dense_reason_left(self) is not None or not floating(inputs):
            return original(self, inputs, training=training)
        x = keras.ops.einsum(self.equation, inputs, self.kernel)
        x = bias_add(x, keras.ops.cast(self.bias, x.dtype))
        return x if self.activation is None else self.activation(x)
    return call


# --- BatchNormalization ---------------------------------------------------------------

def batch_norm_reason_left(layer: keras.layers.BatchNormalization) -> str | None:
    return "renorm=True" if layer.renorm else _epsilon_reason(layer.epsilon, True)


# Under XLA the fused call builds the ops' lowerings (batch_norm_xla.cc). In a library
# without them (-DTF_OPS_XLA=OFF, Bazel) it would build a composite of the same math as
# Keras's: Keras's own call is as fast, and is what the stock model runs.
_BATCH_NORM_LOWERED = xla_lowered(batch_norm_functions.OPS) == frozenset(batch_norm_functions.OPS)


def _xla_without_lowering(lowered: bool) -> bool:
    return not lowered and tf.__internal__.get_enclosing_xla_context() is not None


def make_batch_norm_call(original: Callable) -> Callable:
    def call(self, inputs, training=None, mask=None):
        spec = paired_activation(self) or _IDENTITY
        keras_call = functools.partial(original, self)
        if (batch_norm_reason_left(self) is not None or not floating(inputs)
                or (inputs.shape.rank is not None and inputs.shape.rank < 2)
                or _xla_without_lowering(_BATCH_NORM_LOWERED)):
            return spec.apply(keras_call(inputs, training=training, mask=mask))
        return batch_norm_layers.fused_call(self, inputs, training, mask, spec, keras_call)
    return call


# --- Conv, DepthwiseConv: a batch norm after them folded in (functional.Fold) ------------

def _uses_moving_statistics(batch_norm: keras.layers.BatchNormalization) -> bool:
    """Whether `batch_norm`, the next layer of the running model, will normalise with its
    moving statistics. Keras resolves its ``training`` as it resolved the convolution's
    (the model's argument, else the call context's, which the convolution's call has
    just set): so the context's value now is the one the batch norm will get. A symbolic
    ``training`` (a tensor) is not folded."""
    context = global_state.get_global_attribute("current_call_ctx")
    training = None if context is None else context.get_value("training")
    if training is not None and not isinstance(training, bool):
        return False
    return not (training and batch_norm.trainable)


def make_conv_call(original: Callable) -> Callable:
    """A convolution's call: with the batch norm after it folded in where the plan says
    so and the batch norm uses its moving statistics (`functional.Fold`), as a
    depthwise convolution where it has one group per channel (`convolution`), else
    Keras's own."""
    def call(self, inputs):
        found = folding(self)
        if (found is not None and floating(inputs)
                and _uses_moving_statistics(found[0].batch_norm)
                and batch_norm_folding.cheaper_than_a_pass(self, inputs)):
            fold, folded = found
            folded.add(id(fold.batch_norm))
            kernel, bias = batch_norm_folding.folded_kernel_and_bias(self, fold.batch_norm)
            outputs = convolution.convolve(self, inputs, kernel)
            return batch_norm_folding.bias_activation(
                outputs, bias, fold.activation, self.data_format == "channels_first")
        if convolution.runs_depthwise(self):
            return convolution.depthwise_call(self, inputs)
        return original(self, inputs)
    return call


# --- LayerNormalization, RMSNormalization -----------------------------------------------

def layer_norm_reason_left(layer: keras.layers.LayerNormalization) -> str | None:
    if layer.rms_scaling:
        return "rms_scaling=True (Keras's deprecated variance scaling)"
    return _epsilon_reason(layer.epsilon, False)


def _fused_or_keras(reason_left: Callable, fused: Callable) -> Callable:
    """A factory of the patched call of a layer whose ``call(self, inputs, ...)`` runs
    ``fused(self, inputs, keras_call, ...)``, or Keras's own call where `reason_left`
    gives a reason or the inputs are not of a dtype the ops take."""

    def make(original: Callable) -> Callable:
        def call(self, inputs, *args, **kwargs):
            if reason_left(self) is not None or not floating(inputs):
                return original(self, inputs, *args, **kwargs)
            return fused(self, inputs, functools.partial(original, self), *args, **kwargs)
        return call

    return make


make_layer_norm_call = _fused_or_keras(
    layer_norm_reason_left,
    lambda self, x, keras_call: norm_layers.layer_norm_call(self, x, None, keras_call))


def rms_norm_reason_left(layer: keras.layers.RMSNormalization) -> str | None:
    return _epsilon_reason(layer.epsilon, False)


make_rms_norm_call = _fused_or_keras(
    rms_norm_reason_left, lambda self, x, keras_call: norm_layers.rms_norm_call(self, x))


# --- Softmax ----------------------------------------------------------------------------

def softmax_reason_left(layer: keras.layers.Softmax) -> str | None:
    if isinstance(layer.axis, (tuple, list)) and len(layer.axis) > 1:
        return f"several axes {tuple(layer.axis)}"
    return None


make_softmax_call = _fused_or_keras(
    softmax_reason_left, lambda self, x, keras_call, mask=None: softmax_layers.softmax_call(
        self, x, mask, keras_call))
