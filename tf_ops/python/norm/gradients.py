"""Gradients of the normalisation ops (``functions.py``), of any order.

- ``TfOps>LayerNorm``/``RmsNorm`` and their ``Add`` forms: the grad ops, from the saved
  statistics (the statistics outputs are not differentiable: they exist for the grad op).
  An ``Add`` op's x and residual get the same gradient, its grad op's dx (h's incoming
  gradient added).
- The grad ops (second order and beyond): TensorFlow's autodiff of the composite's
  backward (``functions.composite`` differentiated with a tape, then differentiated
  again), which recomputes the statistics from x.

Registered once per process (`core.op_support.register_gradient`).
"""

from __future__ import annotations

import tensorflow as tf

from tf_ops.python.core.op_support import op_fn, op_inputs, register_gradient
from tf_ops.python.norm import functions as norm


def _forward_grad(centered: bool, residual: bool):
    def grad(op, *upstream):
        eps = op.get_attr("epsilon")
        inputs = op_inputs(op)
        gamma = inputs.gamma
        if residual:
            dh, dy = upstream[0], upstream[1]
            x = op.outputs[0]  # h
        else:
            dh, dy = None, upstream[0]
            x = inputs.x
        stats = list(op.outputs[(2 if residual else 1):])
        if dy is None:
            dy = tf.zeros_like(x)
        if residual and dh is not None:
            outs = op_fn(norm.op_name(centered, True, True))(
                dy, dh, x, gamma, *stats, epsilon=eps)
        else:
            outs = op_fn(norm.op_name(centered, False, True))(
                dy, x, gamma, *stats, epsilon=eps)
        dx, dparams = outs[0], list(outs[1:])
        return ([dx, dx] if residual else [dx]) + dparams

    return grad


def _composite_grads(centered: bool, dy, x, gamma, epsilon):
    """(dx, dgamma[, dbeta]) of the composite at x, as TF ops (differentiable)."""
    axes = [x.shape.rank - 1]
    beta = tf.zeros_like(gamma) if centered else None
    with tf.GradientTape() as tape:
        watched = [x, gamma] + ([beta] if centered else [])
        tape.watch(watched)
        y = norm.composite(x, gamma, beta, axes, epsilon, centered)
    return tape.gradient(y, watched, output_gradients=dy,
                         unconnected_gradients=tf.UnconnectedGradients.ZERO)


def _grad_grad(centered: bool, residual: bool):
    def grad(op, *upstream):
        eps = op.get_attr("epsilon")
        inputs = op_inputs(op)
        dy, gamma = inputs.dy, inputs.gamma
        x = inputs.h if residual else inputs.x
        upstream = [tf.zeros_like(o) if u is None else u for u, o in zip(upstream, op.outputs)]
        with tf.GradientTape() as tape:
            tape.watch([dy, x, gamma])
            outs = _composite_grads(centered, dy, x, gamma, eps)
        d_dy, d_x, d_gamma = tape.gradient(
            outs, [dy, x, gamma], output_gradients=upstream,
            unconnected_gradients=tf.UnconnectedGradients.ZERO)
        n_stats = 2 if centered else 1
        if residual:
            # dx = f(dy, h, gamma) + dh: d/d(dh) is the upstream of dx.
            return [d_dy, upstream[0], d_x, d_gamma] + [None] * n_stats
        return [d_dy, d_x, d_gamma] + [None] * n_stats

    return grad


for _centered in (True, False):
    for _residual in (False, True):
        register_gradient("TfOps>" + norm.op_name(_centered, _residual),
                          _forward_grad(_centered, _residual))
        register_gradient("TfOps>" + norm.op_name(_centered, _residual, True),
                          _grad_grad(_centered, _residual))
