"""Keras 3 losses computed by fused tf_ops kernels.

`SparseCategoricalCrossentropy`: ``keras.losses.SparseCategoricalCrossentropy`` (same
arguments) plus ``label_smoothing`` and ``z_loss``, its loss and gradient in one pass.

Example:
  >>> import keras, tf_ops
  >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
  >>> model.compile("sgd", loss=tf_ops.losses.SparseCategoricalCrossentropy(from_logits=True))

See `tf_ops.python.softmax.losses` for the details.
"""

from tf_ops.python.softmax.losses import LOSSES

globals().update(LOSSES)
__all__ = sorted(LOSSES)
