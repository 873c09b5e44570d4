"""`tf_ops.layers.BatchNormalization` as the Keras layer it replaces: Keras's own
`run_layer_test` with the expectations of Keras's BatchNormalization test, and that
test's upstream checks (normalisation and moving statistics, masking, trainable=False,
float16); values, gradients and moving statistics against keras.layers.BatchNormalization
(+ Activation) in NHWC and NCHW; config, checkpoints in both directions, mixed precision,
jit_compile, synchronized under a two-replica MirroredStrategy. Lean: one model per family.
"""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src import testing

import tf_ops
from subprocesses import SCRIPTS, run_python

BN = tf_ops.layers.BatchNormalization


@pytest.mark.parametrize("kwargs, shape, trainable, losses", [
    ({"center": True, "scale": True}, (2, 3), 2, 0),
    ({"center": False, "scale": False}, (2, 3), 0, 0),
    ({"beta_regularizer": "l2", "gamma_regularizer": "l2", "activation": "swish"}, (2, 4, 4, 3), 2, 2),
], ids=["vector", "no-affine", "image-regularized-swish"])
def test_run_layer_test(kwargs, shape, trainable, losses):
    """As Keras's own BatchNormalization test calls it (test_bn_basics)."""
    harness = testing.TestCase(methodName="run_layer_test")
    harness.run_layer_test(
        BN, init_kwargs=kwargs, call_kwargs={"training": True}, input_shape=shape,
        expected_output_shape=shape, expected_num_trainable_weights=trainable,
        expected_num_non_trainable_weights=2, expected_num_seed_generators=0,
        expected_num_losses=losses, supports_masking=True,
        run_training_check=len(shape) > 2)


@pytest.mark.parametrize("axis", [-1, 1])
def test_keras_upstream_correctness(axis):
    """Keras's test_correctness: three training calls with momentum 0 normalise, the
    moving statistics follow, and inference with them normalises again."""
    for shape in ((5, 2, 3), (5, 3, 3, 2)):
        layer = BN(axis=axis, momentum=0, moving_mean_initializer="ones",
                   moving_variance_initializer="zeros")
        x = np.random.default_rng(0).normal(5.0, 10.0, size=shape).astype("float32")
        out = x
        for _ in range(3):
            out = layer(out, training=True)
        bshape = [1] * len(shape)
        bshape[axis] = shape[axis]
        out = (np.asarray(out) - np.reshape(layer.beta.numpy(), bshape)) / np.reshape(layer.gamma.numpy(), bshape)
        axes = tuple(d for d in range(len(shape)) if d != axis % len(shape))
        np.testing.assert_allclose(out.mean(axes), 0.0, atol=1e-3)
        np.testing.assert_allclose(out.std(axes), 1.0, atol=1e-3)
        np.testing.assert_allclose(layer.moving_mean.numpy(), 0.0, atol=1e-3)
        np.testing.assert_allclose(layer.moving_variance.numpy(), 1.0, atol=1e-3)
        inf = np.asarray(layer(out, training=False))
        np.testing.assert_allclose(inf.mean(axes), 0.0, atol=1e-3)
        np.testing.assert_allclose(inf.std(axes), 1.0, atol=1e-3)


def test_keras_upstream_masking_trainable_and_float16():
    # test_masking_correctness: the moments of the unmasked steps.
    x = np.array([[[5, 5, 5], [7, 7, 7], [4, 4, 4]]], dtype=np.float32)
    mask = np.array([[1, 1, 0]], dtype=np.float32)
    layer = BN(axis=-1, momentum=0.0, activation="relu")
    y = layer(x, training=True, mask=mask)
    np.testing.assert_allclose(layer.moving_mean.numpy(), [6.0] * 3, atol=1e-5)
    np.testing.assert_allclose(layer.moving_variance.numpy(), [1.0] * 3, atol=1e-4)
    ref = keras.layers.BatchNormalization(axis=-1, momentum=0.0)
    np.testing.assert_allclose(y, np.maximum(ref(x, training=True, mask=mask), 0), atol=1e-5)
    # test_trainable_behavior: trainable=False runs in inference mode.
    layer = BN(axis=-1, momentum=0.8, epsilon=1e-7)
    layer.build((1, 4, 4, 3))
    layer.trainable = False
    assert (len(layer.weights), len(layer.trainable_weights), len(layer.non_trainable_weights)) == (4, 0, 4)
    x = np.random.default_rng(1).normal(5.0, 10.0, size=(200, 4, 4, 3)).astype("float32")
    np.testing.assert_allclose(layer(x, training=True), x, rtol=1e-5, atol=1e-4)
    layer.trainable = True
    assert len(layer.trainable_weights) == 2
    for _ in range(100):
        out = layer(x, training=True)
    out = np.asarray(out)
    np.testing.assert_allclose(out.mean((0, 1, 2)), 0.0, atol=1e-3)
    np.testing.assert_allclose(out.std((0, 1, 2)), 1.0, atol=1e-3)
    # test_large_value_within_autocast_scope, and float16 inputs read directly.
    layer = BN()
    layer.build((1, 4, 4, 3))
    large = np.full(layer.moving_variance.shape, 70000.0, "float32")
    with keras.src.backend.AutocastScope("float16"):
        layer.moving_variance.assign(large)
        np.testing.assert_allclose(layer.moving_variance.value, large)
    layer = BN(dtype="mixed_float16", activation="gelu")
    ref = keras.layers.BatchNormalization(dtype="mixed_float16")
    x16 = np.random.default_rng(2).normal(3, 2, (8, 4, 4, 3)).astype("float16")
    y16 = layer(x16, training=True)
    assert y16.dtype == tf.float16 and layer.moving_mean.dtype == "float32"
    want = keras.activations.gelu(tf.cast(ref(x16, training=True), tf.float32))
    np.testing.assert_allclose(tf.cast(y16, tf.float32), want, atol=4e-3)
    np.testing.assert_allclose(layer.moving_variance.numpy(), ref.moving_variance.numpy(), rtol=1e-5)


def _pair(axis, activation, keras_activation, shape, seed=0):
    inp = keras.Input(shape[1:])
    ours = keras.Model(inp, BN(axis=axis, activation=activation, momentum=0.9)(inp))
    h = keras.layers.BatchNormalization(axis=axis, momentum=0.9)(inp)
    theirs = keras.Model(inp, keras.layers.Activation(keras_activation)(h))
    rng = np.random.default_rng(seed)
    weights = [1 + 0.2 * rng.standard_normal(shape[axis]), 0.2 * rng.standard_normal(shape[axis]),
               rng.standard_normal(shape[axis]), 1 + rng.random(shape[axis])]
    ours.layers[1].set_weights(weights)
    theirs.layers[1].set_weights(weights)
    return ours, theirs


@pytest.mark.parametrize("axis", [-1, 1])
def test_against_keras_training_step_and_inference(axis):
    """Outputs, gradients (x, gamma, beta) and moving statistics of a training step, and
    inference, against keras.layers.BatchNormalization + Activation."""
    shape = (6, 5, 4, 7) if axis == -1 else (6, 7, 5, 4)
    x = tf.constant(np.random.default_rng(4).normal(2, 3, shape), tf.float32)
    w = tf.constant(np.random.default_rng(5).standard_normal(shape), tf.float32)
    pairs = ((("swish", "silu"), (None, "linear")) if axis == -1
             else (("relu", "relu"), ("hard_swish", "hard_silu")))
    for act, keras_act in pairs:
        ours, theirs = _pair(axis, act, keras_act, shape)

        @tf.function
        def step(model, training):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = model(x, training=training)
                loss = tf.reduce_sum(y * w)
            return [y] + tape.gradient(loss, [x] + model.trainable_weights)

        for training in (True, False):
            got, want = step(ours, training), step(theirs, training)
            for a, b in zip(got, want):
                np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * float(tf.reduce_max(tf.abs(b))), err_msg=f"{act} {training}")
        for a, b in zip(ours.layers[1].non_trainable_weights, theirs.layers[1].non_trainable_weights):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_config_checkpoints_jit_and_fit(tmp_path):
    layer = BN(axis=1, momentum=0.5, epsilon=1e-2, center=False, activation=tf_ops.gelu,
               gamma_initializer="ones")
    config = layer.get_config()
    assert config["activation"] == {"name": "gelu", "attrs": {"approximate": False}}
    clone = BN.from_config(config)
    assert clone.get_config() == config
    # A checkpoint of either class loads into the other.
    inp = keras.Input((3, 4))
    ours = keras.Model(inp, BN(activation="swish")(inp))
    theirs = keras.Model(inp, keras.layers.BatchNormalization()(inp))
    ours.layers[1].set_weights([np.full(4, 2.0), np.full(4, 0.5), np.full(4, 0.1), np.full(4, 3.0)])
    ours.save_weights(tmp_path / "ours.weights.h5")
    theirs.load_weights(tmp_path / "ours.weights.h5")
    for a, b in zip(ours.layers[1].weights, theirs.layers[1].weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    theirs.layers[1].moving_mean.assign(np.full(4, -1.0))
    theirs.save_weights(tmp_path / "theirs.weights.h5")
    ours.load_weights(tmp_path / "theirs.weights.h5")
    np.testing.assert_array_equal(ours.layers[1].moving_mean.numpy(), np.full(4, -1.0))
    ours.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype("float32")
    np.testing.assert_allclose(loaded(x), ours(x), rtol=1e-6)
    # fit with jit_compile: the composite under XLA, moving statistics updated.
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4), BN(activation="swish"),
                              keras.layers.Dense(1)])
    model.compile("sgd", "mse", jit_compile=True)
    before = model.layers[1].moving_mean.numpy().copy()
    model.fit(np.ones((8, 4)) * np.arange(4), np.ones((8, 1)), epochs=1, verbose=0)
    assert not np.allclose(before, model.layers[1].moving_mean.numpy())


@pytest.mark.slow  # a process of its own: ~10 s idle, ~30 s on a busy machine
def test_synchronized_under_two_replica_mirrored_strategy(tmp_path):
    """synchronized=True on two logical CPUs (in its own process): the fused path's
    outputs, gradients (x; gamma and beta summed over the replicas) and moving
    statistics after two steps are those of one device with the whole batch, and of
    Keras's own synchronized layer on the same strategy; channels-last and -first."""
    out = tmp_path / "synchronized.json"
    run_python(SCRIPTS / "batch_norm_synchronized.py", out, timeout=300)
    result = json.loads(out.read_text())
    assert result["replicas"] == 2
    assert result["fused_traces"] >= 4  # two layouts, two replicas: the fused path
    for name, case in result["cases"].items():
        tol = 2e-5 * max(1.0, case["scale"])
        for output, d1, d2 in zip(case["outputs"], case["max_difference_vs_one_device"],
                                  case["max_difference_vs_keras_synchronized"]):
            assert d1 < tol, (name, output, d1)
            assert d2 < 10 * tol, (name, output, d2)  # Keras: float32 E[x^2] - E[x]^2
        assert case["max_moving_difference_vs_one_device"] < 1e-5, name
        assert case["max_moving_difference_vs_keras"] < 1e-4, name
        assert max(abs(m - 2.5) for m in case["moving_mean"]) > 0.1  # the statistics moved
