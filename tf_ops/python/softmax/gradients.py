"""Gradients of the softmax family's ops (``functions.py``), registered once per process
(`core.op_support.register_gradient`).

First order runs the fused grad ops (``TfOps>SoftmaxGrad``, ``TfOps>LogSoftmaxGrad``,
``TfOps>ScaledMaskedSoftmaxGrad``; the cross-entropy's backward only scales the dlogits
its forward computed). The grad ops' own gradients (second order) are composed of
TensorFlow ops around the fused ones, and so are higher orders.
"""

from __future__ import annotations

import tensorflow as tf

from tf_ops.python.core import tape_zeros
from tf_ops.python.core.op_support import op_inputs, register_gradient
from tf_ops.python.softmax import functions as fn


def _softmax_grad(op: tf.Operation, dy: tf.Tensor):
    return fn.softmax_grad(dy, op.outputs[0])


def _log_softmax_grad(op: tf.Operation, dy: tf.Tensor):
    return fn.log_softmax_grad(dy, op.outputs[0])


def _masked_softmax_grad(op: tf.Operation, dy: tf.Tensor):
    return fn.softmax_grad(dy, op.outputs[0], scale=op.get_attr("scale")), None


def _softmax_grad_grad(scale: float):
    # dx = scale * y (g - D), D = sum(g y): d/dg = softmax_grad(u, y, scale),
    # d/dy_i = scale * (u_i (g_i - D) - g_i sum(u y)).
    def grad(op: tf.Operation, u: tf.Tensor):
        g, y = op_inputs(op).gradients, op_inputs(op).softmax
        s = scale if scale is not None else op.get_attr("scale")
        d_g = fn.softmax_grad(u, y, scale=s)
        dot = tf.reduce_sum(g * y, axis=-1, keepdims=True)
        uy = tf.reduce_sum(u * y, axis=-1, keepdims=True)
        d_y = s * (u * (g - dot) - g * uy)
        return d_g, d_y
    return grad


def _log_softmax_grad_grad(op: tf.Operation, u: tf.Tensor):
    # dx = g - e^y S, S = sum(g): d/dg_i = u_i - sum(u e^y); d/dy_i = -u_i e^y_i S.
    g, y = op_inputs(op).gradients, op_inputs(op).logsoftmax
    p = tf.exp(y)
    d_g = u - tf.reduce_sum(u * p, axis=-1, keepdims=True)
    d_y = -u * p * tf.reduce_sum(g, axis=-1, keepdims=True)
    return d_g, d_y


def _cross_entropy_grad(op: tf.Operation, d_loss: tf.Tensor, d_backprop: tf.Tensor):
    x, labels = op_inputs(op).logits, op_inputs(op).labels
    backprop = op.outputs[1]
    dx = None
    if d_loss is not None:
        dx = backprop * d_loss[:, None]
    if not tape_zeros.made_up_zeros(d_backprop):
        # backprop = p (1 + 2 z lse) - target on kept rows: its VJP with v is
        # w p (v - v.p) + 2 z (v.p) p, w = 1 + 2 z lse (composed: second order).
        z = op.get_attr("z_loss")
        kept = tf.not_equal(tf.cast(labels, tf.int64), op.get_attr("ignore_index"))[:, None]
        p = fn.softmax(x)
        vp = tf.reduce_sum(d_backprop * p, axis=-1, keepdims=True)
        w = 1.0 + 2.0 * z * tf.reduce_logsumexp(x, axis=-1, keepdims=True)
        term = w * p * (d_backprop - vp) + 2.0 * z * vp * p
        term = tf.where(kept, term, tf.zeros_like(term))
        dx = term if dx is None else dx + term
    return dx, None


register_gradient("TfOps>Softmax", _softmax_grad)
register_gradient("TfOps>LogSoftmax", _log_softmax_grad)
register_gradient("TfOps>ScaledMaskedSoftmax", _masked_softmax_grad)
register_gradient("TfOps>SoftmaxGrad", _softmax_grad_grad(1.0))
register_gradient("TfOps>ScaledMaskedSoftmaxGrad", _softmax_grad_grad(None))
register_gradient("TfOps>LogSoftmaxGrad", _log_softmax_grad_grad)
register_gradient("TfOps>SparseSoftmaxCrossEntropy", _cross_entropy_grad)
