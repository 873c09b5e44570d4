"""Synchronized batch normalization: the statistics of the global batch of a
tf.distribute strategy's replicas, with the fused ops.

Forward, on each replica: ``TfOps>BatchNormTraining`` for this replica's mean and
variance alone (its y unused, so TensorFlow's executor asks the kernel for the
statistics pass only), one all-reduce of the sums they give ``[n (mean - k), n
(variance + (mean - k)^2), n]`` (about a common shift k, in float64, so that no digit
cancels), the global mean and variance from them, then ``TfOps>BatchNormInference``
with them: two passes over x, as on one device.

Backward (a custom gradient): ``TfOps>BatchNormInferenceGrad`` for this replica's
sums (dx unused: the sums pass only), one all-reduce of them and of the statistics'
own gradients, then ``TfOps>BatchNormTrainingInputGrad`` for dx: two passes over x
and dy. The gradients of scale and offset returned are this replica's shares, which
the optimizer sums over the replicas as it does every variable's.

Keras computes the same statistics (``E[x^2] - E[x]^2`` of all-reduced float32 sums,
``keras/src/backend/tensorflow/nn.py``, ``_compute_moments_sync``); here each replica's
own statistics are exact (shifted sums) and their combination is in float64.
"""

from __future__ import annotations

import tensorflow as tf

from tf_ops.python.batch_norm import functions
from tf_ops.python.activation.resolver import ActivationSpec
from tf_ops.python.core import composite
from tf_ops.python.core.op_support import op_fn

_OPS = ("BatchNormTraining", "BatchNormInference", "BatchNormInferenceGrad",
        "BatchNormTrainingInputGrad")


def replica_context_to_synchronize():
    """The replica context whose replicas share the statistics, or None (no strategy,
    one replica, or the cross-replica context), as Keras decides."""
    if not tf.distribute.has_strategy():
        return None
    ctx = tf.distribute.get_replica_context()
    return ctx if ctx is not None and ctx.num_replicas_in_sync > 1 else None


def fused_ops_available() -> bool:
    """False under `tf_ops.portable()` or in XLA without the lowerings: Keras's own
    synchronized math then."""
    return not any(composite.use_composite(op, functions._LOWERED) for op in _OPS)


def batch_norm_synchronized(x, scale, offset, shift, replica_context, *, axis: int,
                            epsilon: float, activation: ActivationSpec):
    """`tf_ops.batch_norm` with the statistics of the batch across the replicas of
    `replica_context`: ``(y, mean, variance)``. `shift` [C] (the layer's moving mean)
    is the common point the replicas' sums are taken about; any value gives the same
    statistics, one near the mean the most accurate ones.

    Example (inside ``strategy.run``):
      >>> y, mean, var = batch_norm_synchronized(  # doctest: +SKIP
      ...     x, gamma, beta, moving_mean, tf.distribute.get_replica_context(), axis=-1,
      ...     epsilon=1e-3, activation=resolve("swish"))
    """
    x = tf.convert_to_tensor(x)
    attrs = functions.op_attrs(activation, axis, epsilon)
    u = functions.channel_dtype(x.dtype)
    channels = functions._channels(x, axis)
    scale = functions._per_channel(scale, x, axis, 1.0)
    offset = functions._per_channel(offset, x, axis, 0.0)
    shift = tf.cast(tf.stop_gradient(shift), tf.float64)
    ar = lambda v: replica_context.all_reduce(tf.distribute.ReduceOp.SUM, v)  # noqa: E731

    @tf.custom_gradient
    def fused(x, scale, offset):
        _, local_mean, local_variance = op_fn("BatchNormTraining")(x, scale, offset, **attrs)
        n = tf.cast(tf.size(x, out_type=tf.int64) // tf.cast(channels, tf.int64),
                    tf.float64)
        d = tf.cast(local_mean, tf.float64) - shift
        sums = ar(tf.concat([n * d, n * (tf.cast(local_variance, tf.float64) + d * d),
                             [n]], 0))
        count = sums[-1]
        m1 = sums[:channels] / count
        mean = tf.cast(shift + m1, u)
        variance = tf.cast(tf.maximum(sums[channels:-1] / count - m1 * m1, 0.0), u)
        y = op_fn("BatchNormInference")(x, scale, offset, mean, variance, **attrs)

        def grad(dy, d_mean, d_variance):
            _, dscale, doffset = op_fn("BatchNormInferenceGrad")(
                dy, x, scale, offset, mean, variance, **attrs)
            d_mean = tf.zeros_like(mean) if d_mean is None else d_mean
            d_variance = tf.zeros_like(variance) if d_variance is None else d_variance
            total = tf.split(ar(tf.concat([dscale, doffset, d_mean, d_variance], 0)), 4)
            dx = op_fn("BatchNormTrainingInputGrad")(
                dy, x, scale, offset, mean, variance, total[2], total[3], total[0],
                total[1], tf.cast(count, u), **attrs)
            return dx, dscale, doffset

        return (y, mean, variance), grad

    return fused(x, scale, offset)
