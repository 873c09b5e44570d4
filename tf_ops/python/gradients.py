"""Gradient registrations for every tf_ops op, first and second order.

Forward op ``TfOps>X`` gets its gradient from the grad op ``TfOps>XGrad``; the
grad op itself is differentiable too, so nested tapes, `tf.hessians` and
gradient-of-gradient penalties work. For a grad op G(g, v) = g * f'(v):
``dG/dg = f'(v)`` (the grad op applied to the upstream gradient) and
``dG/dv = g * d f'(v) / dv`` (composed from TF ops; see shared/activations-math.md).

Registration happens once per process: importing or reloading this module again
does not raise "Registering two gradient with name".
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf
from tensorflow.python.framework import ops

from tf_ops.python import activations


def _register_gradient(op_type: str) -> Callable[[Callable], Callable]:
    """Like `ops.RegisterGradient`, but a no-op when op_type already has one."""

    def decorator(fn: Callable) -> Callable:
        try:
            ops.gradient_registry.lookup(op_type)
        except LookupError:
            ops.RegisterGradient(op_type)(fn)
        return fn

    return decorator


@_register_gradient("TfOps>LeakyRelu")
def _leaky_relu_grad(op: tf.Operation, grad: tf.Tensor) -> tf.Tensor:
    return activations.leaky_relu_grad(grad, op.inputs[0], alpha=op.get_attr("alpha"))


@_register_gradient("TfOps>LeakyReluGrad")
def _leaky_relu_grad_grad(op: tf.Operation, grad: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    # Linear in g; piecewise constant in x, so d/dx is 0 (as TF's LeakyReluGrad).
    features = op.inputs[1]
    alpha = op.get_attr("alpha")
    return activations.leaky_relu_grad(grad, features, alpha=alpha), tf.zeros_like(features)


@_register_gradient("TfOps>Elu")
def _elu_grad(op: tf.Operation, grad: tf.Tensor) -> tf.Tensor:
    return activations.elu_grad(grad, op.outputs[0], alpha=op.get_attr("alpha"))


@_register_gradient("TfOps>EluGrad")
def _elu_grad_grad(op: tf.Operation, grad: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    # G(g, y) = g where y > 0 else g * (y + alpha): dG/dy = g on the y <= 0 branch.
    gradients, outputs = op.inputs
    alpha = op.get_attr("alpha")
    d_outputs = tf.where(outputs > 0, tf.zeros_like(grad), grad * gradients)
    return activations.elu_grad(grad, outputs, alpha=alpha), d_outputs


# Second derivatives f''(x), composed from TF ops: used for d(grad op)/dx, and
# themselves differentiable by TF, so any order works.
_SQRT_2_OVER_PI = 0.7978845608028654
_INV_SQRT_2PI = 0.3989422804014327
_TANH_COEFF = 0.044715


def _gelu_second_derivative(x: tf.Tensor, approximate: bool) -> tf.Tensor:
    if not approximate:
        # phi(x) (2 - x^2)
        return _INV_SQRT_2PI * tf.exp(-0.5 * x * x) * (2.0 - x * x)
    # f = x s(z), z = 2 sqrt(2/pi) (x + a x^3): f'' = s (1-s) (2 z' + x (1-2s) z'^2 + x z'').
    z = 2.0 * _SQRT_2_OVER_PI * (x + _TANH_COEFF * x * x * x)
    dz = 2.0 * _SQRT_2_OVER_PI * (1.0 + 3.0 * _TANH_COEFF * x * x)
    d2z = 12.0 * _SQRT_2_OVER_PI * _TANH_COEFF * x
    s, sm = tf.sigmoid(z), tf.sigmoid(-z)  # sm = 1 - s without cancellation
    return s * sm * (2.0 * dz + x * (sm - s) * dz * dz + x * d2z)


def _swish_second_derivative(x: tf.Tensor, beta: float) -> tf.Tensor:
    # beta s (1-s) (2 + z (1 - 2s)), z = beta x.
    z = beta * x
    s, sm = tf.sigmoid(z), tf.sigmoid(-z)  # sm = 1 - s without cancellation
    return beta * s * sm * (2.0 + z * (sm - s))


def _mish_second_derivative(x: tf.Tensor) -> tf.Tensor:
    # With t = tanh(softplus x), s = sigmoid x, D = (1 - t^2) s:
    # f'' = 2 D + x (1 - t^2) s (1 - s - 2 t s).
    t = tf.tanh(tf.math.softplus(x))
    s = tf.sigmoid(x)
    d = (1.0 - t * t) * s
    return 2.0 * d + x * d * (1.0 - s - 2.0 * t * s)


def _hard_swish_second_derivative(x: tf.Tensor) -> tf.Tensor:
    # 1/3 strictly inside (-3, 3), where f' = (2x + 3) / 6; 0 outside.
    return tf.cast((x > -3.0) & (x < 3.0), x.dtype) * (1.0 / 3.0)


def _register_features_activation(
    name: str,
    grad_op: Callable[..., tf.Tensor],
    second_derivative: Callable[..., tf.Tensor],
    attrs: tuple[str, ...] = (),
) -> None:
    """Registers the gradients of ``TfOps>{name}`` and ``TfOps>{name}Grad`` for an
    activation whose grad op takes the features: G(g, x) = g * f'(x), so
    dG/dg = G(u, x) and dG/dx = u * g * f''(x)."""

    def attr_values(op: tf.Operation) -> dict:
        return {attr: op.get_attr(attr) for attr in attrs}

    @_register_gradient(f"TfOps>{name}")
    def _forward_grad(op: tf.Operation, grad: tf.Tensor) -> tf.Tensor:
        return grad_op(grad, op.inputs[0], **attr_values(op))

    @_register_gradient(f"TfOps>{name}Grad")
    def _grad_op_grad(op: tf.Operation, grad: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        gradients, features = op.inputs
        values = attr_values(op)
        return (
            grad_op(grad, features, **values),
            grad * gradients * second_derivative(features, **values),
        )


_register_features_activation("Gelu", activations.gelu_grad, _gelu_second_derivative, ("approximate",))
_register_features_activation("Swish", activations.swish_grad, _swish_second_derivative, ("beta",))
_register_features_activation("Mish", activations.mish_grad, _mish_second_derivative)
_register_features_activation("HardSwish", activations.hard_swish_grad, _hard_swish_second_derivative)
