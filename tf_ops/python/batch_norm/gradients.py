"""Gradients of the batch-norm ops, of any order.

``TfOps>BatchNormTraining``'s gradient is its grad op; ``TfOps>BatchNormInference``'s
is its grad op plus the statistics' gradients composed from that op's outputs
(``d mean = -s * d offset``, ``d variance = -scale * rstd^2 * d scale / 2``). The grad
ops' own gradients (second order and up) differentiate their portable composites
(``composites.py``), TensorFlow built-ins throughout. Registered once per process
(`core.op_support.register_gradient`).
"""

from __future__ import annotations

import tensorflow as tf

from tf_ops.python.batch_norm import composites
from tf_ops.python.core.op_support import input_positions, op_attrs, op_fn, register_gradient


def _zeros_if_none(g, like):
    return tf.zeros_like(like) if g is None else g


def _training(op, dy, d_mean, d_variance):
    x, scale, offset = op.inputs
    _, mean, variance = op.outputs
    return op_fn("BatchNormTrainingGrad")(
        _zeros_if_none(dy, x), x, scale, offset, mean, variance,
        _zeros_if_none(d_mean, mean), _zeros_if_none(d_variance, variance), **op_attrs(op))


def _inference(op, dy):
    x, scale, offset, mean, variance = op.inputs
    attrs = op_attrs(op)
    dx, d_scale, d_offset = op_fn("BatchNormInferenceGrad")(
        dy, x, scale, offset, mean, variance, **attrs)
    rstd = tf.math.rsqrt(variance + attrs["epsilon"])
    d_mean = -scale * rstd * d_offset
    d_variance = -0.5 * scale * tf.square(rstd) * d_scale
    return dx, d_scale, d_offset, d_mean, d_variance


def _composite_vjp(op_type: str, composite, differentiable: tuple[str, ...]):
    """The gradient of ``op_type`` through its composite, for the inputs named
    `differentiable` (the others get None)."""
    n_inputs_used = input_positions(op_type, differentiable)

    def grad(op, *upstream):
        inputs = list(op.inputs)
        attrs = op_attrs(op)
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
    "TfOps>BatchNormTrainingGrad": _composite_vjp(
        "TfOps>BatchNormTrainingGrad", composites.training_grad,
        ("y_backprop", "x", "scale", "offset", "mean_backprop", "variance_backprop")),
    "TfOps>BatchNormInferenceGrad": _composite_vjp(
        "TfOps>BatchNormInferenceGrad", composites.inference_grad,
        ("y_backprop", "x", "scale", "offset", "mean", "variance")),
    # Every input is independent here (the sums and count come from outside).
    "TfOps>BatchNormTrainingInputGrad": _composite_vjp(
        "TfOps>BatchNormTrainingInputGrad", composites.training_input_grad,
        ("y_backprop", "x", "scale", "offset", "batch_mean", "batch_variance",
         "mean_backprop", "variance_backprop", "scale_backprop", "offset_backprop", "count")),
}

for _name, _fn in _GRADIENTS.items():
    register_gradient(_name, _fn)
