"""Fused layer normalisation and RMS normalisation: `layer_norm` and `rms_norm`.

Each runs one op forward (``TfOps>LayerNorm``, ``TfOps>RmsNorm``, or with a residual
``TfOps>AddLayerNorm``, ``TfOps>AddRmsNorm``) and one op backward (their ``...Grad``),
over the last axis; the forward saves only the per-row statistics (mean and rstd, in
float32, float64 for float64 inputs) for the backward. Keras's ``axis`` lists are
supported: trailing axes are flattened into the row (a reshape, no copy); other axes are
moved last first (a transpose).

Choices:
- gamma and beta (and their gradients) are float32 (float64 for float64 inputs)
  whatever the input's dtype: Keras keeps them float32 under mixed precision, and the op
  reads them so, with no cast; a float16 gamma is cast to float32 (a vector).
- With ``residual=r`` the function returns ``(h, y)`` with ``h = x + r`` (rounded to
  x's dtype, as ``x + r`` is) and ``y = norm(h)``; the backward adds h's incoming
  gradient to norm's, and x and r get the same gradient.
- Under `tf_ops.portable()` (and inside XLA if the library had no lowerings) the
  function builds Keras's own composite (``keras.ops.layer_normalization``'s math in
  TensorFlow built-in ops), after the op's shape checks.
- Gradients beyond the first are TensorFlow's autodiff of that composite.
"""

from __future__ import annotations

import math
from typing import Sequence

import tensorflow as tf

from tf_ops.python.core.composite import use_composite, xla_lowered
from tf_ops.python.core.op_support import op_fn

TensorLike = tf.types.experimental.TensorLike

OP_NAMES = ("LayerNorm", "LayerNormGrad", "AddLayerNorm", "AddLayerNormGrad",
            "RmsNorm", "RmsNormGrad", "AddRmsNorm", "AddRmsNormGrad")
XLA_LOWERED: frozenset[str] = xla_lowered(OP_NAMES)


def op_name(centered: bool, residual: bool, grad: bool = False) -> str:
    return ("Add" if residual else "") + ("LayerNorm" if centered else "RmsNorm") + (
        "Grad" if grad else "")


def stat_dtype(dtype: tf.DType) -> tf.DType:
    """The statistics' and parameters' dtype: float64 for float64, else float32."""
    return tf.float64 if dtype == tf.float64 else tf.float32


def normalize_axes(axis: int | Sequence[int], rank: int | None, shape) -> list[int]:
    """axis as a sorted list of distinct non-negative axes; ValueError when out of range."""
    axes = [axis] if isinstance(axis, int) else list(axis)
    if rank is None:
        raise ValueError(f"normalisation needs inputs of known rank, got shape {shape}")
    if not axes:
        raise ValueError("axis must name at least one axis, got []")
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise ValueError(
                f"Axis {a} is out of bounds for input shape {shape} (rank {rank}); "
                f"received axis={axis}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise ValueError(f"axis has repeated axes: {axis}")
    return sorted(out)


# ------------------------------------------------------------------ composites ---


def composite(x: tf.Tensor, gamma, beta, axes: list[int], epsilon: float,
              centered: bool) -> tf.Tensor:
    """Keras's math (``keras.ops.layer_normalization`` / ``rms_normalization`` on the
    TensorFlow backend) in TensorFlow built-in ops: the portable form."""
    compute = stat_dtype(x.dtype)
    xc = tf.cast(x, compute)
    rank = x.shape.rank

    def param(p):
        if p is None:
            return None
        p = tf.cast(p, compute)
        return p if axes == [rank - 1] else _bshape(x, axes, p)

    g, b = param(gamma), param(beta)
    if centered:
        # tf.nn.moments's values, without its stop_gradient on the mean (which leaves
        # first derivatives exact but drops a term from the second).
        mean = tf.reduce_mean(xc, axis=axes, keepdims=True)
        var = tf.reduce_mean(tf.math.squared_difference(xc, mean), axis=axes, keepdims=True)
        inv = tf.math.rsqrt(var + epsilon)
        if g is not None:
            inv = inv * g
        res = -mean * inv
        if b is not None:
            res = res + b
        y = xc * inv + res
    else:
        rrms = tf.math.rsqrt(tf.reduce_mean(tf.square(xc), axis=axes, keepdims=True) + epsilon)
        y = xc * rrms
        if g is not None:
            y = y * g
    return tf.cast(y, x.dtype)


def _bshape(x: tf.Tensor, axes: list[int], p: tf.Tensor) -> tf.Tensor:
    """p (the normalised axes' shape, or flattened) reshaped to broadcast against x."""
    rank = x.shape.rank
    dyn = tf.shape(x)
    shape = [dyn[a] if a in axes else 1 for a in range(rank)]
    return tf.reshape(p, tf.stack(shape))


# ------------------------------------------------------------------ the calls ---


def _rows(x: tf.Tensor, axes: list[int]):
    """x as [..., cols] with the normalised axes last and flattened; and the inverse."""
    rank = x.shape.rank
    others = [a for a in range(rank) if a not in axes]
    perm = others + axes
    moved = perm != list(range(rank))
    xt = tf.transpose(x, perm) if moved else x
    k = len(axes)
    if k == 1:
        flat = xt
    else:
        dims = [xt.shape[d] for d in range(rank - k, rank)]
        cols = math.prod(dims) if all(d is not None for d in dims) else -1
        if cols == -1:
            cols = tf.reduce_prod(tf.shape(xt)[rank - k:])
        flat = tf.reshape(xt, tf.concat([tf.shape(xt)[:rank - k], [cols]], 0))
        if isinstance(cols, int):
            flat.set_shape(xt.shape[:rank - k].concatenate([cols]))

    def restore(t: tf.Tensor) -> tf.Tensor:
        if k > 1:
            t = tf.reshape(t, tf.shape(xt))
            t.set_shape(xt.shape)
        if moved:
            inverse = [perm.index(a) for a in range(rank)]
            t = tf.transpose(t, inverse)
        return t

    return flat, restore


def _param(p, name: str, x: tf.Tensor, axes: list[int], dtype: tf.DType, default: float):
    """gamma or beta as the op's 1-D vector of the compute dtype; ValueError naming the
    shapes when p fits neither the normalised axes' shape nor their flattened size."""
    norm_shape = tf.TensorShape([x.shape[a] for a in axes])
    if p is None:
        n = norm_shape.num_elements()
        if n is None:
            n = tf.reduce_prod(tf.gather(tf.shape(x), axes))
        return tf.fill([n], tf.constant(default, dtype))
    p = tf.convert_to_tensor(p)
    if p.shape.rank is not None and p.shape != norm_shape and not (
            p.shape.rank == 1 and norm_shape.num_elements() is not None
            and p.shape[0] in (None, norm_shape.num_elements())):
        if norm_shape.is_fully_defined() and p.shape.is_fully_defined():
            raise ValueError(
                f"{name} must have the shape of the normalised axes {norm_shape.as_list()} "
                f"(axes {axes} of x {x.shape}), got {name} {p.shape}")
    p = tf.cast(p, dtype)
    return p if p.shape.rank == 1 else tf.reshape(p, [-1])


def _check_residual(x: tf.Tensor, r: tf.Tensor) -> None:
    """The kernels' and shape functions' check, before any op is built."""
    if not x.shape.is_compatible_with(r.shape):
        raise ValueError(f"x and residual must have the same shape, got x {x.shape} and "
                         f"residual {r.shape}")


def normalize(x: TensorLike, gamma, beta, axis, epsilon: float, residual, centered: bool,
              name: str | None):
    """What `layer_norm` (centered) and `rms_norm` run."""
    op = op_name(centered, residual is not None)
    with tf.name_scope(name or op):
        x = tf.convert_to_tensor(x)
        if not x.dtype.is_floating:
            raise TypeError(f"{op}: x must be half, bfloat16, float32 or float64, got {x.dtype}")
        r = None
        if residual is not None:
            r = tf.convert_to_tensor(residual, x.dtype)
            _check_residual(x, r)
        axes = normalize_axes(axis, x.shape.rank, x.shape)
        epsilon = float(epsilon)
        if not math.isfinite(epsilon) or epsilon < 0:
            raise ValueError(f"TfOps>{op}: attribute 'epsilon' must be finite and >= 0, "
                             f"got {epsilon}")
        u = stat_dtype(x.dtype)
        if use_composite(op, XLA_LOWERED):
            g = None if gamma is None else _param(gamma, "gamma", x, axes, u, 1.0)
            b = None if beta is None else _param(beta, "beta", x, axes, u, 0.0)
            h = x if r is None else x + r
            # The composite takes Keras's shapes; flattened parameters are reshaped to
            # broadcast (_bshape).
            y = composite(h, g, b, axes, epsilon, centered)
            return y if r is None else (h, y)
        xf, restore = _rows(x, axes)
        g = _param(gamma, "gamma", x, axes, u, 1.0)
        inputs = [xf]
        if r is not None:
            inputs.append(_rows(r, axes)[0])
        inputs.append(g)
        if centered:
            inputs.append(_param(beta, "beta", x, axes, u, 0.0))
        outs = op_fn(op)(*inputs, epsilon=epsilon)
        if r is None:
            return restore(outs[0])
        return restore(outs[0]), restore(outs[1])


def layer_norm(x: TensorLike, gamma: TensorLike | None = None, beta: TensorLike | None = None,
               axis: int | Sequence[int] = -1, epsilon: float = 1e-3,
               residual: TensorLike | None = None, name: str | None = None):
    """Layer normalisation, fused: ``gamma * (x - mean) / sqrt(var + epsilon) + beta``
    over `axis`, one op forward and one backward (``TfOps>LayerNorm``).

    Args:
      x: a half, bfloat16, float32 or float64 tensor of known rank.
      gamma: scale with the shape of the normalised axes (or their flattened size);
        None: 1.
      beta: offset, likewise; None: 0.
      axis: an axis or a list of axes to normalise over, as Keras's ``axis``.
      epsilon: added to the variance; finite and >= 0.
      residual: optional tensor of x's shape: then ``h = x + residual`` is normalised
        and ``(h, y)`` returned, both from one pass (pre-norm transformer blocks).
      name: op name scope.

    Returns:
      ``y`` of x's shape and dtype, or ``(h, y)`` with a residual.

    Example:
      >>> tf_ops.layer_norm([[1.0, 2.0, 3.0]]).numpy().round(4)
      array([[-1.2238,  0.    ,  1.2238]], dtype=float32)
      >>> h, y = tf_ops.layer_norm([[1.0, 2.0]], residual=[[1.0, 0.0]])
      >>> h.numpy()
      array([[2., 2.]], dtype=float32)
    """
    return normalize(x, gamma, beta, axis, epsilon, residual, True, name)


def rms_norm(x: TensorLike, scale: TensorLike | None = None, axis: int | Sequence[int] = -1,
             epsilon: float = 1e-6, residual: TensorLike | None = None,
             name: str | None = None):
    """RMS normalisation, fused: ``scale * x / sqrt(mean(x^2) + epsilon)`` over `axis`,
    one op forward and one backward (``TfOps>RmsNorm``).

    Args:
      x: a half, bfloat16, float32 or float64 tensor of known rank.
      scale: with the shape of the normalised axes (or their flattened size); None: 1.
      axis: an axis or a list of axes, as Keras's ``axis``.
      epsilon: added to the mean square; finite and >= 0.
      residual: optional tensor of x's shape: returns ``(h, y)`` with ``h = x +
        residual`` and ``y = rms_norm(h)``, from one pass.
      name: op name scope.

    Returns:
      ``y``, or ``(h, y)`` with a residual.

    Example:
      >>> tf_ops.rms_norm([[3.0, 4.0]]).numpy().round(4)
      array([[0.8485, 1.1314]], dtype=float32)
    """
    return normalize(x, scale, None, axis, epsilon, residual, False, name)


def _grad(centered: bool, dy, x, gamma, stats, epsilon, dh, name):
    x = tf.convert_to_tensor(x)
    u = stat_dtype(x.dtype)
    args = [tf.convert_to_tensor(dy, x.dtype)]
    if dh is not None:
        args.append(tf.convert_to_tensor(dh, x.dtype))
    args += [x, tf.convert_to_tensor(gamma, u)] + [tf.convert_to_tensor(s, u) for s in stats]
    return tuple(op_fn(op_name(centered, dh is not None, True))(*args, epsilon=epsilon, name=name))


def layer_norm_grad(dy: TensorLike, x: TensorLike, gamma: TensorLike, mean: TensorLike,
                    rstd: TensorLike, epsilon: float = 1e-3, dh: TensorLike | None = None,
                    name: str | None = None):
    """The backward of the last-axis layer norm from its saved statistics, in one pass
    (``TfOps>LayerNormGrad``; with `dh`, h's own incoming gradient, ``TfOps>AddLayerNormGrad``,
    whose x is then h and whose dx is also the residual's). What `layer_norm`'s gradient
    runs; dgamma and dbeta are summed in fixed tiles (bit-identical whatever the threads).

    Returns:
      ``(dx, dgamma, dbeta)``; gamma, the statistics and dgamma/dbeta are float32
      (float64 for float64 x).

    Example:
      >>> x = tf.constant([[1.0, 2.0, 3.0]])
      >>> dx, dg, db = tf_ops.layer_norm_grad(tf.ones([1, 3]), x, tf.ones([3]),
      ...                                     tf.constant([2.0]), tf.constant([1.2238]))
      >>> db.numpy()
      array([1., 1., 1.], dtype=float32)
    """
    return _grad(True, dy, x, gamma, (mean, rstd), epsilon, dh, name)


def rms_norm_grad(dy: TensorLike, x: TensorLike, gamma: TensorLike, rstd: TensorLike,
                  epsilon: float = 1e-6, dh: TensorLike | None = None,
                  name: str | None = None):
    """The backward of the last-axis RMS norm from its saved rstd, in one pass
    (``TfOps>RmsNormGrad``; with `dh`, ``TfOps>AddRmsNormGrad``). What `rms_norm`'s
    gradient runs.

    Returns:
      ``(dx, dgamma)``.

    Example:
      >>> dx, dg = tf_ops.rms_norm_grad(tf.ones([1, 2]), tf.constant([[3.0, 4.0]]),
      ...                               tf.ones([2]), tf.constant([0.2828427]))
      >>> dg.numpy().round(4)
      array([0.8485, 1.1314], dtype=float32)
    """
    return _grad(False, dy, x, gamma, (rstd,), epsilon, dh, name)


FUNCTIONS = {"layer_norm": layer_norm, "rms_norm": rms_norm,
             "layer_norm_grad": layer_norm_grad, "rms_norm_grad": rms_norm_grad}
__all__ = sorted(FUNCTIONS)
