"""`Softmax`: ``keras.layers.Softmax`` computed by the fused ops (public as
``tf_ops.layers.Softmax``).

Same arguments (``axis``, an int or a list), config, mask semantics (a mask broadcast to
the inputs, True or > 0.5 keeps; masked positions 0; a fully masked row all zeros) and
errors for a mask that does not broadcast. A list of several axes runs Keras's own
formula (the ops work on one axis).
"""

from __future__ import annotations

from typing import Any, Callable

import keras
import tensorflow as tf
from tf_ops.python.softmax import functions as fn


def softmax_call(layer: keras.layers.Softmax, inputs, mask, keras_call: Callable[..., Any]):
    """What `Softmax.call` computes, for any Keras softmax `layer` (this class's, or
    Keras's own under `tf_ops.patch_keras()`); `keras_call` (Keras's own call) for
    several axes."""
    axis = layer.axis
    if isinstance(axis, (tuple, list)):
        if len(axis) > 1:
            return keras_call(inputs, mask=mask)
        axis = axis[0]
    if mask is not None:
        if len(mask.shape) > len(inputs.shape):
            raise ValueError(
                "The `mask` must be broadcastable to `inputs` and must not have more "
                f"dimensions. Received: inputs.shape={inputs.shape}, mask.shape={mask.shape}")
        for m_dim, i_dim in zip(mask.shape[::-1], inputs.shape[::-1]):
            if m_dim is not None and i_dim is not None and m_dim != 1 and m_dim != i_dim:
                raise ValueError(
                    "The `mask` must be broadcastable to `inputs`. Each mask dimension "
                    "must be 1 or match the corresponding input dimension. Received: "
                    f"inputs.shape={inputs.shape}, mask.shape={mask.shape}")
    return fn.softmax(inputs, axis=axis, mask=mask)


@keras.saving.register_keras_serializable(package="tf_ops")
class Softmax(keras.layers.Softmax):
    """``keras.layers.Softmax`` over the fused softmax (``tf_ops.softmax``), mask included.

    Example:
      >>> import numpy as np, tf_ops
      >>> layer = tf_ops.layers.Softmax()
      >>> layer(np.array([[1.0, 2.0, 1.0]]), mask=np.array([[True, True, False]])).numpy()
      array([[0.26894143, 0.7310586 , 0.        ]], dtype=float32)
    """

    def call(self, inputs, mask=None):
        return softmax_call(self, inputs, mask, super().call)


LAYERS = {"Softmax": Softmax}
