"""Group normalization fused with the activation after it: `tf_ops.group_norm`.

One ``TfOps>GroupNorm`` op forward (two passes over x) and one ``TfOps>GroupNormGrad``
backward (two passes over x and dy), under XLA too (``group_norm_xla.cc``: a custom call
into the same engine); under `tf_ops.portable()`, and while XLA traces it in a library
built without XLA lowerings, it builds the portable composite instead: Keras 3's own
math (reshape into groups, float32 ``moments``, ``x * inv + res``) from TensorFlow
built-ins, then the activation's portable composite. The op's C++ checks run either way.

gamma, beta and the statistics are float32 for half, bfloat16 and float32 x, float64
for float64 x; the wrapper casts them.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tf_ops.python.batch_norm import composites as activation_composites
from tf_ops.python.activation.resolver import resolve
from tf_ops.python.core import composite
from tf_ops.python.core.library import load_library

_ops = load_library()

OPS = ("GroupNorm", "GroupNormGrad")
_LOWERED = composite.xla_lowered(OPS)
RAW = {"GroupNorm": _ops.tf_ops_group_norm, "GroupNormGrad": _ops.tf_ops_group_norm_grad}


def param_dtype(dtype: tf.DType) -> tf.DType:
    """gamma's, beta's and the statistics' dtype for x of `dtype`."""
    return tf.float64 if dtype == tf.float64 else tf.float32


def op_attrs(groups: int, epsilon: float, axis: int, activation: Any = None,
             **activation_attrs) -> dict:
    """The ops' attributes: groups, epsilon, axis and the activation's."""
    attrs = resolve(activation, **activation_attrs).op_attrs
    attrs.update(groups=int(groups), epsilon=float(epsilon), axis=int(axis))
    return composite.kernel_attrs(attrs)


def _channel_axis(rank: int, axis: int) -> int:
    return axis % rank


def composite_forward(x, scale, offset, *, groups: int, epsilon: float, axis: int,
                      activation: str = "Identity", alpha: float = 0.2, beta: float = 1.0,
                      approximate: bool = False):
    """``TfOps>GroupNorm`` in TensorFlow built-ins: ``(y, mean, rstd)``, Keras's math."""
    x = tf.convert_to_tensor(x)
    compute = x.dtype if x.dtype in (tf.float32, tf.float64) else tf.float32
    rank = x.shape.rank
    a = _channel_axis(rank, axis)
    shape = tf.shape(x)
    channels = shape[a]
    grouped_shape = tf.concat([shape[:a], [groups, channels // groups], shape[a + 1:]], 0)
    xg = tf.reshape(tf.cast(x, compute), grouped_shape)
    reduce_axes = [d for d in range(1, rank + 1) if d != a]
    mean, variance = tf.nn.moments(xg, axes=reduce_axes, keepdims=True)
    rstd = tf.math.rsqrt(variance + tf.cast(epsilon, compute))
    param_shape = [1] * (rank + 1)
    param_shape[a] = groups
    param_shape[a + 1] = -1
    gamma = tf.reshape(tf.cast(scale, compute), param_shape)
    inv = rstd * gamma
    res = tf.reshape(tf.cast(offset, compute), param_shape) - mean * inv
    z = tf.reshape(xg * inv + res, shape)
    y = activation_composites._activation(activation, alpha, beta, approximate)(z)
    stat_shape = tf.stack([shape[0], groups])
    return (tf.cast(y, x.dtype), tf.reshape(mean, stat_shape), tf.reshape(rstd, stat_shape))


def composite_grad(dy, x, scale, offset, mean, rstd, **attrs):
    """``TfOps>GroupNormGrad`` in TensorFlow built-ins: the composite's VJP (the
    statistics recomputed from x)."""
    del mean, rstd
    x = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        tape.watch([x, scale, offset])
        y, _, _ = composite_forward(x, scale, offset, **attrs)
    return tuple(tape.gradient(y, [x, scale, offset], output_gradients=tf.cast(dy, y.dtype),
                               unconnected_gradients=tf.UnconnectedGradients.ZERO))


COMPOSITES = {"GroupNorm": composite_forward, "GroupNormGrad": composite_grad}


def run(op: str, inputs: list, attrs: dict):
    """``TfOps>{op}`` on `inputs`, or its composite (portable mode, XLA tracing)."""
    if composite.use_composite(op, _LOWERED):
        composite.check(op, tuple(inputs), attrs)
        return COMPOSITES[op](*inputs, **attrs)
    return RAW[op](*inputs, **attrs)


def _param(v, x: tf.Tensor, axis: int, fill: float) -> tf.Tensor:
    u = param_dtype(x.dtype)
    if v is not None:
        return tf.cast(tf.convert_to_tensor(v), u)
    rank = x.shape.rank
    if rank is not None and not (rank >= 2 and -rank <= axis < rank and axis % rank != 0):
        return tf.fill([1], tf.constant(fill, u))  # the op's checks name what is wrong
    known = rank is not None and x.shape[axis] is not None
    channels = x.shape[axis] if known else tf.shape(x)[axis]
    return tf.fill([channels], tf.constant(fill, u))


def group_norm(x, gamma=None, beta=None, groups: int = 32, epsilon: float = 1e-3,
               axis: int = -1, activation: Any = None, *, return_statistics: bool = False,
               **activation_attrs):
    """Group normalization fused with an activation:
    ``activation((x - mean) * rsqrt(variance + epsilon) * gamma + beta)``, the mean and
    biased variance per sample and group of channels, over the group's channels and
    every other non-batch axis (Keras's `GroupNormalization`).

    `axis` is the channel axis (-1: channels last, 1: channels first; never 0, the
    batch); its size must be a multiple of `groups`. `gamma` and `beta` (one value per
    channel) may be None (ones, zeros). `activation`: None, a tf_ops activation or its
    name (``"silu"``/``"swish"``, ``"gelu"``, ``"relu"``, ...), with its attributes as
    keywords (``alpha=0.1``), or as ``{"name": "swish", "attrs": {"beta": 2.0}}`` (Swish's
    `beta` is also this function's). Half and bfloat16 x are read directly, with float32 statistics. Its
    gradient is one fused op, with deterministic dgamma and dbeta.
    `return_statistics`: return ``(y, mean, rstd)``, the statistics ``[batch, groups]``
    that `group_norm_grad` takes.

    Example:
      >>> x = tf.constant([[[1.0, 2.0, 3.0, 5.0]]])
      >>> tf_ops.group_norm(x, groups=2, epsilon=1e-6).numpy().round(3)
      array([[[-1., 1., -1., 1.]]], dtype=float32)
      >>> tf_ops.group_norm(x, groups=2, epsilon=1e-6, activation="relu").numpy().round(3) + 0.0
      array([[[0., 1., 0., 1.]]], dtype=float32)
    """
    x = tf.convert_to_tensor(x)
    attrs = op_attrs(groups, epsilon, axis, activation, **activation_attrs)
    inputs = [x, _param(gamma, x, axis, 1.0), _param(beta, x, axis, 0.0)]
    y, mean, rstd = run("GroupNorm", inputs, attrs)
    return (y, mean, rstd) if return_statistics else y


def group_norm_grad(dy, x, gamma, beta, mean, rstd, groups: int = 32, epsilon: float = 1e-3,
                    axis: int = -1, activation: Any = None,
                    **activation_attrs) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The gradients of `group_norm` back to ``(x, gamma, beta)`` from its statistics
    (``return_statistics=True``), recomputing the activation's derivative from x: two
    passes over x and `dy`; dgamma and dbeta summed in fixed tiles (deterministic).

    Example:
      >>> x = tf.constant([[[1.0, 2.0, 3.0, 5.0]]])
      >>> y, mean, rstd = tf_ops.group_norm(x, groups=2, return_statistics=True)
      >>> dx, dgamma, dbeta = tf_ops.group_norm_grad(tf.ones_like(x), x, None, None,
      ...                                            mean, rstd, groups=2)
      >>> dbeta.numpy()
      array([1., 1., 1., 1.], dtype=float32)
    """
    x = tf.convert_to_tensor(x)
    attrs = op_attrs(groups, epsilon, axis, activation, **activation_attrs)
    inputs = [tf.convert_to_tensor(dy, x.dtype), x, _param(gamma, x, axis, 1.0),
              _param(beta, x, axis, 0.0), tf.cast(mean, param_dtype(x.dtype)),
              tf.cast(rstd, param_dtype(x.dtype))]
    return tuple(run("GroupNormGrad", inputs, attrs))


FUNCTIONS = {"group_norm": group_norm, "group_norm_grad": group_norm_grad}
