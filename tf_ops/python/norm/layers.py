"""Keras layers running the fused normalisation ops: `LayerNormalization` and
`RMSNormalization`.

Each subclasses the Keras layer it replaces (``keras.layers.LayerNormalization``,
``keras.layers.RMSNormalization``): the same constructor arguments, weights (``gamma``,
``beta``; ``scale``), config and checkpoints (a checkpoint loads into either), only
``call`` differs. They run under Keras mixed precision (half or bfloat16 inputs read
directly, float32 statistics and parameters, no cast kernels for the inputs), in
``jit_compile`` models (the ops' XLA lowerings) and under `tf_ops.portable()` (Keras's
own math in TensorFlow built-in ops), and serialise with the package name ``"tf_ops"``.

The residual form: ``layer(x, residual=r)`` returns ``(h, y)`` with ``h = x + r`` and
``y = layer(h)``, from one fused pass forward and one backward: the pre-norm block
``h = h + attn(norm(h))`` becomes ``h, y = norm(h_prev, residual=attn_out)``.

``LayerNormalization(rms_scaling=True)`` (Keras's deprecated variance scaling, which
is not RMS normalisation) runs Keras's own ``call``.
"""

from __future__ import annotations

from typing import Any, Callable

import keras

from tf_ops.python.norm import functions as norm

PACKAGE = "tf_ops"


def _check_axis(axis, input_shape) -> None:
    """A ValueError naming the shape for an axis out of range (Keras's layers raise an
    IndexError from build)."""
    norm.normalize_axes(axis, len(input_shape), tuple(input_shape))


def _residual_spec(self, inputs, residual):
    spec = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
    if residual is None:
        return spec
    return keras.KerasTensor(inputs.shape, dtype=inputs.dtype), spec


def layer_norm_call(layer: keras.layers.LayerNormalization, inputs, residual,
                    keras_call: Callable[..., Any]):
    """What `LayerNormalization.call` computes, for any Keras layer-norm `layer` (this
    class's, or Keras's own under `tf_ops.patch_keras()`); `keras_call` (Keras's own
    call) for ``rms_scaling=True``."""
    if layer.rms_scaling:
        if residual is None:
            return keras_call(inputs)
        h = inputs + keras.ops.cast(residual, inputs.dtype)
        return h, keras_call(h)
    out = norm.layer_norm(inputs, layer.gamma, layer.beta, axis=layer.axis,
                          epsilon=layer.epsilon, residual=residual)
    if residual is None:
        return keras.ops.cast(out, layer.compute_dtype)
    return out[0], keras.ops.cast(out[1], layer.compute_dtype)


def rms_norm_call(layer: keras.layers.RMSNormalization, x, residual=None):
    """What `RMSNormalization.call` computes, for any Keras RMS-norm `layer`."""
    return norm.rms_norm(x, layer.scale, axis=layer.axis, epsilon=layer.epsilon,
                         residual=residual)


@keras.saving.register_keras_serializable(package=PACKAGE)
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization`, fused forward and backward.

    Same arguments, weights and config as the Keras layer; call it as
    ``layer(x)``, or ``layer(x, residual=r)`` for ``(x + r, layer(x + r))``.

    Example:
      >>> layer = tf_ops.layers.LayerNormalization()
      >>> layer(np.array([[1.0, 2.0, 3.0]], "float32")).numpy().round(4)
      array([[-1.2238,  0.    ,  1.2238]], dtype=float32)
      >>> h, y = layer(np.ones((1, 3), "float32"), residual=np.eye(1, 3, dtype="float32"))
      >>> h.numpy()
      array([[2., 1., 1.]], dtype=float32)
    """

    def build(self, input_shape):
        _check_axis(self.axis, input_shape)
        super().build(input_shape)

    def call(self, inputs, residual=None):
        return layer_norm_call(self, inputs, residual, super().call)

    def compute_output_spec(self, inputs, residual=None):
        return _residual_spec(self, inputs, residual)


@keras.saving.register_keras_serializable(package=PACKAGE)
class RMSNormalization(keras.layers.RMSNormalization):
    """`keras.layers.RMSNormalization`, fused forward and backward.

    Same arguments (``axis``, ``epsilon``), weight (``scale``) and config as the Keras
    layer; ``layer(x, residual=r)`` returns ``(x + r, layer(x + r))``.

    Example:
      >>> layer = tf_ops.layers.RMSNormalization()
      >>> layer(np.array([[3.0, 4.0]], "float32")).numpy().round(4)
      array([[0.8485, 1.1314]], dtype=float32)
    """

    def build(self, input_shape):
        _check_axis(self.axis, input_shape)
        super().build(input_shape)

    def call(self, x, residual=None):
        return rms_norm_call(self, x, residual)

    def compute_output_spec(self, x, residual=None):
        return _residual_spec(self, x, residual)


NORM_LAYERS: dict[str, type] = {"LayerNormalization": LayerNormalization,
                                "RMSNormalization": RMSNormalization}
