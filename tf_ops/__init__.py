"""tf_ops: fused activation ops for TensorFlow, with CPU and CUDA kernels.

Importing it loads the ops and their CPU kernels, and their CUDA kernels where they can
run (a GPU that TensorFlow sees, and an NVIDIA driver new enough for the CUDA runtime they
were built with); `gpu_status()` says which, and why.

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
    gelu,
    gelu_grad,
    hard_swish,
    hard_swish_grad,
    leaky_relu,
    leaky_relu_grad,
    mish,
    mish_grad,
    swish,
    swish_grad,
)
from tf_ops.python.cpu_info import active_cpu_isa
from tf_ops.python.gpu import GpuFallbackWarning, GpuStatus
from tf_ops.python.library import BuildInfo, build_info, gpu_status, library_path, load_library

__all__ = [
    "BuildInfo",
    "GpuFallbackWarning",
    "GpuStatus",
    "active_cpu_isa",
    "build_info",
    "elu",
    "elu_grad",
    "gelu",
    "gelu_grad",
    "gpu_status",
    "hard_swish",
    "hard_swish_grad",
    "layers",
    "leaky_relu",
    "leaky_relu_grad",
    "library_path",
    "load_library",
    "mish",
    "mish_grad",
    "swish",
    "swish_grad",
]

__version__ = "0.1.0"
