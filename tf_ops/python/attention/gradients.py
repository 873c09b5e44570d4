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

Registered once per process, as the other families' gradients.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.framework import ops

from tf_ops.python.attention import functions as fn
from tf_ops.python.core import op_info

_ATTRS = ("scale", "softcap", "causal", "window")


def _attrs(op) -> dict:
    return {name: op.get_attr(name) for name in _ATTRS}


def _skipped(op) -> tuple:
    return tuple(getattr(op, "skip_input_indices", None) or ())


def _mask_and_bias(op) -> tuple:
    """The mask and bias inputs, None where they are the op's scalar "none"."""
    mask, bias = op.inputs[3], op.inputs[4]
    return (None if mask.shape.rank == 0 else mask,
            None if bias.shape.rank == 0 else bias)


def _bias_gradient(op, attrs: dict, upstream: tf.Tensor) -> tf.Tensor | None:
    q, k, v = op.inputs[0], op.inputs[1], op.inputs[2]
    mask, bias = _mask_and_bias(op)
    if bias is None or 4 in _skipped(op):
        return None if bias is not None else tf.zeros_like(op.inputs[4])
    with tf.GradientTape() as tape:
        tape.watch(bias)
        out = fn.composite(q, k, v, mask, bias, attrs)
    return tape.gradient(out, bias, output_gradients=upstream)


def _attention_grad(op, upstream, _lse_upstream):
    attrs = _attrs(op)
    q, k, v, m, b = op.inputs[:5]
    dq, dk, dv = fn.op_fn("AttentionGrad")(q, k, v, m, b, op.outputs[0], op.outputs[1],
                                           upstream, **attrs)
    return [dq, dk, dv, None, _bias_gradient(op, attrs, upstream)]


def _attention_grad_grad(op, ddq, ddk, ddv):
    attrs = _attrs(op)
    q, k, v = op.inputs[0], op.inputs[1], op.inputs[2]
    mask, bias = _mask_and_bias(op)
    dout = op.inputs[7]
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
    d_bias = found[4] if bias is not None else tf.zeros_like(op.inputs[4])
    return [found[0], found[1], found[2], None, d_bias, None, None, found[3]]


for _op, _grad in (("Attention", _attention_grad), ("AttentionGrad", _attention_grad_grad)):
    try:
        ops.gradient_registry.lookup(op_info.NAMESPACE + _op)
    except LookupError:
        ops.RegisterGradient(op_info.NAMESPACE + _op)(_grad)
