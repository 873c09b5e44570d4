"""Keras Dense layers with the bias and activation fused: `Dense` and `GatedDense`.

`Dense` is `keras.layers.Dense` (same constructor arguments, weights, config and
checkpoints: a checkpoint loads into either) whose ``activation(x @ kernel + bias)``
runs as ``x @ kernel`` then one fused ``TfOps>Bias{Act}`` op, forward and backward
(the backward gives the bias gradient in the same pass), when its activation is a
tf_ops function (``activation=tf_ops.gelu`` or ``"tf_ops>gelu"``). Any other activation,
no bias, or a quantized layer runs Keras's own ``call``.

`GatedDense` is the gated feed-forward projection of transformer FFNs: a Dense
projection to ``2 * units`` followed by the fused gate ``f(a) * b`` with the bias
(`tf_ops.gated`: one ``TfOps>BiasGated{Act}`` op forward and one grad op backward),
so ``GatedDense(units, "swish")`` is SwiGLU's first layer and ``"gelu"`` GeGLU's.

Both run under Keras mixed precision (the fused ops compute half and bfloat16 in
float32), in ``jit_compile`` models (the ops' XLA lowerings) and under
`tf_ops.portable()` (TensorFlow built-in ops), and serialise with the package name
``"tf_ops"``.
"""

from __future__ import annotations

import math
from typing import Any

import keras
import tensorflow as tf

from tf_ops.python.activation import functions as activations
from tf_ops.python.fused import functions as fused

PACKAGE = "tf_ops"

# The public tf_ops activation functions -> their table entries.
_FUSABLE = {activations.FUNCTIONS[entry.function]: entry for entry in fused.GATES.values()}


def bias_add(x, bias):
    """``x + bias`` for a bias of x's trailing shape, as one ``BiasAdd`` over x viewed
    as [rows, bias size] (its gradient: one ``BiasAddGrad``); Keras's add otherwise.

    Keras's TensorFlow ``add`` already takes ``BiasAdd`` for a bias that squeezes to a
    vector (a Dense's); a bias of two or more axes, as EinsumDense's [heads, head_dim]
    in MultiHeadAttention's query, key and value projections, gets a broadcasting
    ``AddV2``, whose gradient is a generic reduction: forward and backward together about
    1.5x BiasAdd's on [1024, 512]. The same sums in another order: float32 rounding.
    """
    n = len(bias.shape)
    shape = x.shape
    if (shape.rank is None or shape.rank <= n or None in shape[-n:]
            or tuple(shape[-n:]) != tuple(bias.shape)):
        return keras.ops.add(x, bias)
    width = math.prod(bias.shape)
    out = tf.nn.bias_add(tf.reshape(x, [-1, width]), tf.reshape(bias, [width]))
    return tf.reshape(out, tf.shape(x))


def bias_activation_call(layer: keras.layers.Dense, inputs, function: str, attrs: dict):
    """``function(inputs @ kernel + bias, **attrs)`` with the bias and the tf_ops
    activation `function` (``"gelu"``) in one op after the matmul: what `Dense`
    computes, for any Keras Dense `layer` with a bias (Keras's own too, under
    `tf_ops.patch_keras()`)."""
    x = keras.ops.matmul(inputs, layer.kernel)
    bias = keras.ops.cast(layer.bias, x.dtype)
    return activations.FUNCTIONS[function](x, bias=bias, **attrs)


@keras.saving.register_keras_serializable(package=PACKAGE)
class Dense(keras.layers.Dense):
    """`keras.layers.Dense` with ``activation(x @ kernel + bias)`` fused after the
    matmul when the activation is a tf_ops function.

    Same arguments, weights and config as `keras.layers.Dense`.

    Example:
      >>> layer = tf_ops.layers.Dense(3, activation=tf_ops.gelu)
      >>> layer(np.ones((2, 4), "float32")).shape
      TensorShape([2, 3])
    """

    def _fused_entry(self):
        if self.bias is None or getattr(self, "quantization_mode", None) is not None:
            return None
        return _FUSABLE.get(self.activation)

    def call(self, inputs, training=None):
        entry = self._fused_entry()
        if entry is None:
            return super().call(inputs, training=training)
        return bias_activation_call(self, inputs, entry.function, {})

    def quantize(self, mode=None, type_check=True, config=None):
        """Keras's quantization (int8, int4, float8, GPTQ, AWQ): Keras refuses it for
        subclasses of its Dense (which may compute something else); this one computes
        what Keras's Dense does, and a quantized layer runs Keras's own call. Its own
        subclasses are refused as Keras refuses Dense's."""
        if type_check and type(self) is not Dense:
            raise self._not_implemented_error(self.quantize)
        return super().quantize(mode, type_check=False, config=config)


@keras.saving.register_keras_serializable(package=PACKAGE)
class GatedDense(keras.layers.Dense):
    """A gated feed-forward projection: ``f(a) * b`` with ``[a, b]`` the two halves of
    ``x @ kernel + bias`` (kernel ``[input_dim, 2 * units]``), the gate fused.

    Args:
      units: the output's last dimension (the projection has ``2 * units``).
      activation: a tf_ops activation name: ``"swish"`` (SwiGLU), ``"gelu"`` (GeGLU),
        ``"sigmoid"`` (GLU), ...
      activation_attrs: the activation's attributes, e.g. ``{"approximate": True}``.
      **kwargs: `keras.layers.Dense`'s other arguments (``use_bias``,
        ``kernel_initializer``, ...).

    Example:
      >>> layer = tf_ops.layers.GatedDense(3, activation="swish")
      >>> layer(np.ones((2, 4), "float32")).shape
      TensorShape([2, 3])
    """

    def __init__(self, units: int, activation: str = "swish",
                 activation_attrs: dict | None = None, **kwargs: Any) -> None:
        if activation not in fused.GATES:
            raise ValueError(
                f"GatedDense: activation must be one of {sorted(fused.GATES)}, got {activation!r}"
            )
        super().__init__(2 * int(units), activation=None, **kwargs)
        self.gated_units = int(units)
        self.gate = activation
        self.activation_attrs = dict(activation_attrs or {})
        fused._attrs_of(fused.GATES[activation], self.activation_attrs)

    def call(self, inputs, training=None):
        x = keras.ops.matmul(inputs, self.kernel)
        bias = None if self.bias is None else keras.ops.cast(self.bias, x.dtype)
        return fused.gated(x, self.gate, bias=bias, **self.activation_attrs)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.gated_units,)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(units=self.gated_units, activation=self.gate,
                      activation_attrs=dict(self.activation_attrs))
        return config


DENSE_LAYERS: dict[str, type] = {"Dense": Dense, "GatedDense": GatedDense}
