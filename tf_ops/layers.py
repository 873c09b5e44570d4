"""Keras 3 layers computing the fused tf_ops activations: one per activation
(`LeakyReLU`, `ELU`, `GELU`, `Swish`, `Mish`, `HardSwish`, `CELU`), made from the table
in ``tf_ops/python/activation/table.py``.

Example:
  >>> import keras, tf_ops
  >>> model = keras.Sequential([
  ...     keras.Input((4,)),
  ...     keras.layers.Dense(8), tf_ops.layers.GELU(),
  ...     keras.layers.Dense(8, activation=tf_ops.mish),
  ...     keras.layers.Dense(1)])

See `tf_ops.python.activation.layers` for the details and choices.
"""

from tf_ops.python.fused.dense import DENSE_LAYERS
from tf_ops.python.activation.layers import LAYERS
from tf_ops.python.batch_norm.layers import LAYERS as BATCH_NORM_LAYERS
from tf_ops.python.norm.layers import NORM_LAYERS
from tf_ops.python.rotary.layers import LAYERS as ROTARY_LAYERS
from tf_ops.python.group_norm.layers import LAYERS as GROUP_NORM_LAYERS
from tf_ops.python.softmax.layers import LAYERS as SOFTMAX_LAYERS

globals().update(LAYERS)
globals().update(DENSE_LAYERS)  # Dense, GatedDense: bias + activation fused
globals().update(BATCH_NORM_LAYERS)  # BatchNormalization (+ activation) fused
globals().update(NORM_LAYERS)  # LayerNormalization, RMSNormalization
globals().update(SOFTMAX_LAYERS)  # Softmax: masked, scaled, fused
globals().update(ROTARY_LAYERS)  # RotaryEmbedding: keras-hub's, fused
globals().update(GROUP_NORM_LAYERS)  # GroupNormalization (+ activation) fused
__all__ = sorted([*LAYERS, *DENSE_LAYERS, *BATCH_NORM_LAYERS, *NORM_LAYERS, *SOFTMAX_LAYERS,
                  *ROTARY_LAYERS, *GROUP_NORM_LAYERS])
