"""Gradients of the attention ops (``functions.py``).

First order is fused: ``TfOps>Attention``'s gradient is one ``TfOps>AttentionGrad``
(dq, dk, dv from the output, the log-sum-exp and the upstream, the weights recomputed
tile by tile) or, where a bias is given and its gradient asked for, one
``TfOps>AttentionBiasGrad`` (the same, and the bias's gradient; memory the bias's own
size). The mask gets none.

Second order is composed: the gradient ops' gradients differentiate the composite's
gradient (tape inside tape), so they hold the T x S weights; they return the total
derivative through query, key, value, bias and the upstream, and none through the
output and log-sum-exp inputs (they are functions of query, key and value, already
counted).

Registered once per process (`core.op_support.register_gradient`).
"""

from __future__ import annotations

import tensorflow as tf

from tf_ops.python.attention import functions as fn
from tf_ops.python.core import op_info
from tf_ops.python.core.op_support import (input_positions, op_attrs, op_fn, op_inputs,
                                          register_gradient)


(_BIAS,) = input_positions(op_info.NAMESPACE + "Attention", ("bias",))


def _skipped(op) -> tuple:
    return tuple(getattr(op, "skip_input_indices", None) or ())


def _mask_and_bias(op) -> tuple:
    """The mask and bias inputs, None where they are the op's scalar "none"."""
    inputs = op_inputs(op)
    mask, bias = inputs.mask, inputs.bias
    return (None if mask.shape.rank == 0 else mask,
            None if bias.shape.rank == 0 else bias)


def _attention_grad(op, upstream, _lse_upstream):
    attrs = op_attrs(op)
    i = op_inputs(op)
    _, bias = _mask_and_bias(op)
    args = (i.query, i.key, i.value, i.mask, i.bias, op.outputs[0], op.outputs[1], upstream)
    if bias is not None and _BIAS not in _skipped(op):
        dq, dk, dv, d_bias = op_fn("AttentionBiasGrad")(*args, **attrs)
        return [dq, dk, dv, None, d_bias]
    dq, dk, dv = op_fn("AttentionGrad")(*args, **attrs)
    # A bias asked for but not given (the scalar "none") has gradient 0.
    return [dq, dk, dv, None, tf.zeros_like(i.bias) if bias is None else None]


def _second_order(op, upstreams: list, with_bias: bool) -> list:
    """The gradient op's gradients: the composite's first-order gradients (at the op's
    doutput; with the bias's where `with_bias`) dotted with `upstreams` (None: none),
    differentiated again through query, key, value, doutput and the bias."""
    attrs = op_attrs(op)
    inputs = op_inputs(op)
    q, k, v, dout = inputs.query, inputs.key, inputs.value, inputs.doutput
    mask, bias = _mask_and_bias(op)
    watched = [q, k, v, dout] + ([bias] if bias is not None else [])
    with tf.GradientTape() as outer:
        outer.watch(watched)
        with tf.GradientTape() as inner:
            inner.watch(watched)
            out = fn.composite(q, k, v, mask, bias, attrs)
        grads = inner.gradient(out, [q, k, v] + ([bias] if with_bias else []),
                               output_gradients=dout)
        compute = fn.compute_dtype(q.dtype)
        total = tf.zeros([], compute)
        for g, u in zip(grads, upstreams):
            if u is not None:
                total += tf.reduce_sum(tf.cast(g, compute) * tf.cast(u, compute))
    found = outer.gradient(total, watched, unconnected_gradients="zero")
    d_bias = found[4] if bias is not None else tf.zeros_like(inputs.bias)
    return [found[0], found[1], found[2], None, d_bias, None, None, found[3]]


def _attention_grad_grad(op, ddq, ddk, ddv):
    return _second_order(op, [ddq, ddk, ddv], with_bias=False)


def _attention_bias_grad_grad(op, ddq, ddk, ddv, ddbias):
    with_bias = _mask_and_bias(op)[1] is not None  # the scalar "none": dbias is 0
    return _second_order(op, [ddq, ddk, ddv, ddbias if with_bias else None], with_bias)


register_gradient(op_info.NAMESPACE + "Attention", _attention_grad)
register_gradient(op_info.NAMESPACE + "AttentionGrad", _attention_grad_grad)
register_gradient(op_info.NAMESPACE + "AttentionBiasGrad", _attention_bias_grad_grad)
