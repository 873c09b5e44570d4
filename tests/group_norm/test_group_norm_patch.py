"""`tf_ops.patch_keras()` and GroupNormalization: Keras's layer runs TfOps>GroupNorm, and
the activation after it fuses into it, in a functional model and in keras-hub's VAE
ResNetBlock (a subclassed layer calling norm, then SiLU)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from patch_checks import assert_close, stock_and_patched

RNG = np.random.default_rng(3)


def _graph_ops(model, x):
    """The traced forward + backward graph of `model` under the patch."""
    x = tf.convert_to_tensor(x)

    @tf.function
    def run(x):
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            total = tf.reduce_sum(tf.cast(out, tf.float32) ** 2)
        return tape.gradient(total, model.trainable_weights)

    with tf_ops.patch_keras():
        graph = run.get_concrete_function(x).graph
    return graph.get_operations()


def _check_fused(operations, activation: bytes = b"Swish"):
    """One fused GroupNorm(activation) per norm, its grad op, no activation op, and any
    unfused GroupNorm left unused (TensorFlow prunes it)."""
    norms = [op for op in operations if op.type == "TfOps>GroupNorm"]
    fused = [op for op in norms if op.get_attr("activation") == activation]
    assert fused, [op.get_attr("activation") for op in norms]
    for op in norms:
        if op.get_attr("activation") == b"Identity":
            assert not any(o.consumers() for o in op.outputs), "the unfused norm is used"
    types = {op.type for op in operations}
    assert "TfOps>GroupNormGrad" in types
    assert not {t for t in types if t in ("TfOps>Swish", "TfOps>SwishGrad")}, types
    return fused


@pytest.mark.parametrize("axis", [-1, 1])
def test_functional_group_norm_activation_pair_fuses(axis):
    shape = (6, 6, 16) if axis == -1 else (16, 6, 6)
    inputs = keras.Input(shape)
    x = keras.layers.Conv2D(16, 3, padding="same",
                            data_format="channels_last" if axis == -1 else "channels_first")(inputs)
    x = keras.layers.GroupNormalization(groups=4, axis=axis, name="gn")(x)
    x = keras.layers.Activation("silu", name="act")(x)
    model = keras.Model(inputs, keras.layers.GlobalAveragePooling2D(
        data_format="channels_last" if axis == -1 else "channels_first")(x))
    data = RNG.normal(0, 1, (2,) + shape).astype("float32")
    assert_close(*stock_and_patched(model, data), rtol=1e-4, atol=1e-5)
    _check_fused(_graph_ops(model, data))


def test_group_norm_alone_and_eager_call_match_keras():
    layer = keras.layers.GroupNormalization(groups=2, epsilon=1e-5)
    x = RNG.normal(0, 1, (2, 5, 8)).astype("float32")
    want = layer(x)
    with tf_ops.patch_keras():
        got = layer(x)
        act = keras.activations.silu(got)  # eager: the activation runs on its own
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(act, keras.activations.silu(want), rtol=1e-5, atol=1e-5)


def test_keras_hub_vae_resnet_block_fuses_norm_and_silu():
    vae_layers = pytest.importorskip("keras_hub.src.models.vae.vae_layers")
    keras.utils.set_random_seed(0)
    block = vae_layers.ResNetBlock(64, has_residual_projection=True)
    inputs = keras.Input((8, 8, 32))
    model = keras.Model(inputs, block(inputs))
    data = RNG.normal(0, 1, (2, 8, 8, 32)).astype("float32")
    assert_close(*stock_and_patched(model, data), rtol=1e-4, atol=1e-5)
    fused = _check_fused(_graph_ops(model, data))
    assert len(fused) == 2  # norm1 + act1, norm2 + act2
