"""Gradients of the attention ops (``functions.py``).

First order is the fused backward: ``TfOps>Attention``'s gradient is one
``TfOps>AttentionGrad`` (dq, dk, dv from the output, the log-sum-exp and the upstream,
the weights recomputed tile by tile). The bias's gradient, where a bias is given and
asked for, is taken through the composite (it holds the T x S weights, as a bias of
that size does). The mask gets none.

Second order is composed: ``TfOps>AttentionGrad``'s gradient differentiates the
composite's gradient (tape inside tape), so it holds the T x S weights; it returns the
total derivative through query, key, value, bias and the upstream, and none through the
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


def _bias_gradient(op, attrs: dict, upstream: tf.Tensor) -> tf.Tensor | None:
    inputs = op_inputs(op)
    q, k, v = inputs.query, inputs.key, inputs.value
    mask, bias = _mask_and_bias(op)
    if bias is None or _BIAS in _skipped(op):
        return None if bias is not None else tf.zeros_like(inputs.bias)
    with tf.GradientTape() as tape:
        tape.watch(bias)
        out = fn.composite(q, k, v, mask, bias, attrs)
    return tape.gradient(out, bias, output_gradients=upstream)


def _attention_grad(op, upstream, _lse_upstream):
    attrs = op_attrs(op)
    i = op_inputs(op)
    dq, dk, dv = op_fn("AttentionGrad")(i.query, i.key, i.value, i.mask, i.bias,
                                        op.outputs[0], op.outputs[1], upstream, **attrs)
    return [dq, dk, dv, None, _bias_gradient(op, attrs, upstream)]


def _attention_grad_grad(op, ddq, ddk, ddv):
    attrs = op_attrs(op)
    inputs = op_inputs(op)
    q, k, v, dout = inputs.query, inputs.key, inputs.value, inputs.doutput
    mask, bias = _mask_and_bias(op)
    upstreams = [tf.zeros_like(t) if u is None else u for t, u in ((q, ddq), (k, ddk), (v, ddv))]
    watched = [q, k, v, dout] + ([bias] if bias is not None else [])
    with tf.GradientTape() as outer:
        outer.watch(watched)
        with tf.GradientTape() as inner:
            inner.watch([q, k, v])
            out = fn.composite(q, k, v, mask, bias, attrs)
        grads = inner.gradient(out, [q, k, v], output_gradients=dout)
        total = tf.add_n([tf.reduce_sum(tf.cast(g * u, fn.compute_dtype(q.dtype)))
                          for g, u in zip(grads, upstreams)])
    found = outer.gradient(total, watched)
    d_bias = found[4] if bias is not None else tf.zeros_like(inputs.bias)
    return [found[0], found[1], found[2], None, d_bias, None, None, found[3]]


register_gradient(op_info.NAMESPACE + "Attention", _attention_grad)
register_gradient(op_info.NAMESPACE + "AttentionGrad", _attention_grad_grad)
