"""The ops as compositions of TensorFlow built-in ops, built from each activation's
portable composite in ``table.py``.

Two callers, both in ``functions.py`` (when: ``tf_ops/python/core/composite.py``):
- `tf_ops.portable()`: every tf_ops function builds these instead of the ``TfOps>``
  ops, so that an exported model runs without the library (SavedModel, TFLite, ONNX);
- XLA, when the library was built without its lowerings (``-DTF_OPS_XLA=OFF``, the
  Bazel build): there, and only while XLA is tracing, the wrappers build these.

Semantics are the ops': half and bfloat16 are computed in float32 and rounded once;
the forward composite's gradient is the grad-op composite ``g * f'(v)`` (same branches
at the kinks as the kernels), and TensorFlow differentiates that for second and higher
orders. Attributes and shapes are checked before this module is called, by the ops'
own C++ checks (``core.composite.check``).
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf

from tf_ops.python.activation.table import Activation
from tf_ops.python.core import op_info
from tf_ops.python.core.composite import kernel_attrs


def _in_compute_type(fn: Callable, *tensors: tf.Tensor):
    """fn on the tensors in float32 (half, bfloat16) or their own type (float32,
    float64), its result(s) rounded once back to that type."""
    dtype = tensors[0].dtype
    compute = dtype if dtype in (tf.float32, tf.float64) else tf.float32
    result = fn(*(tf.cast(t, compute) for t in tensors))
    if isinstance(result, tuple):
        return tuple(tf.cast(r, dtype) for r in result)
    return tf.cast(result, dtype)


def grad_op(entry: Activation, gradients, v, **attrs) -> tf.Tensor:
    """The composite of ``TfOps>{op}Grad``: gradients * f'(v)."""
    attrs = kernel_attrs(attrs)
    g = tf.convert_to_tensor(gradients)
    v = tf.convert_to_tensor(v, g.dtype)
    return _in_compute_type(lambda g, v: g * entry.derivative(v, **attrs), g, v)


def grad_grad(entry: Activation, upstream, gradients, v, **attrs) -> tuple[tf.Tensor, tf.Tensor]:
    """The composite of ``TfOps>{op}GradGrad``: (upstream * f'(v),
    upstream * gradients * f''(v)), f'' being TensorFlow's derivative of f'."""
    attrs = kernel_attrs(attrs)
    u = tf.convert_to_tensor(upstream)
    g, v = tf.convert_to_tensor(gradients, u.dtype), tf.convert_to_tensor(v, u.dtype)

    def both(u, g, v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            slope = entry.derivative(v, **attrs)
        d_v = tape.gradient(slope, v, output_gradients=u * g,
                            unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return u * slope, d_v

    return _in_compute_type(both, u, g, v)


def forward(entry: Activation, features, **attrs) -> tf.Tensor:
    """The composite of ``TfOps>{op}``; its gradient is `grad_op`'s composite, taking
    the outputs where the op's grad op does (Elu)."""
    kattrs = kernel_attrs(attrs)
    takes_outputs = op_info.grad_takes_outputs(entry.op)

    @tf.custom_gradient
    def activation(x):
        y = _in_compute_type(lambda x: entry.forward(x, **kattrs), x)

        def grad(dy):
            return grad_op(entry, dy, y if takes_outputs else x, **attrs)

        return y, grad

    return activation(tf.convert_to_tensor(features))
