"""Keras 3 layers computing the fused tf_ops activations.

`LeakyReLU`, `ELU`, `GELU`, `Swish`, `Mish` and `HardSwish` are drop-in replacements for
Keras's activation layers (same argument names: ``negative_slope``, ``alpha``),
registered with Keras under the package ``"tf_ops"`` so that models using them
save to ``.keras`` and reload, as long as `tf_ops` is imported before loading.

The activation functions themselves (`tf_ops.leaky_relu`, `tf_ops.elu`,
`tf_ops.gelu`, `tf_ops.swish`, `tf_ops.mish`, `tf_ops.hard_swish`) are registered too, so
``keras.layers.Dense(8, activation=tf_ops.gelu)`` saves and reloads.

Choices:
- `LeakyReLU` defaults to ``negative_slope=0.2`` (as `tf.nn.leaky_relu`,
  `keras.activations.leaky_relu` and `tf_ops.leaky_relu`), not the 0.3 of
  `keras.layers.LeakyReLU`: pass the slope explicitly when replacing a Keras
  layer that relied on its default.
- Arguments are checked when the layer is made (`TypeError` for a wrong type,
  `ValueError` for a wrong value), not when it first runs.
- Under a mixed precision policy Keras casts floating inputs to the layer's
  compute dtype (float16 or bfloat16) and the op computes in float32 inside and
  rounds once. Integer and boolean inputs are cast to the compute dtype, as
  `keras.layers.Dense` does.
- The layers need Keras's TensorFlow backend (the ops are TensorFlow ops).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import keras
import tensorflow as tf

from tf_ops.python import activations

PACKAGE = "tf_ops"

# The public activation functions, registered under "tf_ops>gelu" etc. so that
# `Dense(..., activation=tf_ops.gelu)` serializes by name and reloads.
ACTIVATION_FUNCTIONS = (
    activations.leaky_relu,
    activations.elu,
    activations.gelu,
    activations.swish,
    activations.mish,
    activations.hard_swish,
)
for _fn in ACTIVATION_FUNCTIONS:
    keras.saving.register_keras_serializable(package=PACKAGE)(_fn)


def _real(layer: str, name: str, value: Any, minimum: float | None = None) -> float:
    """`value` as a finite float (>= minimum), or a clear TypeError/ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{layer}: `{name}` must be a real number, got {value!r} "
            f"of type {type(value).__name__}."
        )
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{layer}: `{name}` must be finite, got {value}.")
    if minimum is not None and value < minimum:
        raise ValueError(f"{layer}: `{name}` must be >= {minimum}, got {value}.")
    return value


class _FusedActivation(keras.layers.Layer):
    """Shared behaviour: no weights, shape-preserving, masks pass through."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if keras.backend.backend() != "tensorflow":
            raise RuntimeError(
                f"{type(self).__name__} runs TensorFlow ops and needs Keras's "
                f"TensorFlow backend; the backend is {keras.backend.backend()!r} "
                "(set KERAS_BACKEND=tensorflow)."
            )
        self.supports_masking = True

    def _features(self, inputs: tf.Tensor) -> tf.Tensor:
        inputs = tf.convert_to_tensor(inputs)
        if not inputs.dtype.is_floating:
            inputs = tf.cast(inputs, self.compute_dtype)
        return inputs

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return input_shape


@keras.saving.register_keras_serializable(package=PACKAGE)
class LeakyReLU(_FusedActivation):
    """Leaky ReLU layer: ``x if x > 0 else negative_slope * x`` (`tf_ops.leaky_relu`).

    Drop-in for `keras.layers.LeakyReLU`, but the default slope is 0.2 (see the
    module docstring). The slope may be any finite number: the op is a select,
    so slopes above 1 or below 0 mean what the formula says. The deprecated
    Keras alias ``alpha=`` is accepted too.

    Example:
      >>> layer = tf_ops.layers.LeakyReLU(negative_slope=0.1)
      >>> layer(np.array([-2.0, 3.0], "float32")).numpy()
      array([-0.2,  3. ], dtype=float32)
    """

    def __init__(self, negative_slope: float = 0.2, **kwargs: Any) -> None:
        if "alpha" in kwargs:  # Keras 2's name, still accepted by Keras 3
            negative_slope = kwargs.pop("alpha")
        super().__init__(**kwargs)
        self.negative_slope = _real("LeakyReLU", "negative_slope", negative_slope)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return activations.leaky_relu(self._features(inputs), alpha=self.negative_slope)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "negative_slope": self.negative_slope}


@keras.saving.register_keras_serializable(package=PACKAGE)
class ELU(_FusedActivation):
    """ELU layer: ``x if x > 0 else alpha * (exp(x) - 1)`` (`tf_ops.elu`).

    Drop-in for `keras.layers.ELU`. `alpha` must be finite and >= 0 (the
    gradient is computed from the outputs, which a negative alpha makes
    ambiguous). Unlike `keras.layers.ELU`, `alpha` is saved in the config.

    Example:
      >>> tf_ops.layers.ELU(alpha=0.5)(np.array([-1.0, 2.0], "float32")).numpy().round(4)
      array([-0.3161,  2.    ], dtype=float32)
    """

    def __init__(self, alpha: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alpha = _real("ELU", "alpha", alpha, minimum=0.0)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return activations.elu(self._features(inputs), alpha=self.alpha)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "alpha": self.alpha}


@keras.saving.register_keras_serializable(package=PACKAGE)
class GELU(_FusedActivation):
    """GELU layer: ``x * Phi(x)``, or its tanh form when `approximate` (`tf_ops.gelu`).

    Same values as ``keras.activations.gelu(x, approximate)`` in one fused kernel.

    Example:
      >>> tf_ops.layers.GELU()(np.array([-1.0, 1.0], "float32")).numpy().round(4)
      array([-0.1587,  0.8413], dtype=float32)
    """

    def __init__(self, approximate: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(approximate, bool):
            raise TypeError(
                f"GELU: `approximate` must be True or False, got {approximate!r} "
                f"of type {type(approximate).__name__}."
            )
        self.approximate = approximate

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return activations.gelu(self._features(inputs), approximate=self.approximate)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "approximate": self.approximate}


@keras.saving.register_keras_serializable(package=PACKAGE)
class Swish(_FusedActivation):
    """Swish layer: ``x * sigmoid(beta * x)`` (`tf_ops.swish`); beta = 1 is SiLU.

    With the default ``beta=1.0`` it computes ``keras.activations.silu``
    (Keras's ``swish``). `beta` is a fixed, finite number.

    Example:
      >>> tf_ops.layers.Swish(beta=2.0)(np.array([-1.0, 1.0], "float32")).numpy().round(4)
      array([-0.1192,  0.8808], dtype=float32)
    """

    def __init__(self, beta: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.beta = _real("Swish", "beta", beta)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return activations.swish(self._features(inputs), beta=self.beta)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta": self.beta}


@keras.saving.register_keras_serializable(package=PACKAGE)
class Mish(_FusedActivation):
    """Mish layer: ``x * tanh(softplus(x))`` (`tf_ops.mish`), as ``keras.activations.mish``.

    Example:
      >>> tf_ops.layers.Mish()(np.array([-1.0, 1.0], "float32")).numpy().round(4)
      array([-0.3034,  0.8651], dtype=float32)
    """

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return activations.mish(self._features(inputs))

    def get_config(self) -> dict[str, Any]:
        return super().get_config()


@keras.saving.register_keras_serializable(package=PACKAGE)
class HardSwish(_FusedActivation):
    """HardSwish layer: ``x * relu6(x + 3) / 6`` (`tf_ops.hard_swish`), as
    ``keras.activations.hard_swish``.

    Example:
      >>> tf_ops.layers.HardSwish()(np.array([-1.0, 1.0], "float32")).numpy().round(4)
      array([-0.3333,  0.6667], dtype=float32)
    """

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return activations.hard_swish(self._features(inputs))

    def get_config(self) -> dict[str, Any]:
        return super().get_config()


__all__ = ["ELU", "GELU", "HardSwish", "LeakyReLU", "Mish", "Swish"]
