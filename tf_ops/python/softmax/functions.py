"""softmax, log_softmax, the scaled masked softmax and the sparse softmax cross-entropy.

Each runs its ``TfOps>`` op (``tf_ops/cc/softmax/softmax_ops.cc``) over the last axis,
or, under `tf_ops.portable()` and inside XLA when the library has no lowering, a
composite of TensorFlow built-in ops (below) that computes the same. Gradients are
registered in ``gradients.py``.

Choices where the issue was silent:
- ``axis`` other than -1 transposes the axis last and back (the ops work on rows).
- The masked softmax's ``causal`` keeps key k of query q when k <= q, q the
  second-to-last axis (Keras's ``MultiHeadAttention(use_causal_mask=True)``).
- Masked positions have probability 0 and gradient 0; a row where nothing is kept (or
  only -inf logits are kept, with some position masked) is all zeros, as
  ``keras.layers.Softmax`` with a mask gives. (Keras writes -1e9 into masked positions:
  only kept logits below about -1e9 differ.)
- The cross-entropy's ``ignore_index`` defaults to -100 (PyTorch's); `IGNORE_NONE`
  ignores nothing.
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

from tf_ops.python.core.composite import kernel_attrs, use_composite, xla_lowered
from tf_ops.python.core.op_support import check, op_fn

TensorLike = tf.types.experimental.TensorLike

OP_NAMES = ("Softmax", "SoftmaxGrad", "LogSoftmax", "LogSoftmaxGrad",
            "ScaledMaskedSoftmax", "ScaledMaskedSoftmaxGrad", "SparseSoftmaxCrossEntropy")
XLA_LOWERED: frozenset[str] = xla_lowered(OP_NAMES)

# An ignore_index no int64 label equals: nothing is ignored.
IGNORE_NONE = -(2**63)


def _composite(op: str) -> bool:
    return use_composite(op, XLA_LOWERED)


def _float(x: TensorLike) -> tf.Tensor:
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating:
        x = tf.cast(x, tf.float32)
    return x


def _to_last(x: tf.Tensor, axis: int):
    """x with `axis` moved last, and the permutation that undoes it (None: none)."""
    rank = x.shape.rank
    if rank is None:
        raise ValueError("softmax over an axis other than -1 needs a known rank")
    axis = axis % rank
    if axis == rank - 1:
        return x, None
    perm = [i for i in range(rank) if i != axis] + [axis]
    inverse = [perm.index(i) for i in range(rank)]
    return tf.transpose(x, perm), inverse


# --------------------------------------------------------------- composites ---

def _widen(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(x, tf.float32) if x.dtype in (tf.float16, tf.bfloat16) else x


def composite_masked_softmax(x: tf.Tensor, kept: Optional[tf.Tensor], scale: float,
                             log: bool = False) -> tf.Tensor:
    """softmax(scale * x) over the last axis where `kept` (bool, broadcast) holds, 0
    elsewhere, all zeros where nothing finite is kept: the ops' result, in float32 for
    the 16-bit types."""
    dtype = x.dtype
    v = _widen(x)
    if scale != 1.0:
        v = v * scale
    if kept is None:
        y = tf.nn.log_softmax(v) if log else tf.nn.softmax(v)
        return tf.cast(y, dtype)
    kept = tf.broadcast_to(kept, tf.shape(v))
    neg_inf = tf.constant(-float("inf"), v.dtype)
    v = tf.where(kept, v, neg_inf)
    m = tf.reduce_max(v, axis=-1, keepdims=True)
    zeros = tf.logical_and(tf.equal(m, neg_inf),
                           tf.reduce_any(tf.logical_not(kept), axis=-1, keepdims=True))
    m = tf.where(zeros, tf.zeros_like(m), m)
    e = tf.where(kept, tf.exp(v - m), tf.zeros_like(v))
    y = e / tf.reduce_sum(e, axis=-1, keepdims=True)
    y = tf.where(tf.logical_and(kept, tf.logical_not(zeros)), y, tf.zeros_like(y))
    return tf.cast(y, dtype)


def causal_kept(shape: tf.Tensor) -> tf.Tensor:
    """[Q, K] bool: key k kept for query q when k <= q."""
    q = tf.range(shape[-2])[:, None]
    k = tf.range(shape[-1])[None, :]
    return k <= q


def composite_cross_entropy(logits: tf.Tensor, labels: tf.Tensor, label_smoothing: float,
                            ignore_index: int, z_loss: float):
    """(loss [rows], dlogits [rows, classes]) of the fused op, from built-in ops."""
    dtype = logits.dtype
    x = _widen(logits)
    labels = tf.cast(labels, tf.int64)
    classes = tf.shape(x, out_type=tf.int64)[1]
    ignored = tf.equal(labels, ignore_index)
    safe = tf.where(ignored, tf.zeros_like(labels), labels)
    lse = tf.reduce_logsumexp(x, axis=-1)
    x_label = tf.gather(x, safe, axis=1, batch_dims=1)
    c = tf.cast(classes, x.dtype)
    loss = lse - (1.0 - label_smoothing) * x_label + z_loss * lse * lse
    if label_smoothing > 0:
        loss -= (label_smoothing / c) * tf.reduce_sum(x, axis=-1)
    p = tf.nn.softmax(x)
    target = (1.0 - label_smoothing) * tf.one_hot(safe, tf.cast(classes, tf.int32), dtype=x.dtype) + (
        label_smoothing / c)
    dx = p * (1.0 + 2.0 * z_loss * lse)[:, None] - target
    loss = tf.where(ignored, tf.zeros_like(loss), loss)
    dx = tf.where(ignored[:, None], tf.zeros_like(dx), dx)
    return tf.cast(loss, dtype), tf.cast(dx, dtype)


# ---------------------------------------------------------------- functions ---

def softmax(logits: TensorLike, axis: int = -1, mask: Optional[TensorLike] = None,
            scale: float = 1.0, causal: bool = False,
            name: Optional[str] = None) -> tf.Tensor:
    """softmax(scale * logits) along `axis`, optionally masked, in one pass each way.

    Without mask, scale or causal it is ``tf.nn.softmax`` (op ``TfOps>Softmax``);
    otherwise ``TfOps>ScaledMaskedSoftmax``: `mask` (bool, broadcast to the logits, as
    ``[B, 1, Q, K]`` or ``[B, H, Q, K]``) keeps positions where it is True, `causal` keeps
    key k of query q when k <= q (the last two axes). Masked positions get 0, and a row
    with nothing kept is all zeros, as ``keras.layers.Softmax`` with a mask. Half and
    bfloat16 compute in float32.

    Example:
      >>> import tf_ops
      >>> tf_ops.softmax([[1.0, 2.0, 1.0]]).numpy().round(6)
      array([[0.211942, 0.576117, 0.211942]], dtype=float32)
      >>> tf_ops.softmax([[1.0, 2.0, 1.0]], mask=[[True, False, True]]).numpy()
      array([[0.5, 0. , 0.5]], dtype=float32)
    """
    with tf.name_scope(name or "softmax"):
        x = _float(logits)
        scale = kernel_attrs({"scale": float(scale)})["scale"]
        masked = mask is not None or causal or scale != 1.0
        m = None
        if mask is not None:
            m = tf.convert_to_tensor(mask)
            if m.dtype != tf.bool:
                m = m > tf.cast(0.5, m.dtype)
        inverse = None
        if axis != -1 and (x.shape.rank is None or axis % x.shape.rank != x.shape.rank - 1):
            if causal:
                raise ValueError("softmax: causal needs axis=-1 (the keys)")
            if m is not None:
                m = tf.broadcast_to(m, tf.shape(x))
                m, _ = _to_last(m, axis)
            x, inverse = _to_last(x, axis)
        if not masked:
            if _composite("Softmax"):
                check("Softmax", (x,), {})
                y = composite_masked_softmax(x, None, 1.0)
            else:
                y = op_fn("Softmax")(x)
        else:
            op_mask = m if m is not None else tf.constant(True)
            if _composite("ScaledMaskedSoftmax"):
                check("ScaledMaskedSoftmax", (x, op_mask), {"scale": scale, "causal": causal})
                kept = m
                if causal:
                    c = causal_kept(tf.shape(x))
                    kept = c if kept is None else tf.logical_and(kept, c)
                y = composite_masked_softmax(x, kept, scale)
            else:
                y = op_fn("ScaledMaskedSoftmax")(x, op_mask, scale=scale, causal=causal)
        return y if inverse is None else tf.transpose(y, inverse)


def log_softmax(logits: TensorLike, axis: int = -1, name: Optional[str] = None) -> tf.Tensor:
    """log(softmax(logits)) along `axis` (``tf.nn.log_softmax``), one pass each way.

    Example:
      >>> import tf_ops
      >>> tf_ops.log_softmax([[0.0, 0.0]]).numpy().round(6)
      array([[-0.693147, -0.693147]], dtype=float32)
    """
    with tf.name_scope(name or "log_softmax"):
        x = _float(logits)
        inverse = None
        if axis != -1:
            x, inverse = _to_last(x, axis)
        if _composite("LogSoftmax"):
            check("LogSoftmax", (x,), {})
            y = composite_masked_softmax(x, None, 1.0, log=True)
        else:
            y = op_fn("LogSoftmax")(x)
        return y if inverse is None else tf.transpose(y, inverse)


def softmax_grad(gradients: TensorLike, softmax: TensorLike, scale: float = 1.0) -> tf.Tensor:
    """scale * softmax * (gradients - sum(gradients * softmax)) over the last axis.

    Example:
      >>> import tf_ops
      >>> tf_ops.softmax_grad([[1.0, 0.0]], [[0.5, 0.5]]).numpy()
      array([[ 0.25, -0.25]], dtype=float32)
    """
    g = tf.convert_to_tensor(gradients)
    y = tf.convert_to_tensor(softmax, dtype=g.dtype)
    op = "SoftmaxGrad" if scale == 1.0 else "ScaledMaskedSoftmaxGrad"
    if _composite(op):
        check(op, (g, y), {} if scale == 1.0 else {"scale": float(scale)})
        gw, yw = _widen(g), _widen(y)
        dx = scale * yw * (gw - tf.reduce_sum(gw * yw, axis=-1, keepdims=True))
        return tf.cast(dx, g.dtype)
    if scale == 1.0:
        return op_fn("SoftmaxGrad")(g, y)
    return op_fn("ScaledMaskedSoftmaxGrad")(g, y, scale=float(scale))


def log_softmax_grad(gradients: TensorLike, logsoftmax: TensorLike) -> tf.Tensor:
    """gradients - exp(logsoftmax) * sum(gradients) over the last axis.

    Example:
      >>> import tf_ops, numpy as np
      >>> tf_ops.log_softmax_grad([[1.0, 0.0]], np.log([[0.5, 0.5]], dtype="float32")).numpy()
      array([[ 0.5, -0.5]], dtype=float32)
    """
    g = tf.convert_to_tensor(gradients)
    y = tf.convert_to_tensor(logsoftmax, dtype=g.dtype)
    if _composite("LogSoftmaxGrad"):
        check("LogSoftmaxGrad", (g, y), {})
        gw, yw = _widen(g), _widen(y)
        return tf.cast(gw - tf.exp(yw) * tf.reduce_sum(gw, axis=-1, keepdims=True), g.dtype)
    return op_fn("LogSoftmaxGrad")(g, y)


def cross_entropy_attrs(label_smoothing: float, ignore_index: int, z_loss: float) -> dict:
    """The cross-entropy op's attributes, float32 values as the op stores them (the
    composite and `linear_cross_entropy` use the same)."""
    return kernel_attrs({"label_smoothing": float(label_smoothing),
                         "ignore_index": int(ignore_index), "z_loss": float(z_loss)})


def sparse_softmax_cross_entropy(logits: TensorLike, labels: TensorLike,
                                 label_smoothing: float = 0.0, ignore_index: int = -100,
                                 z_loss: float = 0.0, name: Optional[str] = None) -> tf.Tensor:
    """Per-row softmax cross-entropy of [rows, classes] logits and [rows] integer labels.

    ``lse - (1 - eps) logits[label] - eps/C sum(logits) + z_loss lse^2`` with
    ``lse = logsumexp(logits)`` and ``eps = label_smoothing`` (the smoothed target of
    ``keras.losses.CategoricalCrossentropy(label_smoothing=eps)``); ``z_loss`` is PaLM's.
    Rows whose label is `ignore_index` give 0 (and no gradient); any other label outside
    [0, classes) is an InvalidArgumentError naming the label and its position (under XLA,
    where labels are not known when compiling: NaN). The op computes the gradient in the
    same pass; the backward only scales it.

    Example:
      >>> import tf_ops
      >>> tf_ops.sparse_softmax_cross_entropy([[0.0, 0.0], [1.0, 1.0]], [1, -100]).numpy()
      array([0.6931472, 0.       ], dtype=float32)
    """
    with tf.name_scope(name or "sparse_softmax_cross_entropy"):
        x = _float(logits)
        t = tf.convert_to_tensor(labels)
        if t.dtype not in (tf.int32, tf.int64):
            t = tf.cast(t, tf.int64)
        attrs = cross_entropy_attrs(label_smoothing, ignore_index, z_loss)
        if _composite("SparseSoftmaxCrossEntropy"):
            check("SparseSoftmaxCrossEntropy", (x, t), attrs)
            return composite_cross_entropy(x, t, attrs["label_smoothing"], attrs["ignore_index"],
                                           attrs["z_loss"])[0]
        loss, _ = op_fn("SparseSoftmaxCrossEntropy")(x, t, **attrs)
        return loss


FUNCTIONS = {
    "softmax": softmax,
    "log_softmax": log_softmax,
    "softmax_grad": softmax_grad,
    "log_softmax_grad": log_softmax_grad,
    "sparse_softmax_cross_entropy": sparse_softmax_cross_entropy,
}
