"""tf_ops: fused activation ops for TensorFlow, with CPU and CUDA kernels.

The functions (`leaky_relu`, `elu`, `gelu`, `swish`, `mish`, `hard_swish`, ..., each
with its `*_grad` and `*_grad_grad`) and the Keras layers in `tf_ops.layers` are made
from one table, ``tf_ops/python/activation/table.py``, and the ops' C++ registration;
`help(tf_ops.gelu)` shows each signature and docstring.

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
from tf_ops.python.core import family as _family
from tf_ops.python.core.cpu_info import active_cpu_extensions, active_cpu_isa
from tf_ops.python.core.gpu import GpuFallbackWarning, GpuStatus
from tf_ops.python.core.library import BuildInfo, build_info, gpu_status, library_path, load_library
from tf_ops.python.core.portable import is_portable, portable
from tf_ops.python.patch import patch_keras, patch_summary

# Every family's functions (and its gradients, registered on import): the manifests in
# tf_ops/python/<family>/manifest.py (core/family.py).
_FAMILY_EXPORTS = _family.load_exports()
globals().update(_FAMILY_EXPORTS)

__all__ = sorted(
    [
        *_FAMILY_EXPORTS,
        "BuildInfo",
        "GpuFallbackWarning",
        "GpuStatus",
        "active_cpu_extensions",
        "active_cpu_isa",
        "build_info",
        "gpu_status",
        "is_portable",
        "layers",
        "library_path",
        "load_library",
        "patch_keras",
        "patch_summary",
        "portable",
    ]
)

__version__ = "0.1.0"
