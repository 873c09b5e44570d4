"""Keras 3 layers computing the tf_ops ops: one per activation (`LeakyReLU`, `ELU`,
`GELU`, `Swish`, `Mish`, `HardSwish`, `CELU`, made from the table in
``tf_ops/python/activation/table.py``), and each family's own (`Dense`,
`BatchNormalization`, `LayerNormalization`, `Softmax`, `RotaryEmbedding`, ...): what the
families' manifests list.

Example:
  >>> import keras, tf_ops
  >>> model = keras.Sequential([
  ...     keras.Input((4,)),
  ...     keras.layers.Dense(8), tf_ops.layers.GELU(),
  ...     keras.layers.Dense(8, activation=tf_ops.mish),
  ...     keras.layers.Dense(1)])

See `tf_ops.python.activation.layers` for the details and choices.
"""

from tf_ops.python.activation.layers import LAYERS  # the activations' (tests read them)
from tf_ops.python.core import family as _family

# Every family's layers: the manifests in tf_ops/python/<family>/manifest.py.
_LAYERS = _family.load_layers()
globals().update(_LAYERS)
__all__ = sorted(_LAYERS)
