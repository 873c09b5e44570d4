"""`tf_ops.layers.BatchNormalization`: `keras.layers.BatchNormalization` computed by
the fused batch-norm ops, plus an ``activation=`` argument that fuses the activation
that follows it.

A subclass of Keras's layer: the same constructor arguments, weights (gamma, beta,
moving_mean, moving_variance, created by Keras's own ``build``), config (plus
``activation``) and checkpoints (a checkpoint loads into either class). Only ``call``
differs:
- training (``training=True`` and ``trainable``): one ``TfOps>BatchNormTraining`` op
  gives y and the batch mean and biased variance, and the moving averages are updated
  as Keras updates them, ``m * momentum + batch * (1 - momentum)``; the backward is one
  ``TfOps>BatchNormTrainingGrad``;
- otherwise (inference, or ``trainable=False``): ``TfOps>BatchNormInference`` with the
  moving statistics, whose backward (fine-tuning with frozen statistics) is one
  ``TfOps>BatchNormInferenceGrad``;
- ``synchronized=True`` under a tf.distribute strategy with more than one replica:
  the statistics of the global batch by the fused ops, one all-reduce forward and one
  backward (`synchronized.py`);
- Keras's own ``call`` (then the activation, unfused) for what the ops do not cover:
  a mask (Keras's weighted moments) and ``renorm=True``.
Half and bfloat16 inputs (mixed precision) are read directly by the ops, which compute
in float32 as Keras's cast does; jit_compile and `tf_ops.portable()` build Keras's
own math from TensorFlow built-ins. An empty batch behaves as Keras's layer: the batch
statistics, and so the moving averages after a training step, are NaN.
"""

from __future__ import annotations

from typing import Any, Callable

import keras
import tensorflow as tf

from tf_ops.python.batch_norm import functions, synchronized
from tf_ops.python.activation.resolver import ActivationSpec, resolve

PACKAGE = "tf_ops"


def _keras_path(layer: keras.layers.BatchNormalization, mask, replicas) -> bool:
    """Whether `layer` needs Keras's own call: what the fused ops leave to it (a mask:
    weighted moments; renorm), and synchronized statistics where the fused ops would
    be composites anyway (portable mode, XLA without the lowerings)."""
    if mask is not None or getattr(layer, "renorm", False):
        return True
    return replicas is not None and not synchronized.fused_ops_available()


def fused_call(layer: keras.layers.BatchNormalization, inputs, training, mask,
               spec: ActivationSpec, keras_call: Callable[..., Any]):
    """What `BatchNormalization.call` computes, for any Keras batch-norm `layer` (this
    class's, or Keras's own under `tf_ops.patch_keras()`): the fused ops with the
    activation `spec`, and the moving averages updated as Keras does; `keras_call`
    (Keras's own call) followed by the activation for what the ops do not cover."""
    training = bool(training) and layer.trainable
    replicas = (synchronized.replica_context_to_synchronize()
                if layer.synchronized and training else None)
    if _keras_path(layer, mask, replicas):
        outputs = keras_call(inputs, training=training, mask=mask)
        return spec.apply(outputs)
    x = tf.convert_to_tensor(inputs)
    u = functions.channel_dtype(x.dtype)
    gamma = tf.cast(layer.gamma, u) if layer.scale else None
    beta = tf.cast(layer.beta, u) if layer.center else None
    if training:
        if replicas is not None:
            y, mean, variance = synchronized.batch_norm_synchronized(
                x, gamma, beta, layer.moving_mean, replicas, axis=layer.axis,
                epsilon=layer.epsilon, activation=spec)
        else:
            y, mean, variance = functions.batch_norm(
                x, gamma, beta, axis=layer.axis, epsilon=layer.epsilon, activation=spec)
        moving_mean = tf.cast(layer.moving_mean, u)
        moving_variance = tf.cast(layer.moving_variance, u)
        layer.moving_mean.assign(tf.cast(
            moving_mean * layer.momentum + mean * (1.0 - layer.momentum),
            layer.moving_mean.dtype))
        layer.moving_variance.assign(tf.cast(
            moving_variance * layer.momentum + variance * (1.0 - layer.momentum),
            layer.moving_variance.dtype))
    else:
        y = functions.batch_norm_inference(
            x, layer.moving_mean, layer.moving_variance, gamma, beta, axis=layer.axis,
            epsilon=layer.epsilon, activation=spec)
    return tf.cast(y, layer.compute_dtype) if y.dtype != layer.compute_dtype else y


@keras.saving.register_keras_serializable(package=PACKAGE)
class BatchNormalization(keras.layers.BatchNormalization):
    """`keras.layers.BatchNormalization` by fused ops, with an optional fused
    activation (``activation="swish"``, ``tf_ops.gelu``, ``"relu"``, ...).

    Example:
      >>> layer = tf_ops.layers.BatchNormalization(activation="swish")
      >>> y = layer(np.ones((4, 3), "float32"), training=True)
      >>> y.shape, [w.name for w in layer.weights]
      (TensorShape([4, 3]), ['gamma', 'beta', 'moving_mean', 'moving_variance'])
    """

    def __init__(self, axis: int = -1, momentum: float = 0.99, epsilon: float = 1e-3,
                 center: bool = True, scale: bool = True, activation: Any = None,
                 **kwargs):
        if not 0.0 <= float(momentum) <= 1.0:
            raise ValueError(f"BatchNormalization: momentum must be in [0, 1], got {momentum}")
        if not float(epsilon) > 0.0 or float(epsilon) == float("inf"):
            raise ValueError(f"BatchNormalization: epsilon must be finite and > 0, got {epsilon}")
        super().__init__(axis=axis, momentum=momentum, epsilon=epsilon, center=center,
                         scale=scale, **kwargs)
        self._activation_spec = resolve(activation)

    @property
    def activation(self):
        return self._activation_spec.name

    def call(self, inputs, training=None, mask=None):
        return fused_call(self, inputs, training, mask, self._activation_spec, super().call)

    def get_config(self):
        config = super().get_config()
        config["activation"] = self._activation_spec.config()
        return config


LAYERS = {"BatchNormalization": BatchNormalization}
