"""The few functions the portable composites are written with: TensorFlow built-in ops
only, in shapes that convert to TFLite's builtin ops and, through tf2onnx, to ONNX ops
that onnxruntime runs, and that keep their accuracy in the tails.

What decides the shapes (each measured on this project's machine; see
docs/deploy.md for the per-runtime tables):

- tf2onnx turns a float ``tf.where(c, a, b)`` into ``c * a + (1 - c) * b``: an infinite
  or NaN value in the branch that is *not* selected then makes the result NaN. So every
  branch is computed on an input clamped to its own region, or the infinities are kept
  out of a product by clamping the factor (`vanishing_product`), never by a select.
- TFLite does not match ``x == -inf`` (a select on it is silently dropped) and its EXP
  returns 0 for NaN: NaN must reach the output through ``x`` itself, and the limits at
  +-inf come from the clamps, not from comparisons with infinity.
- onnxruntime's Sigmoid and tf2onnx's Erfc node are unusable in the tails (the first
  cancels to 0 below x ~ -17, the second does not load): the logistic is
  ``1 / (1 + exp(-z))`` and erfc a rational-times-exponential fit, both accurate in the
  lower tail in every runtime.
- There is no ``expm1`` in TFLite or ONNX: ``e^x - 1 = 2t / (1 - t)`` with
  ``t = tanh(x / 2)`` is accurate near 0 and at -inf.
- TFLite's converter folds ``1 / (1 + exp(-z))`` into its LOGISTIC op, and XNNPACK (its
  default delegate) computes LOGISTIC as NaN for |z| ~ 1e28..1e35 on AVX-512 CPUs: the
  logistic's argument is clamped to where the float32 result is already exactly 0 or 1.
- TFLite's built-in MAXIMUM and MINIMUM (without XNNPACK) return the other operand when
  one is NaN, so clamps lose NaN there: every forward composite's result passes NaN
  through by arithmetic alone (`keep_nan`).

Those forms are used under `tf_ops.portable()`. The other user of the composites, XLA
in a library built without lowerings, runs in TensorFlow: there `logistic`, `erfc` and
`expm1_nonpositive` are TensorFlow's own ``sigmoid``, ``erfc`` and ``expm1``, which XLA
compiles and which are a little more accurate (the grad op of Elu, from the outputs,
magnifies an ulp of ``y`` near -1).

Everything here takes tensors in the compute type (float32, or float64 for float64).
"""

from __future__ import annotations

import math

import tensorflow as tf

from tf_ops.python.core.portable import is_portable


def vanishing_product(x: tf.Tensor, w: tf.Tensor, at: str = "-inf") -> tf.Tensor:
    """``x * w`` where ``w`` tends to 0 as ``x`` tends to `at` (``"-inf"``, ``"+inf"`` or
    ``"both"``), with that limit, a signed zero, instead of the NaN of ``inf * 0``.

    ``x`` is clamped to the largest finite value on that side, which changes nothing for
    finite ``x``; NaN stays NaN (``maximum``/``minimum`` propagate it in TF, TFLite and
    onnxruntime). On the other side ``x * w`` keeps its infinite limit.

    Example:
      >>> vanishing_product(tf.constant([-np.inf, 2.0]), tf.constant([0.0, 0.5])).numpy()
      array([-0.,  1.], dtype=float32)
    """
    largest = tf.constant(x.dtype.max, x.dtype)
    clamped = x
    if at in ("-inf", "both"):
        clamped = tf.maximum(clamped, -largest)
    if at in ("+inf", "both"):
        clamped = tf.minimum(clamped, largest)
    if is_portable():
        return clamped * w
    # XLA fuses the maximum/minimum above (and a caller's own) into a clamp, and some
    # versions' clamp (TF 2.19's) turns NaN into a bound: NaN is passed through by a select.
    # Not in portable mode: tf2onnx would make the select a multiply-add (see above).
    return tf.where(tf.math.is_nan(x), x, clamped * w)


def keep_nan(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    """``y``, and NaN where ``x`` is NaN, by arithmetic that every runtime evaluates as
    IEEE (no select, no min/max): ``y / (1 + (r - r))`` with ``r = 1 / (1 + x^2)``, which
    is finite for every other ``x`` (0 at +-inf), so the factor is exactly 1 there.

    Example:
      >>> keep_nan(tf.constant([np.nan, np.inf, -2.0]), tf.constant([1.0, 1.0, -0.0])).numpy()
      array([nan,  1., -0.], dtype=float32)
    """
    r = 1.0 / (1.0 + x * x)
    return y / (1.0 + (r - r))


# From |z| = 104 on, the float32 logistic is exactly 0 or 1 (e^-104 is below half the
# smallest subnormal float); float64's is from 746 on.
_LOGISTIC_SATURATION = {tf.float32: 104.0, tf.float64: 746.0}


def logistic(z: tf.Tensor) -> tf.Tensor:
    """The logistic function; portable: ``1 / (1 + e^-z)`` on z clamped to where the
    result saturates, accurate in the lower tail (where ONNX's Sigmoid is not), 0 at
    -inf and 1 at +inf. The clamp keeps XNNPACK's LOGISTIC (what TFLite makes of this
    form) inside the range where it is right on every CPU; on TFLite's built-in kernels
    it loses NaN, which the activations restore (`keep_nan`).

    Example:
      >>> logistic(tf.constant([-20.0, 0.0])).numpy()
      array([2.0611537e-09, 5.0000000e-01], dtype=float32)
    """
    if not is_portable():
        return tf.sigmoid(z)
    limit = _LOGISTIC_SATURATION[z.dtype]
    return 1.0 / (1.0 + tf.exp(-tf.clip_by_value(z, -limit, limit)))


# erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), for z >= 0: the Chebyshev fit of
# Press et al. (Numerical Recipes, erfcc), relative error < 1.2e-7 for every z >= 0.
# The float32 CPU kernels use the same fit (tf_ops/cc/core/fast_math.h).
_ERFC_COEFFS = (
    -1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
    0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277,
)


def erfc(z: tf.Tensor) -> tf.Tensor:
    """The complementary error function; portable, without an Erfc op (which tf2onnx
    emits and onnxruntime rejects): in float32 the Numerical Recipes fit, relative
    error < 1.2e-7, accurate in the tail; in float64 ``tf.math.erfc`` (the fit is
    float32-accurate only).

    Example:
      >>> erfc(tf.constant([0.0, 3.0])).numpy().round(8)  # TF versions differ in the last digit
      array([1.000e+00, 2.209e-05], dtype=float32)
    """
    if z.dtype == tf.float64 or not is_portable():
        return tf.math.erfc(z)
    az = tf.abs(z)
    t = 1.0 / (1.0 + 0.5 * az)
    poly = tf.constant(_ERFC_COEFFS[-1], z.dtype)
    for c in reversed(_ERFC_COEFFS[:-1]):
        poly = c + t * poly
    tail = t * tf.exp(poly - az * az)  # finite for every z: exp(-inf) = 0
    return tf.where(z < 0, 2.0 - tail, tail)


def expm1_nonpositive(x: tf.Tensor) -> tf.Tensor:
    """``e^x - 1`` for ``x <= 0`` (clamp first); portable: ``2t / (1 - t)``,
    ``t = tanh(x / 2)``, accurate near 0 and -1 at -inf, for runtimes without expm1.

    Example:
      >>> expm1_nonpositive(tf.constant([-1e-6, -np.inf])).numpy()
      array([-9.999995e-07, -1.000000e+00], dtype=float32)
    """
    if not is_portable():
        return tf.math.expm1(x)
    t = tf.tanh(0.5 * x)
    return 2.0 * t / (1.0 - t)
