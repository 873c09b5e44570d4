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
from tf_ops.python import gradients as _gradients  # noqa: F401  registers gradients
from tf_ops.python.fused import gradients as _fused_gradients  # noqa: F401  and the fused ops'
from tf_ops.python.norm import gradients as _norm_gradients  # noqa: F401  and the norms'
from tf_ops.python.norm.functions import FUNCTIONS as _NORM_FUNCTIONS
from tf_ops.python.softmax import gradients as _softmax_gradients  # noqa: F401  and softmax's
from tf_ops import losses  # Keras losses: SparseCategoricalCrossentropy
from tf_ops.python.softmax.functions import FUNCTIONS as _SOFTMAX_FUNCTIONS
from tf_ops.python.softmax.linear_cross_entropy import linear_cross_entropy
from tf_ops.python.softmax.causal_lm import LinearCrossEntropyCausalLM, head_cross_entropy
from tf_ops.python.activation.functions import FUNCTIONS as _FUNCTIONS
from tf_ops.python.fused.functions import FUNCTIONS as _FUSED_FUNCTIONS
from tf_ops.python.batch_norm import gradients as _batch_norm_gradients  # noqa: F401
from tf_ops.python.batch_norm.functions import FUNCTIONS as _BATCH_NORM_FUNCTIONS
from tf_ops.python.rotary import gradients as _rotary_gradients  # noqa: F401
from tf_ops.python.rotary.functions import FUNCTIONS as _ROTARY_FUNCTIONS
from tf_ops.python.group_norm import gradients as _group_norm_gradients  # noqa: F401
from tf_ops.python.group_norm.functions import FUNCTIONS as _GROUP_NORM_FUNCTIONS
from tf_ops.python.core.cpu_info import active_cpu_isa
from tf_ops.python.core.gpu import GpuFallbackWarning, GpuStatus
from tf_ops.python.core.library import BuildInfo, build_info, gpu_status, library_path, load_library
from tf_ops.python.core.portable import is_portable, portable
from tf_ops.python.patch import patch_keras, patch_summary

globals().update(_FUNCTIONS)
globals().update(_FUSED_FUNCTIONS)
globals().update(_NORM_FUNCTIONS)  # layer_norm, rms_norm
globals().update(_SOFTMAX_FUNCTIONS)
globals().update(_BATCH_NORM_FUNCTIONS)
globals().update(_ROTARY_FUNCTIONS)  # rotary_embedding, rotary_embedding_grad
globals().update(_GROUP_NORM_FUNCTIONS)  # group_norm

__all__ = sorted(
    [
        *_FUNCTIONS,
        *_FUSED_FUNCTIONS,
        *_NORM_FUNCTIONS,
        *_SOFTMAX_FUNCTIONS,
        "linear_cross_entropy",
        "head_cross_entropy",
        "LinearCrossEntropyCausalLM",
        "losses",
        *_BATCH_NORM_FUNCTIONS,
        *_ROTARY_FUNCTIONS,
        *_GROUP_NORM_FUNCTIONS,
        "BuildInfo",
        "GpuFallbackWarning",
        "GpuStatus",
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
