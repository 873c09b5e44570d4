"""The replaced functions of Keras's TensorFlow backend (``keras.src.backend.tensorflow.nn``)
and of ``keras.activations``' Mish.

Every Keras activation, by name (``Activation("gelu")``, ``Dense(activation="swish")``),
function (``keras.activations.gelu``, ``keras.ops.gelu``) or layer (``ReLU``,
``LeakyReLU``, ``ELU``), ends in one of these functions, as do the softmax, attention
(``ops.dot_product_attention``, what ``MultiHeadAttention`` runs without dropout) and the
sparse cross-entropy of ``keras.losses``. Replacing them patches every caller at once.
Each replacement runs the tf_ops op where it computes the same thing, and the original
function otherwise (other dtypes, arguments the ops do not take), so Keras's own checks
and errors stay.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any, Callable

import tensorflow as tf

from tf_ops.python.activation.functions import FUNCTIONS
from tf_ops.python.group_norm.patch import fuse_after
from tf_ops.python.patch.keras_layers import floating
from tf_ops.python.softmax import functions as softmax_fn

NN = "keras.src.backend.tensorflow.nn"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _activation(function: str, attrs: Callable[..., dict | None]) -> Callable:
    """A replacement factory: the tf_ops activation `function`, with `attrs(*args,
    **kwargs)` mapping the Keras function's other arguments to the op's attributes
    (None where the op does not compute the same: then the original runs)."""

    def make(original: Callable) -> Callable:
        @functools.wraps(original)
        def replacement(x, *args, **kwargs):
            op_attrs = attrs(*args, **kwargs)
            x = tf.convert_to_tensor(x)
            if op_attrs is None or not floating(x):
                return original(x, *args, **kwargs)
            fused = fuse_after(x, function, op_attrs)  # into the group norm before it
            return FUNCTIONS[function](x, **op_attrs) if fused is None else fused
        return replacement

    return make


def _slope(negative_slope=0.2):
    slope = _number(negative_slope)
    return None if slope is None else {"alpha": slope}


def _elu_alpha(alpha=1.0):
    a = _number(alpha)
    return {"alpha": a} if a is not None and a >= 0 else None  # the op's alpha >= 0


def _celu_alpha(alpha=1.0):
    a = _number(alpha)
    return {"alpha": a} if a is not None and a > 0 else None


def _gelu_form(approximate=True):
    return {"approximate": approximate} if isinstance(approximate, bool) else None


# Activations left to TensorFlow when on their own, and why (what the summary says).
# "relu": TensorFlow's Relu is one kernel each way already, and its gradient reads its
# output, which the next layer keeps anyway; tf_ops's reads its input, one more tensor
# alive per ReLU until the backward (ResNet50's train step: 114% of stock's memory with
# it patched). A ReLU still fuses into the BatchNormalization or Dense before it.
LEFT_TO_TENSORFLOW: dict[str, str] = {
    "relu": "TensorFlow's Relu: one kernel each way already, its gradient reads the output "
            "(less memory than a tf_ops op)",
}

# Keras's name -> (tf_ops function, attribute mapping); none of LEFT_TO_TENSORFLOW.
ACTIVATIONS: dict[str, tuple[str, Callable[..., dict | None]]] = {
    "leaky_relu": ("leaky_relu", _slope),
    "elu": ("elu", _elu_alpha),
    "gelu": ("gelu", _gelu_form),
    "silu": ("swish", lambda: {}),
    "celu": ("celu", _celu_alpha),
    "hard_silu": ("hard_swish", lambda: {}),
    "relu6": ("relu6", lambda: {}),
    "hard_sigmoid": ("hard_sigmoid", lambda: {}),
}
MISH = "keras.src.activations.activations:Mish.static_call"
make_mish = _activation("mish", lambda: {})
ACTIVATION_FACTORIES = {name: _activation(fn, attrs) for name, (fn, attrs) in ACTIVATIONS.items()}


def make_softmax(original: Callable) -> Callable:
    """``tf_ops.softmax`` along one axis; the output keeps its logits for Keras's
    cross-entropy (``_keras_logits``), as the original does."""

    @functools.wraps(original)
    def softmax(x, axis=-1):
        t = tf.convert_to_tensor(x)
        if not isinstance(axis, int) or not floating(t):
            return original(x, axis)
        y = softmax_fn.softmax(t, axis=axis)
        try:
            y._keras_logits = x
        except AttributeError:
            pass
        return y

    return softmax


def make_sparse_categorical_crossentropy(original: Callable) -> Callable:
    """The fused ``TfOps>SparseSoftmaxCrossEntropy`` (loss and gradient in one pass)
    where Keras's reaches ``tf.nn.sparse_softmax_cross_entropy_with_logits``: from
    logits, or from a softmax whose logits Keras kept."""
    from keras.src.backend.tensorflow import nn as keras_nn

    @functools.wraps(original)
    def sparse_categorical_crossentropy(target, output, from_logits=False, axis=-1):
        logits, is_logits = keras_nn._get_logits(
            output, from_logits, "Softmax", "sparse_categorical_crossentropy")
        logits = tf.convert_to_tensor(logits)
        labels = tf.convert_to_tensor(target)
        rank = logits.shape.rank
        if labels.shape.rank == rank and rank is not None and labels.shape[-1] == 1:
            labels = tf.squeeze(labels, axis=-1)
        if (not is_logits or not floating(logits) or rank is None or rank < 1
                or axis not in (-1, rank - 1) or labels.shape.rank != rank - 1
                or not labels.shape.is_compatible_with(logits.shape[:-1])
                or logits.shape[-1] is None):
            return original(target, output, from_logits=from_logits, axis=axis)
        labels = tf.cast(labels, tf.int64)
        loss = softmax_fn.sparse_softmax_cross_entropy(
            tf.reshape(logits, [-1, logits.shape[-1]]), tf.reshape(labels, [-1]),
            ignore_index=softmax_fn.IGNORE_NONE)
        return tf.reshape(loss, tf.shape(labels))

    return sparse_categorical_crossentropy
