"""The batch-norm ops as compositions of TensorFlow built-in ops: Keras 3's own math
(``tf.nn.moments``' mean and biased variance of ``x - stop_gradient(mean)``, and
``tf.nn.batch_normalization``'s ``x * s + (offset - mean * s)``), then the activation's
portable composite (``activation/table.py``). Half and bfloat16 compute in float32 and
are rounded once, as the kernels.

Built under `tf_ops.portable()` (exports that run without the library) and while XLA
traces the ops. Their gradients are TensorFlow's autodiff; the grad ops' composites are
that autodiff written out (a VJP), which also serves as the grad ops' own gradient
(second and higher orders).
"""

from __future__ import annotations

import tensorflow as tf

from tf_ops.python.activation.table import ACTIVATIONS

_BY_OP = {entry.op: entry for entry in ACTIVATIONS}


def _activation(name: str, alpha: float, beta: float, approximate: bool):
    if name == "Identity":
        return lambda z: z
    entry = _BY_OP[name]
    from tf_ops.python.core import op_info

    attrs = {"alpha": alpha, "beta": beta, "approximate": approximate}
    names = {a.name for a in op_info.attrs(op_info.NAMESPACE + entry.op)}
    own = {k: v for k, v in attrs.items() if k in names}
    return lambda z: entry.forward(z, **own)


def _derivative(name: str, alpha: float, beta: float, approximate: bool):
    """f' at the features z, from the activation's portable derivative."""
    if name == "Identity":
        return tf.ones_like
    entry = _BY_OP[name]
    from tf_ops.python.core import op_info

    attrs = {"alpha": alpha, "beta": beta, "approximate": approximate}
    names = {a.name for a in op_info.attrs(op_info.NAMESPACE + entry.op)}
    own = {k: v for k, v in attrs.items() if k in names}
    if op_info.grad_takes_outputs(entry.op):
        return lambda z: entry.derivative(entry.forward(z, **own), **own)
    return lambda z: entry.derivative(z, **own)


def _layout(x: tf.Tensor, axis: int):
    rank = x.shape.rank
    axis = axis % rank
    axes = [d for d in range(rank) if d != axis]
    shape = [1] * rank
    shape[axis] = -1
    return axes, shape


def _compute(x):
    return x.dtype if x.dtype in (tf.float32, tf.float64) else tf.float32


def affine(mean, variance, epsilon, scale=None, offset=None):
    """``(s, t)`` with the normalisation ``x * s + t``: ``s = scale * rsqrt(variance +
    epsilon)``, ``t = offset - mean * s`` (Keras's ``tf.nn.batch_normalization`` form;
    a missing scale is 1, a missing offset 0)."""
    s = tf.math.rsqrt(variance + epsilon)
    if scale is not None:
        s = s * scale
    t = -mean * s if offset is None else offset - mean * s
    return s, t


def _normalize(x, scale, offset, mean, variance, epsilon, axis, act):
    _, shape = _layout(x, axis)
    xc = tf.cast(x, _compute(x))
    inv, shift = affine(tf.reshape(mean, shape), tf.reshape(variance, shape), epsilon,
                        tf.reshape(scale, shape), tf.reshape(offset, shape))
    return tf.cast(act(xc * inv + shift), x.dtype)


def training(x, scale, offset, *, epsilon, axis, activation, alpha, beta, approximate,
             exact_derivatives=False):
    """TfOps>BatchNormTraining: (y, batch_mean, batch_variance). Keras stops the
    gradient of the mean inside the variance (the same first derivative, as the
    deviations sum to 0); `exact_derivatives` keeps it, for the grad ops' gradients
    (second order and up)."""
    act = _activation(activation, alpha, beta, approximate)
    axes, _ = _layout(x, axis)
    xc = tf.cast(x, _compute(x))
    mean = tf.reduce_mean(xc, axes, keepdims=True)
    centre = mean if exact_derivatives else tf.stop_gradient(mean)
    variance = tf.reduce_mean(tf.math.squared_difference(xc, centre), axes, keepdims=True)
    mean, variance = tf.reshape(mean, [-1]), tf.reshape(variance, [-1])
    y = _normalize(x, scale, offset, mean, variance, epsilon, axis, act)
    return y, mean, variance


def inference(x, scale, offset, mean, variance, *, epsilon, axis, activation, alpha, beta,
              approximate):
    """TfOps>BatchNormInference: y."""
    act = _activation(activation, alpha, beta, approximate)
    return _normalize(x, scale, offset, mean, variance, epsilon, axis, act)


def training_grad(dy, x, scale, offset, batch_mean, batch_variance, mean_backprop,
                  variance_backprop, **attrs):
    """TfOps>BatchNormTrainingGrad: the VJP of `training` (the statistics recomputed
    from x, as functions of it)."""
    del batch_mean, batch_variance
    with tf.GradientTape() as tape:
        tape.watch([x, scale, offset])
        outputs = training(x, scale, offset, exact_derivatives=True, **attrs)
    return tuple(tape.gradient(outputs, [x, scale, offset],
                               output_gradients=[dy, mean_backprop, variance_backprop],
                               unconnected_gradients=tf.UnconnectedGradients.ZERO))


def inference_grad(dy, x, scale, offset, mean, variance, **attrs):
    """TfOps>BatchNormInferenceGrad: the VJP of `inference` for x, scale, offset."""
    with tf.GradientTape() as tape:
        tape.watch([x, scale, offset])
        y = inference(x, scale, offset, mean, variance, **attrs)
    return tuple(tape.gradient(y, [x, scale, offset], output_gradients=dy,
                               unconnected_gradients=tf.UnconnectedGradients.ZERO))


def training_input_grad(dy, x, scale, offset, batch_mean, batch_variance,
                            mean_backprop, variance_backprop, scale_backprop,
                            offset_backprop, count, *, epsilon, axis, activation, alpha,
                            beta, approximate):
    """TfOps>BatchNormTrainingInputGrad: ``s * dz + c1 * (x - mean) + c0`` with the
    coefficients of the given parameter and statistics gradients over `count`
    elements, written out (``batch_norm_math.h``'s TrainingDxOf)."""
    derivative = _derivative(activation, alpha, beta, approximate)
    _, shape = _layout(x, axis)
    b = lambda v: tf.reshape(v, shape)  # noqa: E731
    xc = tf.cast(x, _compute(x))
    rstd = tf.math.rsqrt(batch_variance + epsilon)
    s = scale * rstd
    z = xc * b(s) + b(offset - batch_mean * s)
    dz = tf.cast(dy, xc.dtype) * derivative(z)
    c1 = (2.0 * variance_backprop - s * rstd * scale_backprop) / count
    c0 = (mean_backprop - s * offset_backprop) / count
    return tf.cast(b(s) * dz + b(c1) * (xc - b(batch_mean)) + b(c0), x.dtype)


COMPOSITES = {
    "BatchNormTraining": training,
    "BatchNormTrainingInputGrad": training_input_grad,
    "BatchNormTrainingGrad": training_grad,
    "BatchNormInference": inference,
    "BatchNormInferenceGrad": inference_grad,
}
