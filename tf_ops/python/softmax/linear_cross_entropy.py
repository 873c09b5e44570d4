"""`linear_cross_entropy`: a language-model head and its sparse cross-entropy without
the whole ``[tokens, vocab]`` logits.

The rows (tokens) are taken in chunks, one after the other in a ``tf.while_loop``
(``parallel_iterations=1``): each chunk's logits come from TensorFlow's own matmul
(oneDNN on the CPU, cuBLAS on the GPU), the fused ``TfOps>SparseSoftmaxCrossEntropy`` op
gives the chunk's losses and dlogits in one pass, and two more matmuls turn those into
the chunk's rows of dhidden and its part of dkernel (and dbias), added to float32
accumulators in chunk order: deterministic, and at most one chunk of logits alive.
Everything is computed in the forward pass (``tf.custom_gradient``); the backward
scales the saved gradients by the incoming one. The loss is therefore a scalar (the
mean over the rows that are not ignored, or their sum).
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf
from tf_ops.python.core.portable import is_portable
from tf_ops.python.softmax import functions as fn

TensorLike = tf.types.experimental.TensorLike

# Elements of one chunk's logits when chunk_size is not given (16 MiB of float32).
_CHUNK_ELEMENTS = 1 << 22


def default_chunk_size(rows: int, vocab: int) -> int:
    """Rows per chunk: about 4M logits, at least 16 rows, at most all of them."""
    return int(max(16, min(rows if rows > 0 else 16, _CHUNK_ELEMENTS // max(vocab, 1))))


def linear_cross_entropy(hidden: TensorLike, kernel: TensorLike, labels: TensorLike,
                         bias: Optional[TensorLike] = None, *, transpose_kernel: bool = False,
                         label_smoothing: float = 0.0, ignore_index: int = -100,
                         z_loss: float = 0.0, reduction: str = "mean",
                         chunk_size: Optional[int] = None,
                         name: Optional[str] = None) -> tf.Tensor:
    """Cross-entropy of ``hidden @ kernel (+ bias)`` against `labels`, in chunks of rows.

    Args:
      hidden: ``[..., H]`` features of the tokens (flattened to rows).
      kernel: ``[H, V]``, or ``[V, H]`` with ``transpose_kernel=True`` (a head tied to the
        token embedding, as keras-hub's ``ReversibleEmbedding``).
      labels: integer ``[...]``, one per row.
      bias: optional ``[V]``.
      label_smoothing, ignore_index, z_loss: as `tf_ops.sparse_softmax_cross_entropy`.
      reduction: ``"mean"`` (over the rows not ignored; 0 when all are) or ``"sum"``.
      chunk_size: rows per chunk (default: about 4M logits per chunk).

    The gradients for hidden, kernel and bias are computed in the forward pass and
    accumulated in float32; the result equals
    ``sparse_softmax_cross_entropy(hidden @ kernel + bias, labels)`` reduced.

    Example:
      >>> import tf_ops, tensorflow as tf
      >>> h = tf.ones([6, 4]); k = tf.zeros([4, 10]); t = tf.constant([0, 1, 2, 3, 4, -100])
      >>> round(float(tf_ops.linear_cross_entropy(h, k, t, chunk_size=4)), 6)  # log(10)
      2.302585
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"linear_cross_entropy: reduction must be 'mean' or 'sum', got "
                         f"{reduction!r} (the gradients are computed in the forward pass)")
    with tf.name_scope(name or "linear_cross_entropy"):
        h = tf.convert_to_tensor(hidden)
        k = tf.convert_to_tensor(kernel)
        t = tf.convert_to_tensor(labels)
        if t.dtype not in (tf.int32, tf.int64):
            t = tf.cast(t, tf.int64)
        if k.dtype != h.dtype:
            k = tf.cast(k, h.dtype)
        features = h.shape[-1]
        h2 = tf.reshape(h, [-1, tf.shape(h)[-1]])
        t1 = tf.reshape(t, [-1])
        b = None if bias is None else tf.cast(tf.convert_to_tensor(bias), h.dtype)
        attrs = dict(label_smoothing=float(label_smoothing), ignore_index=int(ignore_index),
                     z_loss=float(z_loss))
        vocab = k.shape[0] if transpose_kernel else k.shape[-1]
        if is_portable():
            logits = tf.matmul(h2, k, transpose_b=transpose_kernel)
            if b is not None:
                logits = logits + b
            losses = fn.sparse_softmax_cross_entropy(logits, t1, **attrs)
            total = tf.reduce_sum(tf.cast(losses, tf.float32))
            count = tf.reduce_sum(tf.cast(tf.not_equal(tf.cast(t1, tf.int64), ignore_index),
                                          tf.float32))
            return total if reduction == "sum" else tf.math.divide_no_nan(total, count)
        rows_static = h2.shape[0]
        if chunk_size is None:
            chunk_size = default_chunk_size(rows_static or 0, vocab or 32000)
        chunk_size = int(chunk_size)
        if chunk_size < 1:
            raise ValueError(f"linear_cross_entropy: chunk_size must be >= 1, got {chunk_size}")
        inputs = [h2, k] + ([b] if b is not None else [])
        loss = _chunked(inputs, t1, transpose_kernel, attrs, reduction, chunk_size, features)
        return loss


def _chunked(inputs, labels, transpose_kernel, attrs, reduction, chunk_size, features):
    has_bias = len(inputs) == 3

    @tf.custom_gradient
    def run(*tensors):
        h, k = tensors[0], tensors[1]
        b = tensors[2] if has_bias else None
        rows = tf.shape(h)[0]
        chunks = (rows + chunk_size - 1) // chunk_size
        acc_k = tf.zeros(tf.shape(k), tf.float32)
        acc_b = tf.zeros(tf.shape(b), tf.float32) if has_bias else tf.zeros([0], tf.float32)
        dh_chunks = tf.TensorArray(h.dtype, size=chunks, infer_shape=False,
                                   element_shape=tf.TensorShape([None, features]))

        def body(i, total, count, acc_k, acc_b, dh_chunks):
            start = i * chunk_size
            size = tf.minimum(chunk_size, rows - start)
            hc = tf.slice(h, [start, 0], [size, -1])
            tc = tf.slice(labels, [start], [size])
            logits = tf.matmul(hc, k, transpose_b=transpose_kernel)
            if has_bias:
                logits = logits + b
            losses, dlogits = fn._ops.tf_ops_sparse_softmax_cross_entropy(logits, tc, **attrs)
            total += tf.reduce_sum(tf.cast(losses, tf.float32))
            count += tf.reduce_sum(tf.cast(
                tf.not_equal(tf.cast(tc, tf.int64), attrs["ignore_index"]), tf.float32))
            dh_chunks = dh_chunks.write(i, tf.matmul(dlogits, k, transpose_b=not transpose_kernel))
            if transpose_kernel:
                dk = tf.matmul(dlogits, hc, transpose_a=True)
            else:
                dk = tf.matmul(hc, dlogits, transpose_a=True)
            acc_k += tf.cast(dk, tf.float32)
            if has_bias:
                acc_b += tf.reduce_sum(tf.cast(dlogits, tf.float32), axis=0)
            return i + 1, total, count, acc_k, acc_b, dh_chunks

        _, total, count, acc_k, acc_b, dh_chunks = tf.while_loop(
            lambda i, *_: i < chunks, body,
            (tf.constant(0), tf.constant(0.0), tf.constant(0.0), acc_k, acc_b, dh_chunks),
            parallel_iterations=1)
        dh = dh_chunks.concat()
        if reduction == "mean":
            norm = tf.math.divide_no_nan(1.0, count)
            loss = total * norm
        else:
            norm = tf.constant(1.0)
            loss = total

        def grad(upstream):
            s = tf.cast(upstream, tf.float32) * norm
            grads = [tf.cast(s, h.dtype) * dh, tf.cast(s * acc_k, k.dtype)]
            if has_bias:
                grads.append(tf.cast(s * acc_b, b.dtype))
            return grads

        return loss, grad

    return run(*inputs)
