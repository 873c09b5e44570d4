"""TensorFlow composites of every op, for XLA when the library has no lowerings.

A library built with ``-DTF_OPS_XLA=OFF`` (or by a build that leaves out
``tf_ops/cc/activation_xla.cc``) has no XLA kernels, so XLA cannot compile the
``TfOps>`` ops. The wrappers in ``activations.py`` then build these composites
instead, and only while traced inside an XLA context (``jit_compile=True``, Keras
``jit_compile``): everywhere else the fused kernels run.

Each activation is two formulas, f(x) and f'(v) (v the grad op's second input),
the same as ``tf_ops/cc/activation_math.h``: same branches at 0, the same limits at
+-inf (never NaN) and NaN propagation, half and bfloat16 computed in float32 and
rounded once. The forward composite takes its gradient from the grad-op composite
``g * f'(v)``, as the op does, and TensorFlow differentiates that for the second
and higher orders. The grad-grad composite (``u * f'(v)``, ``u * g * f''(v)``) is
derived from f'(v) by TensorFlow's autodiff, not stated again; so is the third
derivative that ``gradients.py`` needs for third and higher orders (`derivative`).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import tensorflow as tf

_SQRT_2_OVER_PI = 0.7978845608028654
_INV_SQRT_2PI = 0.3989422804014327
_INV_SQRT_2 = 0.7071067811865476
_TANH_COEFF = 0.044715
_MISH_CUTOFF = 20.0


def _safe_mul(x: tf.Tensor, w: tf.Tensor) -> tf.Tensor:
    """x * w, except that an infinite x times a zero w is a signed zero, not NaN."""
    w = tf.convert_to_tensor(w, x.dtype)
    return tf.where(tf.math.is_inf(x) & tf.equal(w, 0), tf.sign(x) * w, x * w)


@tf.custom_gradient
def _ones_like(x: tf.Tensor):
    """Ones, with a zero (not an unconnected) gradient: LeakyRelu's f' is piecewise
    constant, and the op's second derivative is zeros, as tf.hessians needs."""
    return tf.ones_like(x), lambda u: tf.zeros_like(x)


def _plus(y: tf.Tensor, alpha: float) -> tf.Tensor:
    """y + alpha. XLA folds y + 0 into y, keeping a -0 where IEEE gives +0 (and every
    negative input of elu with alpha = 0 has y = -0): for alpha = 0 this is
    y + y * y at y = +-0, which is +0 there with the derivative 1 of y + 0."""
    if alpha != 0:
        return y + alpha
    return tf.where(tf.equal(y, 0), y + y * y, y)


def _sigmoids(z: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """sigmoid(z) and 1 - sigmoid(z), both accurate in the tails."""
    return tf.sigmoid(z), tf.sigmoid(-z)


def _phi_cdf(x: tf.Tensor) -> tf.Tensor:
    return 0.5 * tf.math.erfc(-_INV_SQRT_2 * x)


def _gelu_z(x: tf.Tensor) -> tf.Tensor:
    """2u, with 0.5 (1 + tanh u) = sigmoid(2u)."""
    return 2.0 * _SQRT_2_OVER_PI * (x + _TANH_COEFF * x * x * x)


def _gelu(x, approximate=False):
    if approximate:
        return _safe_mul(x, tf.sigmoid(_gelu_z(x)))
    return _safe_mul(x, _phi_cdf(x))


def _gelu_derivative(x, approximate=False):
    if approximate:
        s, sm = _sigmoids(_gelu_z(x))
        dz = 2.0 * _SQRT_2_OVER_PI * (1.0 + 3.0 * _TANH_COEFF * x * x)
        return s + _safe_mul(x * dz, s * sm)
    return _phi_cdf(x) + _safe_mul(x, _INV_SQRT_2PI * tf.exp(-0.5 * x * x))


def _swish_derivative(x, beta=1.0):
    z = _safe_mul(x, beta)
    s, sm = _sigmoids(z)
    return s + _safe_mul(z, s * sm)


def _mish_parts(x):
    """tanh(softplus x) and sigmoid(x) below the cut-off, where x is clamped so
    that no branch TF differentiates overflows."""
    n = tf.exp(tf.minimum(x, _MISH_CUTOFF))
    num = n * (n + 2.0)
    return num / (num + 2.0), n / (1.0 + n)


def _mish(x):
    t, _ = _mish_parts(x)
    return tf.where(x > _MISH_CUTOFF, x, _safe_mul(x, t))


def _mish_derivative(x):
    t, s = _mish_parts(x)
    return tf.where(x > _MISH_CUTOFF, tf.ones_like(x), t + _safe_mul(x, (1.0 - t * t) * s))


def _hard_swish(x):
    relu6 = tf.where(x + 3.0 > 0, x + 3.0, tf.zeros_like(x))  # NaN: 0 here, x carries it
    relu6 = tf.where(relu6 < 6.0, relu6, 6.0 * tf.ones_like(x))
    return _safe_mul(x, relu6 * (1.0 / 6.0))


def _hard_swish_derivative(x):
    inside = (2.0 * x + 3.0) * (1.0 / 6.0)  # NaN stays NaN
    return tf.where(x <= -3.0, tf.zeros_like(x), tf.where(x >= 3.0, tf.ones_like(x), inside))


# name: (f(x, **attrs), f'(v, **attrs), grad op takes the outputs, attrs that must be finite)
_ACTIVATIONS: dict[str, tuple[Callable, Callable, bool, tuple[str, ...]]] = {
    "LeakyRelu": (
        lambda x, alpha=0.2: tf.where(x > 0, x, _safe_mul(x, alpha)),
        lambda x, alpha=0.2: tf.where(x > 0, _ones_like(x), alpha * _ones_like(x)),
        False,
        ("alpha",),
    ),
    "Elu": (
        lambda x, alpha=1.0: tf.where(x > 0, x, alpha * tf.math.expm1(x)),
        lambda y, alpha=1.0: tf.where(y > 0, tf.ones_like(y), _plus(y, alpha)),
        True,
        ("alpha",),
    ),
    "Gelu": (_gelu, _gelu_derivative, False, ()),
    "Swish": (lambda x, beta=1.0: _safe_mul(x, tf.sigmoid(_safe_mul(x, beta))), _swish_derivative, False, ("beta",)),
    "Mish": (_mish, _mish_derivative, False, ()),
    "HardSwish": (_hard_swish, _hard_swish_derivative, False, ()),
}

# The activations, as named in the ops ("TfOps>{name}", "TfOps>{name}Grad").
ACTIVATION_NAMES: tuple[str, ...] = tuple(_ACTIVATIONS)


def _check_attrs(name: str, attrs: dict) -> None:
    """The attribute checks of activation_attrs.h, with its messages (raised as
    the ValueError that a failing shape function gives while tracing)."""
    for attr in _ACTIVATIONS[name][3]:
        if not math.isfinite(attrs[attr]):
            raise ValueError(f"TfOps>{name}: attribute '{attr}' must be finite, got {attrs[attr]}")
    if name == "Elu" and attrs["alpha"] < 0:
        raise ValueError(
            f"TfOps>Elu: attribute 'alpha' must be >= 0, got {attrs['alpha']} (EluGrad recovers "
            "the branch from the outputs, which a negative alpha makes ambiguous)"
        )


def _as_kernel_attrs(attrs: dict) -> dict:
    """Float attributes as the kernels see them: float32 values."""
    return {k: float(np.float32(v)) if isinstance(v, float) else v for k, v in attrs.items()}


def _in_compute_type(fn: Callable, *tensors: tf.Tensor) -> tf.Tensor:
    """fn on the tensors in float32 (half, bfloat16) or their own type, rounded once."""
    dtype = tensors[0].dtype
    compute = dtype if dtype in (tf.float32, tf.float64) else tf.float32
    return tf.cast(fn(*(tf.cast(t, compute) for t in tensors)), dtype)


def grad_op(name: str, gradients, v, **attrs) -> tf.Tensor:
    """The composite of ``TfOps>{name}Grad``: gradients * f'(v)."""
    _check_attrs(name, attrs)
    _, derivative, takes_outputs, _ = _ACTIVATIONS[name]
    attrs = _as_kernel_attrs(attrs)
    g = tf.convert_to_tensor(gradients)
    v = tf.convert_to_tensor(v, g.dtype)
    if not g.shape.is_compatible_with(v.shape):
        raise ValueError(
            f"TfOps>{name}Grad: gradients and {'outputs' if takes_outputs else 'features'} "
            f"must have the same shape, got {g.shape} and {v.shape}"
        )
    return _in_compute_type(lambda g, v: g * derivative(v, **attrs), g, v)


def _nth_derivative(fn: Callable, v: tf.Tensor, n: int) -> tf.Tensor:
    """d^n fn(v) / dv^n of an elementwise fn, by TF autodiff (nested tapes); zeros
    where TF finds no dependence (a piecewise-constant f')."""
    if n == 0:
        return fn(v)
    with tf.GradientTape() as tape:
        tape.watch(v)
        y = _nth_derivative(fn, v, n - 1)
    return tape.gradient(y, v, unconnected_gradients=tf.UnconnectedGradients.ZERO)


def derivative(name: str, v, order: int = 1, **attrs) -> tf.Tensor:
    """The `order`-th derivative in v of the composite f'(v) of ``TfOps>{name}Grad``
    (order 0: f'(v) itself), by TF autodiff, in the compute type, rounded once."""
    _check_attrs(name, attrs)
    f_prime = _ACTIVATIONS[name][1]
    attrs = _as_kernel_attrs(attrs)
    return _in_compute_type(
        lambda v: _nth_derivative(lambda t: f_prime(t, **attrs), v, order), tf.convert_to_tensor(v)
    )


def grad_grad_op(name: str, upstream, gradients, v, **attrs) -> tuple[tf.Tensor, tf.Tensor]:
    """The composite of ``TfOps>{name}GradGrad``: ``upstream * f'(v)`` and
    ``upstream * gradients * f''(v)``, f'' by TF autodiff of the composite f'(v)."""
    _check_attrs(name, attrs)
    _, f_prime, takes_outputs, _ = _ACTIVATIONS[name]
    kernel_attrs = _as_kernel_attrs(attrs)
    u = tf.convert_to_tensor(upstream)
    g = tf.convert_to_tensor(gradients, u.dtype)
    v = tf.convert_to_tensor(v, u.dtype)
    if not all(a.shape.is_compatible_with(b.shape) for a, b in ((u, g), (u, v), (g, v))):
        raise ValueError(
            f"TfOps>{name}GradGrad: upstream, gradients and {'outputs' if takes_outputs else 'features'} "
            f"must have the same shape, got {u.shape}, {g.shape} and {v.shape}"
        )

    def one(fn):
        return _in_compute_type(fn, u, g, v)

    def d_v(u, g, v):
        return u * g * _nth_derivative(lambda t: f_prime(t, **kernel_attrs), v, 1)

    return one(lambda u, g, v: u * f_prime(v, **kernel_attrs)), one(d_v)


def forward(name: str, features, **attrs) -> tf.Tensor:
    """The composite of ``TfOps>{name}``; its gradient is `grad_op`'s composite."""
    _check_attrs(name, attrs)
    f, _, takes_outputs, _ = _ACTIVATIONS[name]
    kernel_attrs = _as_kernel_attrs(attrs)

    @tf.custom_gradient
    def activation(x):
        y = _in_compute_type(lambda x: f(x, **kernel_attrs), x)

        def grad(dy):
            return grad_op(name, dy, y if takes_outputs else x, **attrs)

        return y, grad

    return activation(tf.convert_to_tensor(features))
