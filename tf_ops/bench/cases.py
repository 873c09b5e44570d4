"""What the benchmark times: for each activation, tf_ops and what TF offers instead.

A `Case` names an activation and gives three functions of tensors, each for
tf_ops and for the TensorFlow reference (the built-in op where TF has one, else
the composite a user would write):

  forward(x)        -> y
  grad(g, v)        -> dx, the grad op alone (v: features, or outputs for elu)
  grad input(x, y)  -> v, which of features/outputs the grad op takes

Forward+backward through a tape, and the second derivative through nested
tapes, are built from `forward` for both sides. Adding an activation to the
benchmark is one `Case` in `CASES`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import tensorflow as tf

import tf_ops

Fn = Callable[..., tf.Tensor]


@dataclasses.dataclass(frozen=True)
class Case:
    """One activation: tf_ops and TensorFlow's equivalent, forward and grad op."""

    name: str
    ours: Fn  # x -> y
    ours_grad: Fn  # (g, v) -> dx
    theirs: Fn  # x -> y, TF built-in or composite
    theirs_grad: Fn  # (g, v) -> dx, TF built-in grad op or composite derivative
    grad_takes_outputs: bool = False
    theirs_label: str = "built-in"


_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_grad(g: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
    phi = 0.5 * (1.0 + tf.math.erf(x * _SQRT_HALF))
    return g * (phi + x * _INV_SQRT_2PI * tf.exp(-0.5 * x * x))


def _gelu_tanh_grad(g: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
    u = _SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
    t = tf.tanh(u)
    du = _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x * x)
    return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)


def _silu_grad(g: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
    s = tf.sigmoid(x)
    return g * (s * (1.0 + x * (1.0 - s)))


def _mish(x: tf.Tensor) -> tf.Tensor:
    return x * tf.tanh(tf.math.softplus(x))


def _mish_grad(g: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
    t = tf.tanh(tf.math.softplus(x))
    return g * (t + x * (1.0 - t * t) * tf.sigmoid(x))


def _hard_swish(x: tf.Tensor) -> tf.Tensor:
    return x * tf.nn.relu6(x + 3.0) / 6.0


def _hard_swish_grad(g: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
    inside = tf.cast((x > -3.0) & (x < 3.0), x.dtype)
    return g * (tf.nn.relu6(x + 3.0) / 6.0 + x * inside / 6.0)


CASES: dict[str, Case] = {
    c.name: c
    for c in [
        Case(
            "leaky_relu",
            lambda x: tf_ops.leaky_relu(x, alpha=0.2),
            lambda g, v: tf_ops.leaky_relu_grad(g, v, alpha=0.2),
            lambda x: tf.nn.leaky_relu(x, alpha=0.2),
            lambda g, v: tf.raw_ops.LeakyReluGrad(gradients=g, features=v, alpha=0.2),
        ),
        Case(
            "elu",
            tf_ops.elu,
            tf_ops.elu_grad,
            tf.nn.elu,
            lambda g, v: tf.raw_ops.EluGrad(gradients=g, outputs=v),
            grad_takes_outputs=True,
        ),
        Case(
            "gelu",
            tf_ops.gelu,
            tf_ops.gelu_grad,
            lambda x: tf.nn.gelu(x, approximate=False),
            _gelu_grad,
            theirs_label="built-in (composite grad)",
        ),
        Case(
            "gelu_tanh",
            lambda x: tf_ops.gelu(x, approximate=True),
            lambda g, v: tf_ops.gelu_grad(g, v, approximate=True),
            lambda x: tf.nn.gelu(x, approximate=True),
            _gelu_tanh_grad,
            theirs_label="built-in (composite grad)",
        ),
        Case(
            "swish",
            tf_ops.swish,
            tf_ops.swish_grad,
            tf.nn.silu,
            _silu_grad,
            theirs_label="tf.nn.silu (composite grad)",
        ),
        Case("mish", tf_ops.mish, tf_ops.mish_grad, _mish, _mish_grad, theirs_label="composite"),
        Case(
            "hard_swish",
            tf_ops.hard_swish,
            tf_ops.hard_swish_grad,
            _hard_swish,
            _hard_swish_grad,
            theirs_label="composite (keras.activations.hard_swish)",
        ),
    ]
}


def forward_backward(forward: Fn) -> Fn:
    """(x, g) -> (y, dx): the forward op, then its gradient through a tape."""

    def run(x: tf.Tensor, g: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = forward(x)
        return y, tape.gradient(y, x, output_gradients=g)

    return run


def second_order(forward: Fn) -> Fn:
    """x -> (y, dy/dx, d2y/dx2): the forward op, then its first and second
    derivatives through nested tapes (upstream gradients of ones, as a tape gives)."""

    def run(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = forward(x)
            dy = inner.gradient(y, x)
        return y, dy, outer.gradient(dy, x)

    return run
