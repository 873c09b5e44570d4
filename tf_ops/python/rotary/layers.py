"""The Keras layer running the fused rotary embedding: `RotaryEmbedding`, a drop-in for
keras-hub's ``keras_hub.layers.RotaryEmbedding`` (keras-hub is never imported here).

Same constructor arguments, call arguments (``start_index``, ``positions``), config keys
(a config saved from keras-hub's layer builds this one and the other way round) and
values; no weights. It runs under Keras mixed precision (half or bfloat16 inputs read
directly, angles in float32, one rounding), in ``jit_compile`` models (the ops' XLA
lowerings) and under `tf_ops.portable()` (keras-hub's math in TensorFlow built-in ops),
and serialises with the package name ``"tf_ops"``.

`rotary_kwargs` gives the `tf_ops.rotary_embedding` arguments that compute a layer's
call, for this layer and for keras-hub's ``RotaryEmbedding`` and
``LlamaRotaryEmbedding`` (`tf_ops.patch_keras()` swaps their implementation).

Differences from keras-hub's layer, by choice: an unknown ``rope_type`` and a
non-positive ``max_wavelength`` or ``scaling_factor`` raise ``ValueError`` when the
layer is made (keras-hub treats other strings as no scaling and computes NaN or inf);
16-bit inputs are rotated in float32 and rounded once, where keras-hub rounds the
cosines and sines to the input's dtype and multiplies and adds in it (so bfloat16 and
float16 results differ from keras-hub's by its roundings, a few ulps).
"""

from __future__ import annotations

import math

import keras

from tf_ops.python.rotary import functions as rotary

PACKAGE = "tf_ops"

_KERAS_HUB_ROTARY = "keras_hub.src.layers.modeling.rotary_embedding.RotaryEmbedding"
_KERAS_HUB_LLAMA = "keras_hub.src.models.llama.llama_rotary_embedding.LlamaRotaryEmbedding"


@keras.saving.register_keras_serializable(package=PACKAGE)
class RotaryEmbedding(keras.layers.Layer):
    """keras-hub's ``RotaryEmbedding``, fused forward and backward
    (`tf_ops.rotary_embedding`).

    Args: as keras-hub's: ``max_wavelength=10000``, ``scaling_factor=1.0``,
    ``rope_type="linear"`` ("linear", "dynamic" or "yarn"), ``beta_fast=32.0``,
    ``beta_slow=1.0``, ``original_max_position_embeddings=4096``, ``truncate=True`` (YaRN's),
    ``sequence_axis=1``, ``feature_axis=-1``, ``denominator_dim=None``; call it as
    ``layer(x, start_index=0, positions=None)``.

    Example:
      >>> layer = tf_ops.layers.RotaryEmbedding()
      >>> layer(np.ones((1, 4, 6), "float32")).numpy()[0, 3].round(4)
      array([-1.1311,  0.8515,  0.9935, -0.8489,  1.1291,  1.0064], dtype=float32)
    """

    def __init__(self, max_wavelength=10000, scaling_factor=1.0, rope_type="linear",
                 beta_fast=32.0, beta_slow=1.0, original_max_position_embeddings=4096,
                 truncate=True, sequence_axis=1, feature_axis=-1, denominator_dim=None,
                 **kwargs):
        super().__init__(**kwargs)
        if rope_type not in rotary.ROPE_TYPES[:3]:
            raise ValueError(f"rope_type must be 'linear', 'dynamic' or 'yarn', got "
                             f"{rope_type!r}")
        for name, value in (("max_wavelength", max_wavelength),
                            ("scaling_factor", scaling_factor)):
            if not (math.isfinite(float(value)) and float(value) > 0):
                raise ValueError(f"{name} must be finite and > 0, got {value}")
        self.max_wavelength = max_wavelength
        self.scaling_factor = scaling_factor
        self.rope_type = rope_type
        self.beta_fast = beta_fast
        self.beta_slow = beta_slow
        self.original_max_position_embeddings = original_max_position_embeddings
        self.truncate = truncate
        self.sequence_axis = sequence_axis
        self.feature_axis = feature_axis
        self.denominator_dim = denominator_dim
        self.built = True

    def call(self, inputs, start_index=0, positions=None):
        return rotary.rotary_embedding(inputs, start_index, positions, **rotary_kwargs(self))

    def get_config(self):
        config = super().get_config()
        config.update({
            "max_wavelength": self.max_wavelength,
            "scaling_factor": self.scaling_factor,
            "rope_type": self.rope_type,
            "beta_fast": self.beta_fast,
            "beta_slow": self.beta_slow,
            "original_max_position_embeddings": self.original_max_position_embeddings,
            "truncate": self.truncate,
            "sequence_axis": self.sequence_axis,
            "feature_axis": self.feature_axis,
            "denominator_dim": self.denominator_dim,
        })
        return config

    def compute_output_shape(self, input_shape):
        return input_shape


def _class_path(layer) -> str:
    return f"{type(layer).__module__}.{type(layer).__qualname__}"


def rotary_kwargs(layer) -> dict | None:
    """The keyword arguments of `tf_ops.rotary_embedding` that compute `layer`'s call,
    for this module's `RotaryEmbedding` and keras-hub's ``RotaryEmbedding`` and
    ``LlamaRotaryEmbedding`` (those exact classes: a subclass may compute other
    frequencies); None for any other layer, and for a ``LlamaRotaryEmbedding`` given
    ``rope_type="yarn"`` (Llama's frequencies with YaRN's temperature), which the op does
    not cover.

    keras-hub 0.32 computes, and so do these arguments: for ``RotaryEmbedding``, a
    ``rope_type`` other than its three as no scaling; for ``LlamaRotaryEmbedding``,
    ``max_wavelength^(-2j / D)`` whatever its ``position_scaling_factor`` and
    ``denominator_dim`` (its frequencies ignore both), adjusted as Llama 3.1's when
    ``low_freq_factor`` and the three others are set.

    Example:
      >>> from tf_ops.python.rotary.layers import rotary_kwargs
      >>> rotary_kwargs(tf_ops.layers.RotaryEmbedding(scaling_factor=2.0))["scaling_factor"]
      2.0
    """
    path = _class_path(layer)
    if not (path in (_KERAS_HUB_LLAMA, _KERAS_HUB_ROTARY) or isinstance(layer, RotaryEmbedding)):
        return None
    common = dict(max_wavelength=layer.max_wavelength, sequence_axis=layer.sequence_axis,
                  feature_axis=layer.feature_axis)
    if path == _KERAS_HUB_LLAMA:
        if layer.rope_type == "yarn":
            return None
        if layer.low_freq_factor is None:
            return dict(common, rope_type="linear")
        return dict(common, rope_type="llama3",
                    frequency_adjustment_factor=layer.frequency_adjustment_factor,
                    low_freq_factor=layer.low_freq_factor,
                    high_freq_factor=layer.high_freq_factor,
                    pretraining_sequence_length=layer.pretraining_sequence_length)
    if layer.rope_type not in rotary.ROPE_TYPES[:3]:  # keras-hub: unscaled
        return dict(common, rope_type="linear")
    return dict(common, scaling_factor=layer.scaling_factor, rope_type=layer.rope_type,
                beta_fast=layer.beta_fast, beta_slow=layer.beta_slow,
                original_max_position_embeddings=layer.original_max_position_embeddings,
                truncate=layer.truncate, denominator_dim=layer.denominator_dim)


LAYERS: dict[str, type] = {"RotaryEmbedding": RotaryEmbedding}
