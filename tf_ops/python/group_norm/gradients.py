"""Gradients of the group-norm ops, of any order.

``TfOps>GroupNorm``'s gradient is its grad op, from the saved statistics (the mean
and rstd outputs exist for the grad op and are not differentiable: their incoming
gradients are dropped). The grad op's own gradient (second order and up) is
TensorFlow's autodiff of its composite (``functions.composite_grad``), which
recomputes the statistics from x.
"""

from __future__ import annotations

import tensorflow as tf

from tf_ops.python.core.op_support import op_inputs, register_gradient
from tf_ops.python.group_norm import functions

_ATTRS = ("groups", "epsilon", "axis", "activation", "alpha", "beta", "approximate")


def attrs_of(op) -> dict:
    """The op's attributes as the functions take them."""
    result = {name: op.get_attr(name) for name in _ATTRS}
    result["activation"] = result["activation"].decode()
    return result


def _forward(op, dy, *_unused_stat_grads):
    inputs = op_inputs(op)
    x, scale, offset = inputs.x, inputs.scale, inputs.offset
    _, mean, rstd = op.outputs
    if dy is None:
        dy = tf.zeros_like(x)
    return functions.RAW["GroupNormGrad"](dy, x, scale, offset, mean, rstd, **attrs_of(op))


def _grad(op, *upstream):
    i = op_inputs(op)
    dy, x, scale, offset = i.dy, i.x, i.scale, i.offset
    upstream = [tf.zeros_like(o) if u is None else u for u, o in zip(upstream, op.outputs)]
    watched = [dy, x, scale, offset]
    with tf.GradientTape() as tape:
        tape.watch(watched)
        outs = functions.composite_grad(dy, x, scale, offset, None, None, **attrs_of(op))
    found = tape.gradient(list(outs), watched, output_gradients=upstream,
                          unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return list(found) + [None, None]


register_gradient("TfOps>GroupNorm", _forward)
register_gradient("TfOps>GroupNormGrad", _grad)
