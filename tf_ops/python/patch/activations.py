"""Which tf_ops activation a Keras activation is: a function (``keras.activations.gelu``,
keras-hub's ``gelu_approximate``), an activation layer (``Activation``, ``ReLU``,
``LeakyReLU``, ``ELU``), or None where tf_ops has no kernel computing the same.

`tf_ops.patch_keras()` asks this when it fuses an activation into the op before it
(``Dense(activation=...)``, an activation layer after ``BatchNormalization`` or
``Dense``); the names and functions themselves are resolved once, in
``activation/resolver.py``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable

import keras

from tf_ops.python.activation.resolver import ActivationSpec, resolve

# Functions of other packages that are tf_ops activations: function -> (name, attributes).
# keras_hub.py adds keras-hub's when keras-hub is importable.
ALIASES: dict[Callable, tuple[str, dict]] = {}


def of_function(fn: Any) -> ActivationSpec | None:
    """The tf_ops activation that the Keras activation function `fn` computes, with
    its attributes; None for one tf_ops has no kernel for (``tanh``, ``softmax``, a
    user's function). ``linear`` is the identity (``spec.entry is None``).

    Example:
      >>> of_function(keras.activations.relu).op_attrs["alpha"]
      0.0
    """
    if fn is None:
        return resolve(None)
    alias = ALIASES.get(fn)
    if alias is not None:
        return resolve(alias[0], **alias[1])
    try:
        return resolve(fn)
    except (ValueError, TypeError):
        return None


ACTIVATION_CALL = "keras.src.layers.activations.activation:Activation.call"


def make_activation_call(original: Callable) -> Callable:
    """``Activation.call`` for a function of another package that is a tf_ops activation
    (`ALIASES`: keras-hub's ``gelu_approximate``, CLIP's ``quick_gelu``): its kernel,
    which Keras's backend functions (patched themselves) never reach. Any other
    activation runs Keras's call."""

    def call(self, inputs):
        from tf_ops.python.patch.keras_layers import floating

        alias = ALIASES.get(self.activation)
        if alias is None or not floating(inputs):
            return original(self, inputs)
        return resolve(alias[0], **alias[1]).apply(inputs)

    return call


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def of_layer(layer: keras.layers.Layer) -> ActivationSpec | None:
    """The tf_ops activation an activation layer computes (its class's own ``call``
    only: a subclass that overrides it is not one), or None.

    Example:
      >>> of_layer(keras.layers.ReLU()).name, of_layer(keras.layers.Activation("swish")).name
      ('leaky_relu', 'swish')
    """
    kind = type(layer)
    if isinstance(layer, keras.layers.Activation) and kind.call is keras.layers.Activation.call:
        spec = of_function(layer.activation)
        return spec if spec is not None and spec.entry is not None else None
    if isinstance(layer, keras.layers.ReLU) and kind.call is keras.layers.ReLU.call:
        slope = _number(layer.negative_slope)
        if _number(layer.threshold) != 0.0 or slope is None:
            return None
        if layer.max_value is None:
            return resolve("leaky_relu", alpha=slope)
        if _number(layer.max_value) == 6.0 and slope == 0.0:  # Keras runs relu6 for it
            return resolve("relu6")
        return None
    if isinstance(layer, keras.layers.LeakyReLU) and kind.call is keras.layers.LeakyReLU.call:
        slope = _number(layer.negative_slope)
        return None if slope is None else resolve("leaky_relu", alpha=slope)
    if isinstance(layer, keras.layers.ELU) and kind.call is keras.layers.ELU.call:
        alpha = _number(layer.alpha)
        return resolve("elu", alpha=alpha) if alpha is not None and alpha >= 0 else None
    return None


def display_name(spec: ActivationSpec | None) -> str:
    """How reports name an activation: ``relu`` for ``leaky_relu`` with alpha 0."""
    if spec is None:
        return "?"
    if spec.name == "leaky_relu" and dict(spec.attrs).get("alpha") == 0.0:
        return "relu"
    return spec.name
