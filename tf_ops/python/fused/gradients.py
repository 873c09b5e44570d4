"""The gradients of the fused ops of every activation, of any order: ``TfOps>Bias{Act}``,
``TfOps>Add{Act}``, ``TfOps>Gated{Act}``, ``TfOps>BiasGated{Act}`` and their grad ops
(``functions.py``).

The fused ops' gradients are their grad ops; the add ops' is the plain grad op, at the
output where that gives f' (ReLU: nothing but y is kept, as for TensorFlow's Relu
after an Add), else at the sum formed again (`fused.add_slope_input`). The grad ops' gradients are written with
the plain ops (``{act}_grad``, whose gradient is the fused ``{act}_grad_grad`` op), so
second order runs fused kernels and higher orders compose as for the plain ops.
Registered once per process (`core.op_support.register_gradient`), as the plain ops'
(``activation/gradients.py``).
"""

from __future__ import annotations

import tensorflow as tf

from tf_ops.python.activation import functions as activations
from tf_ops.python.activation.table import ACTIVATIONS, Activation
from tf_ops.python.core import op_info
from tf_ops.python.core.op_support import op_attrs, op_inputs, register_gradient
from tf_ops.python.fused import functions as fused


def _op_attrs(op: tf.Operation, entry: Activation) -> dict:
    """The fused op's activation attributes (those of ``TfOps>{Act}``)."""
    return op_attrs(op, of=op_info.NAMESPACE + entry.op)


def _register(entry: Activation) -> None:
    fn = entry.function
    plain = activations.FUNCTIONS
    takes_outputs = op_info.grad_takes_outputs(entry.op)

    def slope_input(z, attrs):
        """What {act}_grad takes at the features z: z, or f(z) (Elu)."""
        return plain[fn](z, **attrs) if takes_outputs else z

    def bias_grad(op, grad):
        attrs = _op_attrs(op, entry)
        df = op.get_attr("data_format").decode()
        x, b = op.inputs
        return fused.FUNCTIONS[f"bias_{fn}_grad"](grad, x, b, data_format=df, **attrs)

    def bias_grad_grad(op, u_dx, u_db):
        # The grad op rewritten with the plain ops and differentiated: the
        # gradient of {act}_grad is the fused {act}_grad_grad op.
        attrs = _op_attrs(op, entry)
        df = op.get_attr("data_format").decode()
        g, x, b = op.inputs
        with tf.GradientTape() as tape:
            tape.watch([g, x, b])
            dx = plain[f"{fn}_grad"](g, slope_input(fused.add_bias(x, b, df), attrs), **attrs)
            db = tf.reduce_sum(dx, axis=fused.bias_axes(x, df)[1])
        u_db = tf.zeros_like(b) if u_db is None else u_db
        return tape.gradient([dx, db], [g, x, b], output_gradients=[u_dx, u_db],
                             unconnected_gradients=tf.UnconnectedGradients.ZERO)

    def add_grad(op, grad):
        attrs = _op_attrs(op, entry)
        x, a = op.inputs
        v = fused.add_slope_input(entry, op.outputs[0], x, a, attrs)
        dz = plain[f"{fn}_grad"](tf.cast(grad, v.dtype), v, **attrs)
        dz = tf.cast(dz, x.dtype)
        return dz, dz

    def gated_grad(op, grad):
        return fused.FUNCTIONS[f"gated_{fn}_grad"](grad, op_inputs(op).features,
                                                   **_op_attrs(op, entry))

    def gated_dx(g, z, attrs):
        """The gated grad op at the features z, rewritten with the plain ops."""
        a, b = fused.halves(z)
        return tf.concat([plain[f"{fn}_grad"](g * b, slope_input(a, attrs), **attrs),
                          g * plain[fn](a, **attrs)], axis=-1)

    def gated_grad_grad(op, upstream):
        attrs = _op_attrs(op, entry)
        g, x = op.inputs
        with tf.GradientTape() as tape:
            tape.watch([g, x])
            dx = gated_dx(g, x, attrs)
        return tape.gradient(dx, [g, x], output_gradients=upstream,
                             unconnected_gradients=tf.UnconnectedGradients.ZERO)

    def bias_gated_grad(op, grad):
        x, b = op.inputs
        return fused.FUNCTIONS[f"bias_gated_{fn}_grad"](grad, x, b, **_op_attrs(op, entry))

    def bias_gated_grad_grad(op, u_dx, u_db):
        attrs = _op_attrs(op, entry)
        g, x, b = op.inputs
        with tf.GradientTape() as tape:
            tape.watch([g, x, b])
            dx = gated_dx(g, x + b, attrs)
            db = tf.reduce_sum(dx, axis=fused.bias_axes(x, "NHWC")[1])
        u_db = tf.zeros_like(b) if u_db is None else u_db
        return tape.gradient([dx, db], [g, x, b], output_gradients=[u_dx, u_db],
                             unconnected_gradients=tf.UnconnectedGradients.ZERO)

    base = op_info.NAMESPACE
    register_gradient(f"{base}Bias{entry.op}", bias_grad)
    register_gradient(f"{base}Bias{entry.op}Grad", bias_grad_grad)
    register_gradient(f"{base}Add{entry.op}", add_grad)
    register_gradient(f"{base}Gated{entry.op}", gated_grad)
    register_gradient(f"{base}Gated{entry.op}Grad", gated_grad_grad)
    register_gradient(f"{base}BiasGated{entry.op}", bias_gated_grad)
    register_gradient(f"{base}BiasGated{entry.op}Grad", bias_gated_grad_grad)


for _entry in ACTIVATIONS:
    _register(_entry)
