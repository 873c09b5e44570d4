"""Gradient registrations for every op of every activation, any order, from the table.

The activation family's gradients (its table, functions, composites and layers are in
``activation/``; the fused ops' gradients in ``fused/gradients.py``).

For an activation with f, grad op G(g, v) = g * f'(v) and grad-grad op
H(u, g, v) = (u * f'(v), u * g * f''(v)) (v: the features, or the outputs for Elu):
- ``TfOps>{op}``: the gradient is G(upstream, v);
- ``TfOps>{op}Grad``: H, fused: dG/dg = f'(v) and dG/dv = g * f''(v);
- ``TfOps>{op}GradGrad`` (third order), composed: with upstream (ua, ub) for H's two
  outputs (a = u f', b = u g f''):
      d_u = ua f' + ub g f'',   d_g = ub u f'',   d_v = ua u f'' + ub u g f'''
  where f' and f'' come from the fused ops and f''' from TensorFlow's derivative of the
  op's composite f'' (``composites.grad_grad``'s). Those are differentiable again, so
  every order works.

Registration happens once per process (`core.op_support.register_gradient`): importing
or reloading this module again does not raise "Registering two gradient with name".
"""

from __future__ import annotations

import tensorflow as tf

from tf_ops.python.activation import composites
from tf_ops.python.activation import functions as activations
from tf_ops.python.activation.table import ACTIVATIONS, Activation
from tf_ops.python.core import op_info
from tf_ops.python.core.op_support import op_attrs, op_inputs, register_gradient


def _third_derivative_times(entry: Activation, w, v, attrs: dict) -> tf.Tensor:
    """w * f'''(v): TensorFlow's derivative of the composite f'' (as
    `composites.grad_grad` computes it), in the op's compute type."""
    with tf.GradientTape() as tape:
        tape.watch(v)
        _, second = composites.grad_grad(entry, tf.ones_like(v), tf.ones_like(v), v, **attrs)
    return tape.gradient(second, v, output_gradients=w,
                         unconnected_gradients=tf.UnconnectedGradients.ZERO)


def _register(entry: Activation) -> None:
    base = op_info.NAMESPACE + entry.op
    fn = entry.function
    takes_outputs = op_info.grad_takes_outputs(entry.op)

    @register_gradient(base)
    def _forward_grad(op: tf.Operation, grad: tf.Tensor) -> tf.Tensor:
        v = op.outputs[0] if takes_outputs else op_inputs(op).features
        return activations.FUNCTIONS[f"{fn}_grad"](grad, v, **op_attrs(op))

    @register_gradient(base + "Grad")
    def _grad_op_grad(op: tf.Operation, grad: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        gradients, v = op.inputs
        return activations.FUNCTIONS[f"{fn}_grad_grad"](grad, gradients, v, **op_attrs(op))

    @register_gradient(base + "GradGrad")
    def _grad_grad_grad(op: tf.Operation, ua: tf.Tensor, ub: tf.Tensor) -> tuple:
        u, g, v = op.inputs
        attrs = op_attrs(op)
        grad_grad = activations.FUNCTIONS[f"{fn}_grad_grad"]
        second = lambda w1, w2: grad_grad(w1, w2, v, **attrs)[1]  # w1 * w2 * f''(v)
        d_u = activations.FUNCTIONS[f"{fn}_grad"](ua, v, **attrs) + second(ub, g)
        d_g = second(ub, u)
        d_v = second(ua, u) + _third_derivative_times(entry, ub * u * g, v, attrs)
        return d_u, d_g, d_v


for _entry in ACTIVATIONS:
    _register(_entry)
