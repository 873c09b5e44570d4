"""Gradients of the batch-norm ops, of any order.

``TfOps>BatchNormTraining``'s gradient is its grad op; ``TfOps>BatchNormInference``'s
is its grad op plus the statistics' gradients composed from that op's outputs
(``d mean = -s * d offset``, ``d variance = -scale * rstd^2 * d scale / 2``). The grad
ops' own gradients (second order and up) differentiate their portable composites
(``composites.py``), TensorFlow built-ins throughout.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.framework import ops

from tf_ops.python.batch_norm import composites, functions

_ATTRS = ("epsilon", "axis", "activation", "alpha", "beta", "approximate")


def _attrs(op) -> dict:
    result = {name: op.get_attr(name) for name in _ATTRS}
    result["activation"] = result["activation"].decode()
    return result


def _zeros_if_none(g, like):
    return tf.zeros_like(like) if g is None else g


def _training(op, dy, d_mean, d_variance):
    x, scale, offset = op.inputs
    _, mean, variance = op.outputs
    return functions._RAW["BatchNormTrainingGrad"](
        _zeros_if_none(dy, x), x, scale, offset, mean, variance,
        _zeros_if_none(d_mean, mean), _zeros_if_none(d_variance, variance), **_attrs(op))


def _inference(op, dy):
    x, scale, offset, mean, variance = op.inputs
    attrs = _attrs(op)
    dx, d_scale, d_offset = functions._RAW["BatchNormInferenceGrad"](
        dy, x, scale, offset, mean, variance, **attrs)
    rstd = tf.math.rsqrt(variance + attrs["epsilon"])
    d_mean = -scale * rstd * d_offset
    d_variance = -0.5 * scale * tf.square(rstd) * d_scale
    return dx, d_scale, d_offset, d_mean, d_variance


def _composite_vjp(composite, n_inputs_used):
    def grad(op, *upstream):
        inputs = list(op.inputs)
        attrs = _attrs(op)
        watched = [inputs[i] for i in n_inputs_used]
        with tf.GradientTape() as tape:
            tape.watch(watched)
            outputs = composite(*inputs, **attrs)
        if not isinstance(outputs, (tuple, list)):
            outputs = (outputs,)
        upstream = [_zeros_if_none(u, o) for u, o in zip(upstream, outputs)]
        found = tape.gradient(list(outputs), watched, output_gradients=upstream,
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        result = [None] * len(inputs)
        for i, g in zip(n_inputs_used, found):
            result[i] = g
        return result

    return grad


_GRADIENTS = {
    "TfOps>BatchNormTraining": _training,
    "TfOps>BatchNormInference": _inference,
    # Training grad: the statistics inputs are the forward's outputs, functions of
    # x that the composite recomputes: no gradient of their own.
    "TfOps>BatchNormTrainingGrad": _composite_vjp(composites.training_grad,
                                                  (0, 1, 2, 3, 6, 7)),
    "TfOps>BatchNormInferenceGrad": _composite_vjp(composites.inference_grad,
                                                   (0, 1, 2, 3, 4, 5)),
    # Every input is independent here (the sums and count come from outside).
    "TfOps>BatchNormTrainingInputGrad": _composite_vjp(
        composites.training_input_grad, tuple(range(11))),
}

for _name, _fn in _GRADIENTS.items():
    try:
        ops.gradient_registry.lookup(_name)
    except LookupError:
        ops.RegisterGradient(_name)(_fn)
