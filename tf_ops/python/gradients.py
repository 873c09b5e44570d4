"""Gradient registrations for every tf_ops op, at every order.

For an activation f with grad op G(g, v) = g * f'(v) (v: the features, or the
outputs for Elu) and grad-grad op GG(u, g, v) = (u * f'(v), u * g * f''(v)):

- ``TfOps>X``: the gradient is G(dy, v);
- ``TfOps>XGrad``: the gradient for upstream u is GG(u, g, v), both derivatives
  in one fused pass;
- ``TfOps>XGradGrad``: for upstream (ua, ub) of its outputs (a, b) =
  (u f', u g f''), d_u = ua f' + ub g f'', d_g = ub u f'', d_v = ua u f'' +
  ub u g f''', composed from GG and TF ops; f''' comes from TF's autodiff of the
  composite f'(v) in ``composites.py``, which TF differentiates further for any
  higher order. No derivative is stated here.

Registration happens once per process: importing or reloading this module again
does not raise "Registering two gradient with name".
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf
from tensorflow.python.framework import op_def_registry, ops

from tf_ops.python import activations, composites


def _register_gradient(op_type: str) -> Callable[[Callable], Callable]:
    """Like `ops.RegisterGradient`, but a no-op when op_type already has one."""

    def decorator(fn: Callable) -> Callable:
        try:
            ops.gradient_registry.lookup(op_type)
        except LookupError:
            ops.RegisterGradient(op_type)(fn)
        return fn

    return decorator


def _attrs(op: tf.Operation) -> dict:
    """The op's attributes other than T (also for the eager tape's stand-in ops)."""
    return {a.name: op.get_attr(a.name) for a in op_def_registry.get(op.type).attr if a.name != "T"}


def _register_activation(
    name: str,
    grad_op: Callable[..., tf.Tensor],
    grad_grad_op: Callable[..., tuple[tf.Tensor, tf.Tensor]],
    grad_takes_outputs: bool = False,
) -> None:
    """Registers the gradients of ``TfOps>{name}``, its grad op and its grad-grad op."""

    @_register_gradient(f"TfOps>{name}")
    def _forward_grad(op: tf.Operation, grad: tf.Tensor) -> tf.Tensor:
        v = op.outputs[0] if grad_takes_outputs else op.inputs[0]
        return grad_op(grad, v, **_attrs(op))

    @_register_gradient(f"TfOps>{name}Grad")
    def _grad_op_grad(op: tf.Operation, grad: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        gradients, v = op.inputs
        return grad_grad_op(grad, gradients, v, **_attrs(op))

    @_register_gradient(f"TfOps>{name}GradGrad")
    def _grad_grad_op_grad(op: tf.Operation, grad_a, grad_b) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        u, g, v = op.inputs
        attrs = _attrs(op)
        d_u, d_g, d_v = tf.zeros_like(u), tf.zeros_like(g), tf.zeros_like(v)
        if grad_a is not None:  # a = u f': d/du = ua f', d/dv = ua u f''
            ua_f1, ua_u_f2 = grad_grad_op(grad_a, u, v, **attrs)
            d_u, d_v = d_u + ua_f1, d_v + ua_u_f2
        if grad_b is not None:  # b = u g f'': d/du = ub g f'', d/dg = ub u f'', d/dv = ub u g f'''
            _, ub_g_f2 = grad_grad_op(grad_b, g, v, **attrs)
            _, ub_u_f2 = grad_grad_op(grad_b, u, v, **attrs)
            f3 = composites.derivative(name, v, order=2, **attrs)
            d_u, d_g, d_v = d_u + ub_g_f2, d_g + ub_u_f2, d_v + grad_b * u * g * f3
        return d_u, d_g, d_v


_register_activation("LeakyRelu", activations.leaky_relu_grad, activations.leaky_relu_grad_grad)
_register_activation("Elu", activations.elu_grad, activations.elu_grad_grad, grad_takes_outputs=True)
_register_activation("Gelu", activations.gelu_grad, activations.gelu_grad_grad)
_register_activation("Swish", activations.swish_grad, activations.swish_grad_grad)
_register_activation("Mish", activations.mish_grad, activations.mish_grad_grad)
_register_activation("HardSwish", activations.hard_swish_grad, activations.hard_swish_grad_grad)
