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
