"""What `tf_ops.patch_keras()` runs for Keras's ``GroupNormalization``, and how the
activation after it fuses into it.

``GroupNormalization.call`` (`make_call`) runs `layers.fused_call`: one
``TfOps>GroupNorm`` op forward and one grad op backward, Keras's own call where the op
does not compute the same (`reason_left`, and inputs of other dtypes).

The activation after it fuses wherever the activation is called with the norm's
output, however the two are written: a functional model's layers, or a subclassed
layer that calls ``self.norm(x)`` then ``self.act(x)`` or ``ops.silu(x)`` (keras-hub's
VAE ``ResNetBlock``). While a graph is traced, the norm's output tensor carries what
made it (`_MARK`: the layer and its input); the patched activation functions
(``patch/keras_backend.py``) ask `fuse_after` first, which builds one fused op
``GroupNorm(activation=...)`` from the same input. The norm's own op is then unused and
TensorFlow prunes it from the function (it is stateless), and the tape records only
the fused op. Eagerly, the norm has already run: the activation runs on its own (a
second group-norm pass would cost more than it saves).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import keras
import tensorflow as tf

from tf_ops.python.activation.resolver import ActivationSpec, resolve
from tf_ops.python.group_norm import layers

TARGET = "keras.src.layers.normalization.group_normalization:GroupNormalization.call"
_FLOATS = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
_IDENTITY = resolve(None)


def reason_left(layer: keras.layers.GroupNormalization) -> str | None:
    """Why `layer` runs Keras's own call, or None."""
    eps = layer.epsilon
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
        return f"epsilon={eps!r} (the op needs a finite epsilon > 0)"
    if not isinstance(layer.axis, int):
        return f"axis={layer.axis!r} (the op takes one channel axis)"
    return None


def _runs_fused(layer, inputs) -> bool:
    if reason_left(layer) is not None:
        return False
    try:
        x = tf.convert_to_tensor(inputs)
    except (TypeError, ValueError):
        return False
    rank = x.shape.rank
    return (x.dtype in _FLOATS and rank is not None and rank >= 2
            and layer.axis % rank != 0)


def make_call(original: Callable) -> Callable:
    """The patched ``GroupNormalization.call``."""

    @functools.wraps(original)
    def call(self, inputs, *args, **kwargs):
        if args or kwargs or not _runs_fused(self, inputs):
            return original(self, inputs, *args, **kwargs)
        return layers.fused_call(self, inputs, _IDENTITY)

    return call


def fuse_after(x: Any, function: str, attrs: dict) -> tf.Tensor | None:
    """``function(x, **attrs)`` (a tf_ops activation) fused into the group norm whose
    output `x` is, while a graph is traced; None where `x` is not such an output."""
    found = getattr(x, layers.MARK, None)
    if found is None or tf.executing_eagerly():
        return None
    layer, inputs = found
    spec: ActivationSpec = resolve(function, **attrs)
    return layers.fused_call(layer, inputs, spec)
