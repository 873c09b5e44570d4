"""`tf_ops.layers.Dense` and `tf_ops.layers.GatedDense`: Keras's layer test harness,
values and gradients against Keras's own layers, checkpoints shared with
`keras.layers.Dense`, serialisation, mixed precision, jit_compile, and export under
`tf_ops.portable()` (no TfOps> op)."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src import testing

import tf_ops
from fused_refs import op_types

L = tf_ops.layers


def test_run_layer_test_dense():
    testing.TestCase(methodName="run_layer_test").run_layer_test(
        L.Dense,
        init_kwargs={"units": 5, "activation": tf_ops.gelu},
        input_shape=(2, 3, 4),
        expected_output_shape=(2, 3, 5),
        expected_num_trainable_weights=2,
        expected_num_non_trainable_weights=0,
        expected_num_seed_generators=0,
        expected_num_losses=0,
        supports_masking=True,
    )


@pytest.mark.parametrize("activation", ["swish", "gelu", "sigmoid"])
def test_run_layer_test_gated_dense(activation):
    testing.TestCase(methodName="run_layer_test").run_layer_test(
        L.GatedDense,
        init_kwargs={"units": 5, "activation": activation},
        input_shape=(2, 3, 4),
        expected_output_shape=(2, 3, 5),
        expected_num_trainable_weights=2,
        expected_num_non_trainable_weights=0,
        expected_num_seed_generators=0,
        expected_num_losses=0,
        supports_masking=True,
    )


def _value_and_grads(layer, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
    return [y, *tape.gradient(y, [x, *layer.trainable_variables])]


@pytest.mark.parametrize("activation,keras_activation", [
    (tf_ops.gelu, "gelu"), (tf_ops.swish, "silu"), (tf_ops.elu, "elu"), (tf_ops.sigmoid, "sigmoid")])
def test_dense_matches_keras_and_shares_weights(activation, keras_activation, tmp_path):
    x = tf.random.stateless_normal([6, 4], seed=[1, 2])
    ours = L.Dense(3, activation=activation)
    theirs = keras.layers.Dense(3, activation=keras_activation)
    ours.build((None, 4))
    theirs.build((None, 4))
    theirs.set_weights(ours.get_weights())
    for got, want in zip(_value_and_grads(ours, x), _value_and_grads(theirs, x)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    # Same variables: a checkpoint of one loads into the other.
    path = str(tmp_path / "ckpt")
    tf.train.Checkpoint(layer=ours).write(path)
    fresh = keras.layers.Dense(3, activation=keras_activation)
    fresh.build((None, 4))
    tf.train.Checkpoint(layer=fresh).read(path).assert_consumed()
    for a, b in zip(fresh.get_weights(), ours.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_dense_fuses_only_tf_ops_activations():
    x = tf.zeros([2, 4])
    swish, relu = L.Dense(3, activation=tf_ops.swish), L.Dense(3, activation="relu")
    fused = tf.function(lambda x: swish(x))
    assert "TfOps>BiasSwish" in op_types(fused.get_concrete_function(x).graph.as_graph_def())
    plain = tf.function(lambda x: relu(x))
    assert not any(t.startswith("TfOps>") for t in op_types(plain.get_concrete_function(x).graph.as_graph_def()))
    no_bias = L.Dense(3, activation=tf_ops.swish, use_bias=False)
    assert no_bias(tf.ones([2, 4])).shape == (2, 3)


def test_gated_dense_matches_the_composite():
    x = tf.random.stateless_normal([6, 4], seed=[3, 4])
    layer = L.GatedDense(3, activation="gelu", activation_attrs={"approximate": True})
    y = layer(x)
    kernel, bias = layer.get_weights()
    z = x.numpy() @ kernel + bias
    want = tf.nn.gelu(z[:, :3], approximate=True) * z[:, 3:]
    np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert layer.get_config()["units"] == 3 and kernel.shape == (4, 6)
    with pytest.raises(ValueError, match="activation must be one of"):
        L.GatedDense(3, activation="selu")


def test_save_and_load_keras_file(tmp_path):
    model = keras.Sequential([keras.Input((4,)), L.Dense(8, activation=tf_ops.mish),
                              L.GatedDense(3, activation="swish")])
    x = np.random.default_rng(0).normal(size=(5, 4)).astype("float32")
    path = os.path.join(tmp_path, "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy):
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = keras.Sequential([keras.Input((4,)), L.Dense(8, activation=tf_ops.gelu),
                                  L.GatedDense(3, activation="swish")])
        y = model(tf.ones([2, 4]))
        assert y.dtype == keras.mixed_precision.global_policy().compute_dtype
        assert model.layers[0].kernel.dtype == "float32"
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(model(tf.ones([2, 4])), tf.float32))
        grads = tape.gradient(loss, model.trainable_variables)
        assert all(g is not None and g.dtype == tf.float32 for g in grads)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_jit_compile_and_portable_export(tmp_path):
    model = keras.Sequential([keras.Input((4,)), L.Dense(8, activation=tf_ops.gelu),
                              L.GatedDense(3, activation="swish")])
    x = tf.random.stateless_normal([5, 4], seed=[5, 6])
    want = model(x)
    jit = tf.function(lambda x: model(x), jit_compile=True)
    np.testing.assert_allclose(jit(x).numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    with tf_ops.portable():
        concrete = tf.function(lambda x: model(x)).get_concrete_function(x)
    assert not any(t.startswith("TfOps>") for t in op_types(concrete.graph.as_graph_def()))
    np.testing.assert_allclose(concrete(x).numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
