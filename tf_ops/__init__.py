"""tf_ops: fused activation ops for TensorFlow, with CPU and CUDA kernels.

Example:
  >>> import tensorflow as tf
  >>> import tf_ops
  >>> x = tf.constant([-1.0, 0.5])
  >>> with tf.GradientTape() as tape:
  ...     tape.watch(x)
  ...     y = tf_ops.elu(x)
  >>> tape.gradient(y, x).numpy()
  array([0.36787945, 1.        ], dtype=float32)
"""

from tf_ops import layers  # Keras layers; registers the activations with Keras
from tf_ops.python import gradients as _gradients  # noqa: F401  registers gradients
from tf_ops.python.activations import (
    elu,
    elu_grad,
    elu_grad_grad,
    gelu,
    gelu_grad,
    gelu_grad_grad,
    hard_swish,
    hard_swish_grad,
    hard_swish_grad_grad,
    leaky_relu,
    leaky_relu_grad,
    leaky_relu_grad_grad,
    mish,
    mish_grad,
    mish_grad_grad,
    swish,
    swish_grad,
    swish_grad_grad,
)
from tf_ops.python.cpu_info import active_cpu_isa
from tf_ops.python.library import BuildInfo, build_info, library_path, load_library

__all__ = [
    "BuildInfo",
    "active_cpu_isa",
    "build_info",
    "elu",
    "elu_grad",
    "elu_grad_grad",
    "gelu",
    "gelu_grad",
    "gelu_grad_grad",
    "hard_swish",
    "hard_swish_grad",
    "hard_swish_grad_grad",
    "layers",
    "leaky_relu",
    "leaky_relu_grad",
    "leaky_relu_grad_grad",
    "library_path",
    "load_library",
    "mish",
    "mish_grad",
    "mish_grad_grad",
    "swish",
    "swish_grad",
    "swish_grad_grad",
]

__version__ = "0.1.0"
