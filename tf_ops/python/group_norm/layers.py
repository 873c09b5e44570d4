"""`tf_ops.layers.GroupNormalization`: `keras.layers.GroupNormalization` computed by
the fused group-norm ops, plus an ``activation=`` argument that fuses the activation
that follows it (keras-hub's VAE blocks run GroupNorm then SiLU).

A subclass of Keras's layer: the same constructor arguments, weights (``gamma``,
``beta``, created by Keras's own ``build``, with its checks of the groups), config
(plus ``activation``) and checkpoints; only ``call`` differs. Inputs are not autocast
(Keras's layer sets ``autocast = False``): half, bfloat16, float32 and float64 inputs
are read as they come, with float32 statistics (float64 for float64), and the output is
cast to the layer's compute dtype, as Keras's is. jit_compile and `tf_ops.portable()`
build Keras's own math from TensorFlow built-ins.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tf_ops.python.activation.resolver import ActivationSpec, resolve
from tf_ops.python.group_norm import functions

PACKAGE = "tf_ops"
# The attribute a graph tensor made by `fused_call` without an activation carries:
# (layer, inputs), for an activation after it to fuse (`patch.fuse_after`).
MARK = "_tf_ops_group_norm"


def fused_call(layer: keras.layers.GroupNormalization, inputs, spec: ActivationSpec):
    """What `GroupNormalization.call` computes, for any Keras group-norm `layer` (this
    class's, or Keras's own under `tf_ops.patch_keras()`), with the activation `spec`
    after it."""
    x = tf.convert_to_tensor(inputs)
    u = functions.param_dtype(x.dtype)
    gamma = tf.cast(layer.gamma, u) if layer.scale else None
    beta = tf.cast(layer.beta, u) if layer.center else None
    y = functions.group_norm(x, gamma, beta, groups=layer.groups, epsilon=layer.epsilon,
                             axis=layer.axis, activation=spec)
    y = tf.cast(y, layer.compute_dtype) if y.dtype != layer.compute_dtype else y
    if spec.entry is None and not tf.executing_eagerly():
        try:
            setattr(y, MARK, (layer, inputs))
        except AttributeError:
            pass
    return y


@keras.saving.register_keras_serializable(package=PACKAGE)
class GroupNormalization(keras.layers.GroupNormalization):
    """`keras.layers.GroupNormalization` by fused ops, with an optional fused
    activation (``activation="silu"``, ``tf_ops.gelu``, ...).

    Example:
      >>> layer = tf_ops.layers.GroupNormalization(groups=2, activation="silu")
      >>> y = layer(np.arange(8, dtype="float32").reshape(1, 2, 4))
      >>> y.shape, [w.name for w in layer.weights]
      (TensorShape([1, 2, 4]), ['gamma', 'beta'])
    """

    def __init__(self, groups: int = 32, axis: int = -1, epsilon: float = 1e-3,
                 center: bool = True, scale: bool = True, activation: Any = None, **kwargs):
        super().__init__(groups=groups, axis=axis, epsilon=epsilon, center=center,
                         scale=scale, **kwargs)
        self._activation_spec = resolve(activation)

    @property
    def activation(self) -> str:
        return self._activation_spec.name

    def call(self, inputs):
        return fused_call(self, inputs, self._activation_spec)

    def get_config(self) -> dict:
        config = super().get_config()
        config["activation"] = self._activation_spec.config()
        return config


LAYERS = {"GroupNormalization": GroupNormalization}
