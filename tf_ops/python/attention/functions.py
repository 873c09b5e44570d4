"""Fused (flash) attention: `attention`.

One op forward (``TfOps>Attention``: the output and each row's log-sum-exp) and one
backward (``TfOps>AttentionGrad``: dq, dk and dv in one pass, the weights recomputed
from the log-sum-exp; ``TfOps>AttentionBiasGrad`` with a trainable bias), so no
``[batch, heads, T, S]`` tensor is ever stored: memory beyond the inputs and outputs
is O(batch * heads * T). Keras's layout and semantics
(``keras.ops.dot_product_attention`` on TensorFlow: its causal alignment, its masked
rows) with what keras-hub's models add (grouped key/value heads, a sliding window, a
logit soft cap).

Choices:
- The math runs in float32 for half, bfloat16 and float32 (float64 for float64), the
  probabilities are never rounded to the inputs' dtype (Keras rounds them before its
  second einsum).
- A row whose mask keeps no key gets Keras's answer: uniform weights over all S keys,
  so the mean of the values (Keras fills such a row's logits with one large negative
  number); its gradient reaches the values only.
- `bias` gets a gradient where one is asked for: the backward is then
  ``TfOps>AttentionBiasGrad``, which also sums the logits' gradient over the axes the
  bias broadcasts along, in a fixed order (memory: the bias's own size); mask,
  causal, window and softcap get none.
- Second-order gradients are composed from the composite (`gradients.py`).
- Under `tf_ops.portable()` (and inside XLA where the library has no lowering) the
  function builds the composite: einsum, scale, bias, cap, mask, softmax, einsum in
  TensorFlow built-in ops, which SavedModel, TFLite and ONNX run without tf_ops.
"""

from __future__ import annotations

import math

import tensorflow as tf

from tf_ops.python.core.composite import kernel_attrs, use_composite, xla_lowered
from tf_ops.python.core.op_support import check, op_fn

TensorLike = tf.types.experimental.TensorLike

OP_NAMES = ("Attention", "AttentionGrad", "AttentionBiasGrad")
XLA_LOWERED: frozenset[str] = xla_lowered(OP_NAMES)


def compute_dtype(dtype: tf.DType) -> tf.DType:
    """The dtype of the logits and the log-sum-exp: float64 for float64, else float32."""
    return tf.float64 if dtype == tf.float64 else tf.float32


# ------------------------------------------------------------------ composite ---


def kept_positions(t: int | tf.Tensor, s: int | tf.Tensor, causal: bool,
                   window: int) -> tf.Tensor | None:
    """The [T, S] positions causal and window keep (Keras's causal alignment: key s is
    seen by query t when s <= t; the window keeps |t - s| < window), None for all."""
    if not causal and window < 0:
        return None
    rows = tf.range(t)[:, tf.newaxis]
    cols = tf.range(s)[tf.newaxis, :]
    kept = tf.ones([t, s], tf.bool)
    if causal:
        kept = tf.logical_and(kept, cols <= rows)
    if window >= 0:
        kept = tf.logical_and(kept, tf.abs(rows - cols) < window)
    return kept


def logits_of(query: tf.Tensor, key: tf.Tensor, mask: tf.Tensor | None,
              bias: tf.Tensor | None, attrs: dict) -> tuple[tf.Tensor, tf.Tensor]:
    """The final logits [B, N, T, S] in the compute dtype (-inf where not kept) and the
    kept positions (bool, broadcast to [B, N, T, S])."""
    compute = compute_dtype(query.dtype)
    heads, kv_heads = query.shape[2], key.shape[2]
    q = tf.cast(query, compute)
    k = tf.cast(key, compute)
    shape = tf.shape(q)
    if heads != kv_heads:  # [B, T, K, G, D] against [B, S, K, D]
        group = heads // kv_heads
        q = tf.reshape(q, tf.concat([shape[:2], [kv_heads, group], shape[3:]], 0))
        logits = tf.einsum("btkgd,bskd->bkgts", q, k)
        logits = tf.reshape(logits, tf.concat(
            [shape[:1], [heads], [shape[1]], tf.shape(k)[1:2]], 0))
    else:
        logits = tf.einsum("btnd,bsnd->bnts", q, k)
    logits = logits * tf.constant(attrs["scale"], compute)
    if bias is not None:
        logits = logits + tf.cast(bias, compute)
    cap = attrs["softcap"]
    if cap > 0:
        c = tf.constant(cap, compute)
        logits = c * tf.tanh(logits / c)
    kept = tf.ones_like(logits, tf.bool)
    if mask is not None:
        kept = tf.logical_and(kept, mask)
    position = kept_positions(tf.shape(logits)[2], tf.shape(logits)[3], attrs["causal"],
                              attrs["window"])
    if position is not None:
        kept = tf.logical_and(kept, position)
    return tf.where(kept, logits, tf.constant(-math.inf, compute)), kept


def composite(query: tf.Tensor, key: tf.Tensor, value: tf.Tensor, mask: tf.Tensor | None,
              bias: tf.Tensor | None, attrs: dict) -> tf.Tensor:
    """The attention in TensorFlow built-in ops (the portable form, and the reference the
    gradients of bias and of second order are taken through): it holds the [B, N, T, S]
    weights. Rows that keep no key get the values' mean, as the op."""
    compute = compute_dtype(query.dtype)
    logits, kept = logits_of(query, key, mask, bias, kernel_attrs(attrs))
    any_kept = tf.reduce_any(kept, axis=-1, keepdims=True)
    # A dead row's logits all 0: uniform weights, Keras's answer for it.
    probs = tf.nn.softmax(tf.where(any_kept, logits, tf.zeros_like(logits)), axis=-1)
    v = tf.cast(value, compute)
    heads, kv_heads = query.shape[2], value.shape[2]
    if heads != kv_heads:
        shape = tf.shape(probs)
        group = heads // kv_heads
        p = tf.reshape(probs, tf.concat([shape[:1], [kv_heads, group], shape[2:]], 0))
        out = tf.einsum("bkgts,bskd->btkgd", p, v)
        out_shape = tf.concat([tf.shape(out)[:2], [heads], tf.shape(v)[3:]], 0)
        out = tf.reshape(out, out_shape)
    else:
        out = tf.einsum("bnts,bsnd->btnd", probs, v)
    return tf.cast(out, query.dtype)


# ------------------------------------------------------------------ the call ----


def op_attrs(head_dim: int | None, scale: float | None, causal: bool,
             window: int | None, softcap: float | None) -> dict:
    """The op's attributes from the function's arguments (ValueError for what only
    Python can see: no scale and an unknown head_dim); the op checks the values."""
    if scale is None:
        if head_dim is None:
            raise ValueError("attention needs a static head_dim, or scale")
        scale = 1.0 / math.sqrt(head_dim)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a Python bool, got {causal!r}")
    return dict(scale=float(scale), softcap=0.0 if softcap is None else float(softcap),
                causal=causal, window=-1 if window is None else int(window))


def _operands(query, key, value, mask, bias) -> tuple:
    """query, key, value, mask, bias as the op takes them: one floating dtype, the mask
    bool (a scalar True for none), the bias in the inputs' dtype (a scalar 0 for
    none)."""
    query, key, value = (tf.convert_to_tensor(t) for t in (query, key, value))
    dtype = query.dtype
    if not dtype.is_floating or key.dtype != dtype or value.dtype != dtype:
        raise TypeError("TfOps>Attention: query, key and value must have one dtype among "
                        f"half, bfloat16, float32, float64; got {query.dtype}, {key.dtype}, "
                        f"{value.dtype}")
    if mask is None:
        mask = tf.constant(True)
    else:
        mask = tf.convert_to_tensor(mask)
        if mask.dtype != tf.bool:
            raise TypeError(f"TfOps>Attention: mask must be bool, got {mask.dtype}")
    bias = tf.zeros([], dtype) if bias is None else tf.cast(bias, dtype)
    return query, key, value, mask, bias


def attention(query: TensorLike, key: TensorLike, value: TensorLike, *,
              mask: TensorLike | None = None, bias: TensorLike | None = None,
              causal: bool = False, scale: float | None = None, window: int | None = None,
              softcap: float | None = None, name: str | None = None) -> tf.Tensor:
    """Fused attention (flash attention's tiles), forward and backward, in Keras's layout.

    ``softmax(scale * q k^T + bias, soft-capped, masked) v`` per head, without storing the
    ``[batch, heads, T, S]`` logits or weights: memory O(batch * heads * T) beyond the
    inputs and outputs, forward and backward.

    Args:
      query: ``[batch, T, heads, head_dim]``, half, bfloat16, float32 or float64.
      key: ``[batch, S, kv_heads, head_dim]``; kv_heads divides heads (grouped and
        multi-query attention: query head n reads key/value head n // (heads / kv_heads),
        nothing repeated in memory).
      value: ``[batch, S, kv_heads, value_dim]``.
      mask: bool, broadcastable to ``[batch, heads, T, S]`` (keras-hub passes
        ``[batch, 1, T, S]``); True keeps a key.
      bias: added to the scaled logits, broadcastable to ``[batch, heads, T, S]``.
      causal: key s is seen by query t only when s <= t (Keras's alignment, also when
        T != S).
      scale: the logits' factor; None: ``1 / sqrt(head_dim)``.
      window: keeps only keys with ``|t - s| < window`` (Mistral's and Gemma's sliding
        window); None: all.
      softcap: ``logits = softcap * tanh(logits / softcap)`` before the mask (Gemma 2/3);
        None: none.
      name: op name scope.

    Returns:
      ``[batch, T, heads, value_dim]`` in the inputs' dtype. A row that keeps no key is
      the mean of the values, as Keras computes it.

    Example:
      >>> q = tf.random.normal([1, 4, 2, 8])
      >>> k = v = tf.random.normal([1, 4, 1, 8])
      >>> tf_ops.attention(q, k, v, causal=True).shape
      TensorShape([1, 4, 2, 8])
    """
    with tf.name_scope(name or "Attention"):
        q, k, v, m, b = _operands(query, key, value, mask, bias)
        attrs = op_attrs(q.shape[-1] if q.shape.rank == 4 else None, scale, causal, window,
                         softcap)
        check("Attention", (q, k, v, m, b), attrs)  # the shape function's ValueError
        if use_composite("Attention", XLA_LOWERED):
            return composite(q, k, v, None if mask is None else m,
                             None if bias is None else b, attrs)
        out, _ = op_fn("Attention")(q, k, v, m, b, L=compute_dtype(q.dtype), **attrs)
        return out


FUNCTIONS = {"attention": attention}
__all__ = sorted(FUNCTIONS)
