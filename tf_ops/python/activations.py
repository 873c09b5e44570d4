"""Python wrappers of the fused activation ops and their grad ops.

Each wrapper calls the op of the same name in the compiled library
(``TfOps>LeakyRelu`` ...). The ops accept half, bfloat16, float32 and float64
tensors of any shape and run on CPU and, when built with CUDA, GPU. Gradients,
first and second order, are registered in ``gradients.py``.
"""

from __future__ import annotations

import tensorflow as tf

from tf_ops.python.library import load_library

TensorLike = tf.types.experimental.TensorLike

_ops = load_library()


def leaky_relu(features: TensorLike, alpha: float = 0.2, name: str | None = None) -> tf.Tensor:
    """Leaky ReLU: ``features if features > 0 else alpha * features``.

    Matches `tf.nn.leaky_relu` (a select, so alpha > 1 and alpha < 0 behave as
    the formula says). `alpha` must be finite.

    Example:
      >>> tf_ops.leaky_relu([-2.0, 0.0, 3.0], alpha=0.1).numpy()
      array([-0.2,  0. ,  3. ], dtype=float32)
    """
    return _ops.tf_ops_leaky_relu(features, alpha=alpha, name=name)


def leaky_relu_grad(
    gradients: TensorLike, features: TensorLike, alpha: float = 0.2, name: str | None = None
) -> tf.Tensor:
    """Gradient of `leaky_relu`: ``gradients if features > 0 else alpha * gradients``.

    `gradients` and `features` must have the same shape and dtype.

    Example:
      >>> tf_ops.leaky_relu_grad([1.0, 1.0], [-2.0, 3.0], alpha=0.1).numpy()
      array([0.1, 1. ], dtype=float32)
    """
    return _ops.tf_ops_leaky_relu_grad(gradients, features, alpha=alpha, name=name)


def elu(features: TensorLike, alpha: float = 1.0, name: str | None = None) -> tf.Tensor:
    """ELU: ``features if features > 0 else alpha * (exp(features) - 1)``.

    With alpha = 1 it matches `tf.nn.elu`. `alpha` must be finite and >= 0 (the
    gradient is computed from the outputs, which a negative alpha makes ambiguous).

    Example:
      >>> tf_ops.elu([-1.0, 2.0]).numpy()
      array([-0.63212055,  2.        ], dtype=float32)
    """
    return _ops.tf_ops_elu(features, alpha=alpha, name=name)


def elu_grad(
    gradients: TensorLike, outputs: TensorLike, alpha: float = 1.0, name: str | None = None
) -> tf.Tensor:
    """Gradient of `elu` from its *outputs*: ``gradients if outputs > 0 else
    gradients * (outputs + alpha)``.

    With alpha = 1 this is `tf.raw_ops.EluGrad` (and CANN's EluGrad).

    Example:
      >>> y = tf_ops.elu([-1.0, 2.0])
      >>> tf_ops.elu_grad([1.0, 1.0], y).numpy()
      array([0.36787945, 1.        ], dtype=float32)
    """
    return _ops.tf_ops_elu_grad(gradients, outputs, alpha=alpha, name=name)
