"""`SparseCategoricalCrossentropy`: ``keras.losses.SparseCategoricalCrossentropy`` over
the fused cross-entropy op (public as ``tf_ops.losses.SparseCategoricalCrossentropy``),
with label smoothing and z-loss added.

Keras's arguments and behaviour: ``from_logits`` (False: ``y_pred`` are probabilities,
normalised and clipped to Keras's epsilon, as Keras does), ``ignore_class`` (those
labels count neither in the loss nor in the mean: the loss carries Keras's mask, so
``reduction`` and ``sample_weight`` treat it as Keras's own), ``reduction``, ``axis``
(the class axis: the last, as Keras's TensorFlow backend requires; another raises
Keras's ValueError), ``name``, ``dtype``; ``y_true`` of ``y_pred``'s shape without its last axis, or with a last axis
of 1. Serialisable (``get_config``, ``keras.saving``).
"""

from __future__ import annotations

from typing import Optional

import keras
import tensorflow as tf
from keras.src import backend  # set_keras_mask: what Keras's own loss uses
from tf_ops.python.softmax import functions as fn


@keras.saving.register_keras_serializable(package="tf_ops")
class SparseCategoricalCrossentropy(keras.losses.Loss):
    """Sparse categorical cross-entropy, fused: loss and gradient in one pass.

    ``label_smoothing`` smooths the one-hot target as
    ``keras.losses.CategoricalCrossentropy(label_smoothing=...)``; ``z_loss`` adds
    ``z_loss * logsumexp(logits)**2`` per sample (PaLM).

    Example:
      >>> import numpy as np, tf_ops
      >>> loss = tf_ops.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=-1)
      >>> round(float(loss(np.array([1, -1]), np.array([[0.0, 0.0], [5.0, 1.0]]))), 6)
      0.693147
    """

    def __init__(self, from_logits: bool = False, ignore_class: Optional[int] = None,
                 reduction: str = "sum_over_batch_size", axis: int = -1,
                 name: str = "sparse_categorical_crossentropy", dtype=None,
                 label_smoothing: float = 0.0, z_loss: float = 0.0):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.axis = axis
        self.from_logits = from_logits
        self.ignore_class = ignore_class
        self.label_smoothing = float(label_smoothing)
        self.z_loss = float(z_loss)

    def call(self, y_true, y_pred):
        y_pred = tf.convert_to_tensor(y_pred)
        if not y_pred.dtype.is_floating:
            y_pred = tf.cast(y_pred, self.dtype or "float32")
        if self.axis != -1 and self.axis != len(y_pred.shape) - 1:
            # Keras's TensorFlow backend's own error, word for word.
            raise ValueError(f"Only axis=-1 is currently supported. Received: axis={self.axis}")
        y_true = tf.convert_to_tensor(y_true)
        if (y_true.shape.rank is not None and y_pred.shape.rank is not None
                and y_true.shape.rank == y_pred.shape.rank and y_true.shape[-1] == 1):
            y_true = tf.squeeze(y_true, -1)
        labels = tf.cast(y_true, tf.int64)
        logits = y_pred
        if not self.from_logits:
            probs = y_pred / tf.reduce_sum(y_pred, axis=-1, keepdims=True)
            eps = backend.epsilon()
            logits = tf.math.log(tf.clip_by_value(probs, eps, 1.0 - eps))
        classes = tf.shape(logits)[-1]
        ignore = fn.IGNORE_NONE if self.ignore_class is None else int(self.ignore_class)
        losses = fn.sparse_softmax_cross_entropy(
            tf.reshape(logits, [-1, classes]), tf.reshape(labels, [-1]),
            label_smoothing=self.label_smoothing, ignore_index=ignore, z_loss=self.z_loss)
        losses = tf.reshape(losses, tf.shape(labels))
        if self.ignore_class is not None:
            valid = tf.not_equal(labels, ignore)
            backend.set_keras_mask(losses, mask=valid)
        return losses

    def get_config(self):
        config = super().get_config()
        config.update(from_logits=self.from_logits, ignore_class=self.ignore_class,
                      axis=self.axis,
                      label_smoothing=self.label_smoothing, z_loss=self.z_loss)
        return config


LOSSES = {"SparseCategoricalCrossentropy": SparseCategoricalCrossentropy}
