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


def _uniform_rows_term(kept, is_causal: bool, value: tf.Tensor, shape) -> tf.Tensor:
    """What Keras's attention gives the query rows where the mask keeps no key: there
    every logit is the same large negative number, so the weights are uniform and
    the output is the mean of the values; the fused softmax gives those rows zeros.
    Returns that mean where a row keeps nothing, 0 elsewhere, [B, T, N, H], computed
    on the mask's shape and the values (not on the [B, N, T, S] weights)."""
    if is_causal:
        kept = tf.logical_and(kept, softmax_fn.causal_kept(shape))
    dead = tf.logical_not(tf.reduce_any(kept, axis=-1, keepdims=True))  # [.., T, 1]
    dead = tf.broadcast_to(dead, tf.concat([shape[:3], [1]], 0))  # [B, N, T, 1]
    dead = tf.cast(tf.transpose(dead, [0, 2, 1, 3]), value.dtype)  # [B, T, N, 1]
    return dead * tf.reduce_mean(value, axis=1, keepdims=True)  # value mean: [B, 1, N, H]


def _heads_first(t: tf.Tensor) -> tf.Tensor:
    """[B, T, N, H] <-> [B, N, T, H]."""
    return tf.transpose(t, [0, 2, 1, 3])


def make_dot_product_attention(original: Callable) -> Callable:
    """Keras's TensorFlow attention (einsum, scale, mask, softmax, einsum) with the
    scale, mask (or causal mask) and softmax in one ``TfOps>ScaledMaskedSoftmax``, and
    the einsums as batched matmuls."""

    @functools.wraps(original)
    def dot_product_attention(query, key, value, bias=None, mask=None, scale=None,
                              is_causal=False, flash_attention=None,
                              attn_logits_soft_cap=None):
        def keras_own():
            return original(query, key, value, bias=bias, mask=mask, scale=scale,
                            is_causal=is_causal, flash_attention=flash_attention,
                            attn_logits_soft_cap=attn_logits_soft_cap)

        q, k, v = (tf.convert_to_tensor(t) for t in (query, key, value))
        head_dim = k.shape[-1] if k.shape.rank == 4 else None
        if (bias is not None or flash_attention or attn_logits_soft_cap is not None
                or q.shape.rank != 4 or head_dim is None or not isinstance(is_causal, bool)
                or not all(floating(t) for t in (q, k, v))):
            return keras_own()
        if scale is None:
            scale = 1.0 / math.sqrt(head_dim)
        scale = _number(scale)
        kept = None
        if mask is not None:
            kept = tf.convert_to_tensor(mask)
            if kept.dtype != tf.bool:
                return keras_own()
        if scale is None:
            return keras_own()
        from keras.src import backend  # the dtype rules of the original
        compute = backend.result_type(q.dtype, k.dtype, v.dtype)
        q, k, v = (tf.cast(t, compute) for t in (q, k, v))
        heads, kv_heads = q.shape[2], k.shape[2]
        if heads is not None and kv_heads is not None and heads > kv_heads > 1:
            k = tf.repeat(k, repeats=heads // kv_heads, axis=2)
            v = tf.repeat(v, repeats=heads // kv_heads, axis=2)
        # Keras's einsums as heads-first transposes and batched matmuls: TensorFlow's
        # Einsum op (oneDNN's on the CPU) ran them 1.5x slower, forward and backward
        # (GPT-2's shapes: 17 against 11 ms per layer), for the same products.
        logits = tf.matmul(_heads_first(q), _heads_first(k), transpose_b=True)
        logits = tf.cast(logits, backend.result_type(q.dtype, "float32"))
        probs = softmax_fn.softmax(logits, mask=kept, scale=scale, causal=is_causal)
        out = _heads_first(tf.matmul(tf.cast(probs, k.dtype), _heads_first(v)))
        if kept is not None:
            out += _uniform_rows_term(kept, is_causal, v, tf.shape(logits))
        return out

    return dot_product_attention


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
