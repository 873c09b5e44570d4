"""Fused batch normalization + activation: `tf_ops.batch_norm` (training: batch
statistics), `tf_ops.batch_norm_inference` (given statistics) and their grad ops.

Each runs one ``TfOps>BatchNorm*`` op; under `tf_ops.portable()`, and while XLA traces
it in a library without the XLA lowerings, it builds the portable composite instead:
Keras's own math from TensorFlow built-ins (`composites.py`). The op's C++ checks run
either way.

Per-channel tensors (scale, offset, statistics and their gradients) are float32 for
half, bfloat16 and float32 x, float64 for float64 x; the wrappers cast them.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tf_ops.python.batch_norm import composites
from tf_ops.python.activation.resolver import ActivationSpec, resolve
from tf_ops.python.core import composite
from tf_ops.python.core.op_support import check, op_fn

OPS = ("BatchNormTraining", "BatchNormTrainingGrad", "BatchNormInference",
       "BatchNormInferenceGrad", "BatchNormTrainingInputGrad")
_LOWERED = composite.xla_lowered(OPS)


def channel_dtype(dtype: tf.DType) -> tf.DType:
    """The per-channel tensors' dtype for x of `dtype`."""
    return tf.float64 if dtype == tf.float64 else tf.float32


def op_attrs(spec: ActivationSpec, axis: int, epsilon: float) -> dict:
    attrs = spec.op_attrs
    attrs.update(axis=int(axis), epsilon=float(epsilon))
    return composite.kernel_attrs(attrs)


def _channels(x: tf.Tensor, axis: int) -> tf.Tensor:
    rank = x.shape.rank
    if rank is not None and not (rank >= 2 and -rank <= axis < rank):
        return 1  # the op's checks name what is wrong
    if rank is not None and x.shape[axis] is not None:
        return x.shape[axis]
    return tf.shape(x)[axis]


def _per_channel(v, x: tf.Tensor, axis: int, fill: float) -> tf.Tensor:
    u = channel_dtype(x.dtype)
    if v is None:
        return tf.fill([_channels(x, axis)], tf.constant(fill, u))
    return tf.cast(tf.convert_to_tensor(v), u)


def _grad_inputs(y_backprop, x: tf.Tensor, scale, offset, mean, variance, axis: int) -> list:
    """The grad ops' first inputs: y_backprop, x, scale, offset and the statistics."""
    u = channel_dtype(x.dtype)
    return [tf.convert_to_tensor(y_backprop, x.dtype), x, _per_channel(scale, x, axis, 1.0),
            _per_channel(offset, x, axis, 0.0), tf.cast(mean, u), tf.cast(variance, u)]


def _run(op: str, inputs: list, attrs: dict):
    if composite.use_composite(op, _LOWERED):
        check(op, tuple(inputs), attrs)
        return composites.COMPOSITES[op](*inputs, **attrs)
    return op_fn(op)(*inputs, **attrs)


def batch_norm(x, scale=None, offset=None, *, axis: int = -1, epsilon: float = 1e-3,
               activation: Any = None, **activation_attrs) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Training batch normalization fused with an activation: returns
    ``(y, batch_mean, batch_variance)`` with ``y = activation(scale * (x - mean) *
    rsqrt(variance + epsilon) + offset)`` and the batch mean and biased variance over
    every axis but `axis` (as Keras 3 computes them), in two passes over x.

    `scale` (gamma) and `offset` (beta) may be None (ones, zeros). `activation`: None,
    a tf_ops activation or its name (``"swish"``, ``"gelu"``, ``"relu"`` = ``leaky_relu``
    with ``alpha=0``, ...), with its attributes as keywords (``alpha=0.1``).
    Half and bfloat16 x are read directly and computed in float32; the statistics are
    float32 (float64 for float64 x), bit-identical for any thread count.

    Example:
      >>> x = tf.constant([[1.0, -2.0], [3.0, 2.0]])
      >>> y, mean, variance = tf_ops.batch_norm(x, activation="relu")
      >>> mean.numpy(), variance.numpy()
      (array([2., 0.], dtype=float32), array([1., 4.], dtype=float32))
      >>> y.numpy().round(4) + 0.0  # relu as leaky_relu(alpha=0) gives -0.0 for x < 0
      array([[0.    , 0.    ],
             [0.9995, 0.9999]], dtype=float32)
    """
    x = tf.convert_to_tensor(x)
    spec = resolve(activation, **activation_attrs)
    attrs = op_attrs(spec, axis, epsilon)
    inputs = [x, _per_channel(scale, x, axis, 1.0), _per_channel(offset, x, axis, 0.0)]
    return tuple(_run("BatchNormTraining", inputs, attrs))


def batch_norm_inference(x, mean, variance, scale=None, offset=None, *, axis: int = -1,
                         epsilon: float = 1e-3, activation: Any = None,
                         **activation_attrs) -> tf.Tensor:
    """Inference batch normalization fused with an activation, one pass:
    ``activation(x * s + t)``, ``s = scale * rsqrt(variance + epsilon)``,
    ``t = offset - mean * s``, with the given (moving) statistics. Arguments as
    `batch_norm`'s.

    Example:
      >>> tf_ops.batch_norm_inference([[2.0, 0.0]], mean=[1.0, 0.0], variance=[1.0, 1.0],
      ...                             epsilon=1e-6, activation="sigmoid").numpy().round(4)
      array([[0.7311, 0.5   ]], dtype=float32)
    """
    x = tf.convert_to_tensor(x)
    spec = resolve(activation, **activation_attrs)
    attrs = op_attrs(spec, axis, epsilon)
    u = channel_dtype(x.dtype)
    inputs = [x, _per_channel(scale, x, axis, 1.0), _per_channel(offset, x, axis, 0.0),
              tf.cast(mean, u), tf.cast(variance, u)]
    return _run("BatchNormInference", inputs, attrs)


def batch_norm_grad(y_backprop, x, scale, offset, batch_mean, batch_variance,
                    mean_backprop=None, variance_backprop=None, *, axis: int = -1,
                    epsilon: float = 1e-3, activation: Any = None,
                    **activation_attrs) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The gradients of `batch_norm`'s outputs (y, and optionally the mean and
    variance) back to ``(x, scale, offset)``, recomputing the normalised value and the
    activation's derivative from x: two passes over x and `y_backprop`.

    Example:
      >>> x = tf.constant([[1.0], [3.0]])
      >>> _, m, v = tf_ops.batch_norm(x, epsilon=1e-6)
      >>> dx, dscale, doffset = tf_ops.batch_norm_grad([[1.0], [0.0]], x, None, None, m, v,
      ...                                              epsilon=1e-6)
      >>> dx.numpy().round(4).ravel() + 0.0, doffset.numpy()
      (array([0., 0.], dtype=float32), array([1.], dtype=float32))
    """
    x = tf.convert_to_tensor(x)
    attrs = op_attrs(resolve(activation, **activation_attrs), axis, epsilon)
    inputs = _grad_inputs(y_backprop, x, scale, offset, batch_mean, batch_variance, axis)
    inputs += [_per_channel(mean_backprop, x, axis, 0.0),
               _per_channel(variance_backprop, x, axis, 0.0)]
    return tuple(_run("BatchNormTrainingGrad", inputs, attrs))


def batch_norm_inference_grad(y_backprop, x, scale, offset, mean, variance, *,
                              axis: int = -1, epsilon: float = 1e-3,
                              activation: Any = None,
                              **activation_attrs) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The gradients of `batch_norm_inference` back to ``(x, scale, offset)`` with the
    statistics held fixed (fine-tuning a frozen layer), in one pass.

    Example:
      >>> dx, dscale, doffset = tf_ops.batch_norm_inference_grad(
      ...     [[1.0]], [[3.0]], [2.0], None, [1.0], [4.0], epsilon=1e-6)
      >>> dx.numpy().round(4), dscale.numpy().round(4), doffset.numpy()
      (array([[1.]], dtype=float32), array([1.], dtype=float32), array([1.], dtype=float32))
    """
    x = tf.convert_to_tensor(x)
    attrs = op_attrs(resolve(activation, **activation_attrs), axis, epsilon)
    inputs = _grad_inputs(y_backprop, x, scale, offset, mean, variance, axis)
    return tuple(_run("BatchNormInferenceGrad", inputs, attrs))


def batch_norm_input_grad(y_backprop, x, scale, offset, batch_mean, batch_variance,
                              scale_backprop, offset_backprop, count, mean_backprop=None,
                              variance_backprop=None, *, axis: int = -1,
                              epsilon: float = 1e-3, activation: Any = None,
                              **activation_attrs) -> tf.Tensor:
    """`batch_norm_grad`'s dx when the batch statistics are those of a larger batch that
    x is part of (synchronized batch norm): from the parameter gradients
    `scale_backprop` and `offset_backprop` (as `batch_norm_grad` or
    `batch_norm_inference_grad` give them) and the statistics' gradients, each summed
    over the whole batch, and its element count per channel `count`. One pass over x
    and `y_backprop`; with one device's own sums and count it is `batch_norm_grad`'s dx.

    Example:
      >>> x, dy = tf.constant([[1.0], [3.0]]), tf.constant([[1.0], [0.0]])
      >>> _, m, v = tf_ops.batch_norm(x, epsilon=1e-6)
      >>> _, dscale, doffset = tf_ops.batch_norm_inference_grad(dy, x, None, None, m, v,
      ...                                                       epsilon=1e-6)
      >>> dx = tf_ops.batch_norm_input_grad(dy, x, None, None, m, v, dscale, doffset,
      ...                                   2.0, epsilon=1e-6)
      >>> dx.numpy().round(4).ravel() + 0.0
      array([0., 0.], dtype=float32)
    """
    x = tf.convert_to_tensor(x)
    attrs = op_attrs(resolve(activation, **activation_attrs), axis, epsilon)
    u = channel_dtype(x.dtype)
    inputs = _grad_inputs(y_backprop, x, scale, offset, batch_mean, batch_variance, axis)
    inputs += [_per_channel(mean_backprop, x, axis, 0.0),
               _per_channel(variance_backprop, x, axis, 0.0),
               tf.cast(scale_backprop, u), tf.cast(offset_backprop, u), tf.cast(count, u)]
    return _run("BatchNormTrainingInputGrad", inputs, attrs)


FUNCTIONS = {
    "batch_norm": batch_norm,
    "batch_norm_inference": batch_norm_inference,
    "batch_norm_grad": batch_norm_grad,
    "batch_norm_inference_grad": batch_norm_inference_grad,
    "batch_norm_input_grad": batch_norm_input_grad,
}
