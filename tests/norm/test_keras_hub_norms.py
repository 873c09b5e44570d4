"""keras-hub's norm classes found by what they compute (`patch/keras_hub_norms.py`):
each one whose call is an RMS or layer norm over the last axis (scale, 1 + scale, or
none) runs one TfOps>RmsNorm / TfOps>LayerNorm under the patch and computes what its own
call computes (forward and gradients, to float32 rounding); one that computes anything
else keeps its own call, and the summary says why."""

from __future__ import annotations

import importlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from tf_ops.python.patch import keras_hub_norms

keras_hub = pytest.importorskip("keras_hub")

M = "keras_hub.src.models"
ONE_PLUS = " (with 1 + scale)"
FUSED = [  # (module, class, constructor arguments, the op, the summary's detail)
    (f"{M}.t5.t5_layer_norm", "T5LayerNorm", {"epsilon": 1e-6}, "TfOps>RmsNorm", ""),
    (f"{M}.gemma3.gemma3_layers", "RMSNormalization", {"epsilon": 1e-6}, "TfOps>RmsNorm",
     ONE_PLUS),
    (f"{M}.roformer_v2.roformer_v2_attention", "RoformerNorm", {"epsilon": 1e-6},
     "TfOps>RmsNorm", ""),
    (f"{M}.edrec.edrec_layers", "EdRecRMSNormalization", {"epsilon": 1e-6}, "TfOps>RmsNorm",
     ONE_PLUS),
    (f"{M}.gemma4.gemma4_layers", "Gemma4VNorm", {"epsilon": 1e-6}, "TfOps>RmsNorm", ""),
    # Flux's: no epsilon attribute (1e-6 is a constant in its call), no dtype argument,
    # and a float32 output whatever the input
    ("keras_hub.src.layers.modeling.rms_normalization", "RMSNormalization",
     {"input_dim": 16}, "TfOps>RmsNorm", ""),
]


def _layer(module: str, name: str, kwargs: dict):
    layer = getattr(importlib.import_module(module), name)(**kwargs)
    layer.build((2, 5, 16))
    rng = np.random.default_rng(0)
    for w in layer.weights:
        w.assign(rng.uniform(0.5, 1.5, w.shape).astype(w.dtype))
    return layer


def _run(layer, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        # weighted by fixed random numbers: sum(y * y) of a norm without scale is a
        # constant, whose gradient is rounding noise
        w = np.random.default_rng(2).normal(size=y.shape).astype("float32")
        loss = tf.reduce_sum(y * w)
    return [y, *tape.gradient(loss, [x, *layer.trainable_weights])]


@pytest.mark.parametrize("module, name, kwargs, op, detail", FUSED,
                         ids=[f"{f[0].split('.')[-1]}.{f[1]}" for f in FUSED])
def test_found_and_fused_and_exact(module, name, kwargs, op, detail):
    layer = _layer(module, name, kwargs)
    x = tf.constant(np.random.default_rng(1).normal(0.2, 1.0, (2, 5, 16)), tf.float32)
    stock = _run(layer, x)
    with tf_ops.patch_keras(only=("norm",)):
        patched = _run(layer, x)
        graph = tf.function(layer).get_concrete_function(x).graph
        summary = tf_ops.patch_summary(keras.Sequential([keras.Input((5, 16)), layer]))
    assert op in {o.type for o in graph.get_operations()}
    for a, b in zip(stock, patched):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=2e-5,
                                   atol=2e-6 * float(np.max(np.abs(a))))
    assert [r.detail for r in summary.fused] == [op + detail], str(summary)


@pytest.mark.parametrize("module, name, kwargs", [
    (f"{M}.gemma3.gemma3_layers", "RMSNormalization", {"epsilon": 1e-6}),
    ("keras_hub.src.layers.modeling.rms_normalization", "RMSNormalization",
     {"input_dim": 16}),
], ids=["gemma3", "flux"])
def test_found_and_fused_under_mixed_precision(module, name, kwargs):
    """Under a mixed bfloat16 policy the class is checked outside the calling layer's
    autocast scope (which would round the check's float32 weights), so it fuses there
    too, with the output dtype of its own call (Flux's: float32 always)."""
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        layer = _layer(module, name, kwargs)
    finally:
        keras.config.set_dtype_policy("float32")
    x = tf.constant(np.random.default_rng(1).normal(0.2, 1.0, (2, 5, 16)), tf.bfloat16)
    stock = layer(x)
    with tf_ops.patch_keras(only=("norm",)):
        patched = layer(x)
        graph = tf.function(layer).get_concrete_function(x).graph
    assert "TfOps>RmsNorm" in {o.type for o in graph.get_operations()}
    assert patched.dtype == stock.dtype
    np.testing.assert_allclose(np.asarray(tf.cast(patched, tf.float32)),
                               np.asarray(tf.cast(stock, tf.float32)), rtol=1e-2, atol=1e-2)


def test_the_probe_rejects_other_math():
    """A class named like a norm whose call is not one (another axis; a missing
    epsilon) is left, with the reason in words."""

    class Norm(keras.layers.Layer):
        def __init__(self, epsilon=1e-6, **kwargs):
            super().__init__(**kwargs)
            self.epsilon = epsilon

        def build(self, shape):
            self.scale = self.add_weight(shape=(shape[-1],), initializer="ones")

        def call(self, x):  # normalises over axis 1, not the last
            var = keras.ops.mean(keras.ops.square(x), axis=1, keepdims=True)
            return x * keras.ops.rsqrt(var + self.epsilon) * self.scale

        def get_config(self):
            return super().get_config() | {"epsilon": self.epsilon}

    layer = Norm()
    layer.build((2, 5, 16))
    found = keras_hub_norms.plan(layer, Norm.call, 3, 16)
    assert found == ("computes something other than an RMS or layer norm over the last "
                     "axis (checked by running it)")
    layer.epsilon = float("nan")
    assert "epsilon" in keras_hub_norms.plan(layer, Norm.call, 3, 16)


def test_left_norm_runs_its_own_call_under_the_patch():
    """The replaced call of a class the probe rejects is the class's own call: the same
    bits, no tf_ops op."""

    class OtherNorm(keras.layers.Layer):
        epsilon = 1e-6

        def call(self, x):
            return x / keras.ops.sqrt(keras.ops.mean(x * x, axis=1, keepdims=True) + 1e-6)

    replaced = keras_hub_norms.wrap(keras_hub_norms.make_call)(OtherNorm.call)
    layer = OtherNorm()
    x = tf.constant(np.random.default_rng(1).normal(size=(2, 5, 16)), tf.float32)
    np.testing.assert_array_equal(np.asarray(replaced(layer, x)),
                                  np.asarray(OtherNorm.call(layer, x)))
    graph = tf.function(lambda a: replaced(layer, a)).get_concrete_function(x).graph
    assert not any(o.type.startswith("TfOps>") for o in graph.get_operations())


def test_discovery_finds_keras_hub_norms_only():
    found = keras_hub_norms.discover()
    assert f"{M}.t5.t5_layer_norm:T5LayerNorm.call" in found
    assert f"{M}.gemma3.gemma3_layers:RMSNormalization.call" in found
    assert all(t.startswith("keras_hub.") for t in found)
    explicit = keras_hub_norms.discover((f"{M}.t5.t5_layer_norm:T5LayerNorm.call",))
    assert f"{M}.t5.t5_layer_norm:T5LayerNorm.call" not in explicit


def test_a_block_named_for_its_norm_is_not_a_norm():
    """D-FINE's DFineConvNormLayer (convolution, batch norm, activation) is found by its
    name, but holds layers and no weights of its own: its call runs unchanged, the
    summary does not count it as a norm left, and its batch norm is reported (and
    patched) on its own."""
    import tf_ops
    from keras_hub.src.models.d_fine.d_fine_layers import DFineConvNormLayer

    block = DFineConvNormLayer(filters=8, kernel_size=3, batch_norm_eps=1e-5, stride=1,
                               groups=1, padding=None, activation_function="relu",
                               channel_axis=-1)
    assert keras_hub_norms.is_container(block)
    assert keras_hub_norms.reason_left(block) is None
    inputs = keras.Input((8, 8, 4))
    model = keras.Model(inputs, block(inputs))
    x = tf.constant(np.random.default_rng(2).normal(size=(2, 8, 8, 4)), tf.float32)
    want = np.asarray(model(x, training=False))
    with tf_ops.patch_keras():
        summary = tf_ops.patch_summary(model)
        got = np.asarray(model(x, training=False))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    kinds = {r.kind for r in summary.fused} | {r.kind for r in summary.left}
    assert "DFineConvNormLayer" not in kinds, kinds
    assert "BatchNormalization" in {r.kind for r in summary.fused}
    # A norm class with a weight of its own is planned as before.
    assert not keras_hub_norms.is_container(keras.layers.LayerNormalization())
