"""TfOps>GroupNorm (+ activation) and its grad op: values against a float64 NumPy
reference and against Keras's GroupNormalization, gradients (tf.test.compute_gradient
in float64, and the float32 grad op against the float64 composite's autodiff), every
activation of the activation list, four dtypes, channels last and first, ranks 2-5,
bad input, determinism, the portable composite and XLA, and
`tf_ops.layers.GroupNormalization` (Keras's own test file run against it)."""

from __future__ import annotations

import importlib
import types
import unittest

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src import testing

import tf_ops
from op_specs import SPECS, function_name, round_attrs
from fused_refs import op_types

RNG = np.random.default_rng(7)


def reference(x64, gamma, beta, groups, epsilon, axis, act=lambda z: z):
    """float64 group norm + activation: Keras's math in NumPy."""
    x64 = np.asarray(x64, np.float64)
    a = axis % x64.ndim
    shape = list(x64.shape)
    grouped = shape[:a] + [groups, shape[a] // groups] + shape[a + 1:]
    xg = x64.reshape(grouped)
    axes = tuple(d for d in range(1, len(grouped)) if d != a)
    mean = xg.mean(axis=axes, keepdims=True)
    var = ((xg - mean) ** 2).mean(axis=axes, keepdims=True)
    xhat = ((xg - mean) / np.sqrt(var + np.float64(np.float32(epsilon)))).reshape(shape)
    pshape = [1] * x64.ndim
    pshape[a] = -1
    return act(xhat * np.reshape(gamma, pshape) + np.reshape(beta, pshape))


def silu(z):
    return z / (1.0 + np.exp(-z))


TOL = {tf.float64: 1e-10, tf.float32: 2e-5, tf.bfloat16: 2e-2, tf.float16: 4e-3}

CASES = [  # shape, groups, axis
    ((2, 6, 8), 4, -1),
    ((2, 8, 6), 2, 1),
    ((2, 5, 7, 16), 4, -1),
    ((2, 16, 5, 7), 8, 1),
    ((1, 3, 4, 5, 12), 3, -1),
    ((2, 12, 3, 4, 5), 6, 1),
    ((3, 4, 6, 5), 2, 2),  # a middle axis
    ((3, 8), 2, -1),
]


@pytest.mark.parametrize("dtype", [tf.float64, tf.float32, tf.bfloat16, tf.float16],
                         ids=lambda d: d.name)
@pytest.mark.parametrize("shape,groups,axis", CASES)
def test_values_match_float64_reference(shape, groups, axis, dtype):
    x = (RNG.standard_normal(shape) * 2 + 3).astype(np.float64)
    c = shape[axis]
    gamma = RNG.uniform(0.5, 1.5, c)
    beta = RNG.uniform(-0.5, 0.5, c)
    xt = tf.cast(x, dtype)
    x_rounded = tf.cast(xt, tf.float64).numpy()
    y = tf_ops.group_norm(xt, gamma, beta, groups=groups, axis=axis, activation="silu")
    assert y.dtype == dtype and y.shape == shape
    want = reference(x_rounded, gamma.astype(np.float32) if dtype != tf.float64 else gamma,
                     beta.astype(np.float32) if dtype != tf.float64 else beta, groups, 1e-3,
                     axis, silu)
    np.testing.assert_allclose(tf.cast(y, tf.float64).numpy(), want, rtol=TOL[dtype],
                               atol=TOL[dtype])


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_activation_of_the_list_fuses(spec):
    """Each activation of the list (one functor drives the engine), forward and grad."""
    x = RNG.standard_normal((2, 3, 4, 8))
    gamma, beta = RNG.uniform(0.5, 1.5, 8), RNG.uniform(-0.5, 0.5, 8)
    attrs = dict(spec.attr_variants[-1]) if spec.attr_variants else {}
    name = function_name(spec)
    # An activation's attributes in the activation argument (Swish's `beta` is also
    # this function's own argument).
    activation = {"name": name, "attrs": attrs}
    y = tf_ops.group_norm(x, gamma, beta, 2, activation=activation)
    want = reference(x, gamma, beta, 2, 1e-3, -1, lambda z: spec.ref(z, **round_attrs(attrs)))
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-9, atol=1e-9)
    xt, dy = tf.constant(x), tf.constant(RNG.standard_normal(x.shape))
    grads = []
    for portable in (False, True):  # the grad op, and autodiff of Keras's math
        with tf.GradientTape() as tape:
            tape.watch(xt)
            with tf_ops.portable(portable):
                y = tf_ops.group_norm(xt, gamma, beta, 2, activation=activation)
        grads.append(tape.gradient(y, xt, output_gradients=dy).numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("activation", [None, "silu", "elu", "gelu"])
@pytest.mark.parametrize("shape,groups,axis", [((2, 3, 4), 2, -1), ((2, 4, 3), 2, 1),
                                               ((1, 2, 2, 2, 6), 3, -1)])
def test_gradients_float64_compute_gradient(shape, groups, axis, activation):
    x = tf.constant(RNG.standard_normal(shape))
    c = shape[axis]
    gamma = tf.constant(RNG.uniform(0.5, 1.5, c))
    beta = tf.constant(RNG.uniform(-0.5, 0.5, c))

    def f(x, gamma, beta):
        return tf_ops.group_norm(x, gamma, beta, groups, epsilon=1e-3, axis=axis,
                                 activation=activation)

    theoretical, numerical = tf.test.compute_gradient(f, [x, gamma, beta], delta=1e-6)
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape,axis", [((2, 16, 16, 32), -1), ((2, 32, 16, 16), 1)])
def test_float32_grad_op_matches_float64_autodiff_of_keras_math(shape, axis):
    x64 = RNG.standard_normal(shape) + 1.0
    c = shape[axis]
    g64, b64 = RNG.uniform(0.5, 1.5, c), RNG.uniform(-0.5, 0.5, c)
    dy64 = RNG.standard_normal(shape)
    results = {}
    for dtype, portable in ((tf.float32, False), (tf.float64, True)):
        x, g, b = (tf.constant(v, dtype) for v in (x64, g64, b64))
        with tf.GradientTape() as tape:
            tape.watch([x, g, b])
            with tf_ops.portable(portable):
                y = tf_ops.group_norm(x, g, b, 8, axis=axis, activation="silu")
        results[dtype] = [t.numpy().astype(np.float64) for t in
                          tape.gradient(y, [x, g, b], output_gradients=tf.constant(dy64, dtype))]
    for got, want in zip(results[tf.float32], results[tf.float64]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_matches_keras_layer_forward_and_backward():
    x = tf.constant(RNG.standard_normal((2, 6, 6, 32)), tf.float32)
    ours = tf_ops.layers.GroupNormalization(groups=8)
    theirs = keras.layers.GroupNormalization(groups=8)
    ours.build(x.shape)
    theirs.build(x.shape)
    for layer in (ours, theirs):
        layer.gamma.assign(RNG.uniform(0.5, 1.5, 32))
        layer.beta.assign(RNG.uniform(-0.5, 0.5, 32))
        layer.gamma.assign(ours.gamma)
        layer.beta.assign(ours.beta)
    out = []
    for layer in (ours, theirs):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            weights = tf.reshape(tf.range(tf.size(y), dtype=tf.float32), tf.shape(y))
            loss = tf.reduce_sum(tf.nn.silu(y) * weights / 1000.0)
        out.append([y] + tape.gradient(loss, [x, layer.gamma, layer.beta]))
    for a, b in zip(*out):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-4, atol=2e-4)


def test_bad_input_names_the_shapes():
    x = tf.zeros((2, 4, 30))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"channels .*30.* multiple of groups = 32.*\[2,4,30\]"):
        tf_ops.group_norm(x, groups=32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"axis.*got axis = 0.*\[2,4,30\]"):
        tf_ops.group_norm(x, groups=2, axis=0)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"axis = 3.*\[2,4,30\]"):
        tf_ops.group_norm(x, groups=2, axis=3)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"rank >= 2.*\[30\]"):
        tf_ops.group_norm(tf.zeros([30]), tf.ones([30]), tf.zeros([30]), groups=2)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"scale must be 1-D.*\(30\).*\[2,4,30\] and scale \[29\]"):
        tf_ops.group_norm(x, tf.ones([29]), None, groups=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"offset .*\[30,1\]"):
        tf_ops.group_norm(x, None, tf.zeros([30, 1]), groups=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"epsilon"):
        tf_ops.group_norm(x, groups=2, epsilon=0.0)
    # At graph build too (the shape function), as a ValueError naming the shapes.
    with pytest.raises(ValueError, match=r"multiple of groups = 4.*\[2,4,30\]"):
        tf.function(lambda v: tf_ops.group_norm(v, groups=4)).get_concrete_function(x)
    # The kernel on a shape the shape function could not see.
    f = tf.function(lambda v: tf_ops.group_norm(v, tf.ones([30]), tf.zeros([30]), groups=4),
                    input_signature=[tf.TensorSpec([None, None, None])])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"multiple of groups = 4"):
        f(x)


def test_grad_op_checks_its_inputs():
    dy = tf.zeros((2, 4, 8))
    raw = tf_ops.load_library().tf_ops_group_norm_grad
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"mean must have shape.*\[2,4\]"):
        raw(dy, dy, tf.ones([8]), tf.zeros([8]), tf.zeros([2, 3]), tf.ones([2, 4]), groups=4)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"dy .*same shape"):
        raw(tf.zeros((2, 4, 4)), dy, tf.ones([8]), tf.zeros([8]), tf.zeros([2, 4]),
            tf.ones([2, 4]), groups=4)


def test_parameter_gradients_deterministic_and_statistics_in_float32_for_bf16():
    x = tf.constant(RNG.standard_normal((2, 64, 64, 64)), tf.bfloat16)
    gamma, beta = tf.ones([64]), tf.zeros([64])
    dy = tf.constant(RNG.standard_normal((2, 64, 64, 64)), tf.bfloat16)
    raw = tf_ops.load_library()
    y, mean, rstd = raw.tf_ops_group_norm(x, gamma, beta, groups=32, activation="Swish")
    assert mean.dtype == tf.float32 and mean.shape == (2, 32)
    want = [raw.tf_ops_group_norm_grad(dy, x, gamma, beta, mean, rstd, groups=32,
                                       activation="Swish") for _ in range(3)]
    for other in want[1:]:
        for a, b in zip(want[0], other):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    # float32 statistics: the mean of bf16 data, exact to float32 rounding.
    x64 = tf.cast(x, tf.float64).numpy().reshape(2, 64 * 64, 32, 2)
    np.testing.assert_allclose(mean.numpy(), x64.mean(axis=(1, 3)), rtol=0, atol=1e-6)


def test_large_mean_no_cancellation():
    x = tf.constant(1e4 + RNG.standard_normal((2, 100, 8)), tf.float32)
    y = tf_ops.group_norm(x, groups=2)
    want = reference(tf.cast(x, tf.float64).numpy(), np.ones(8), np.zeros(8), 2, 1e-3, -1)
    np.testing.assert_allclose(y.numpy(), want, atol=2e-3)


def test_portable_and_jit_compile_build_no_group_norm_op():
    x = tf.constant(RNG.standard_normal((2, 4, 4, 8)), tf.float32)

    @tf.function
    def portable(v):
        with tf_ops.portable():
            return tf_ops.group_norm(v, groups=4, activation="silu")

    graph = portable.get_concrete_function(x).graph.as_graph_def()
    assert not any(t.startswith("TfOps>") for t in op_types(graph))
    want = tf_ops.group_norm(x, groups=4, activation="silu")
    np.testing.assert_allclose(portable(x).numpy(), want.numpy(), rtol=1e-5, atol=1e-5)

    @tf.function(jit_compile=True)
    def step(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = tf_ops.group_norm(v, groups=4, activation="silu")
            loss = tf.reduce_sum(y * y)
        return y, tape.gradient(loss, v)

    y, g = step(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y2 = tf_ops.group_norm(x, groups=4, activation="silu")
        loss2 = tf.reduce_sum(y2 * y2)
    g2 = tape.gradient(loss2, x)
    np.testing.assert_allclose(y.numpy(), y2.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g.numpy(), g2.numpy(), rtol=1e-4, atol=1e-4)


def test_graph_mode_runs_the_fused_ops():
    x = tf.zeros((2, 4, 4, 8))

    @tf.function
    def f(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = tf_ops.group_norm(v, groups=4, activation="silu")
        return tape.gradient(y, v)

    ops_used = op_types(f.get_concrete_function(x).graph.as_graph_def())
    assert {"TfOps>GroupNorm", "TfOps>GroupNormGrad"} <= ops_used


# Keras's own tests of its layer, with `layers.GroupNormalization` meaning tf_ops's.
UPSTREAM = ("keras.src.layers.normalization.group_normalization_test",
            "GroupNormalizationTest", 12)


def test_keras_upstream_group_normalization_tests_hold(monkeypatch):
    module_name, case, expected = UPSTREAM
    module = importlib.import_module(module_name)
    ours = types.SimpleNamespace(**vars(module.layers))
    ours.GroupNormalization = tf_ops.layers.GroupNormalization
    monkeypatch.setattr(module, "layers", ours)
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(getattr(module, case))
    result = unittest.TestResult()
    suite.run(result)
    problems = [f"{test}: {trace}" for test, trace in result.failures + result.errors]
    assert not problems, "\n".join(problems)
    assert result.testsRun == expected and not result.skipped


def test_run_layer_test_channels_first_with_activation():
    t = testing.TestCase(methodName="run_layer_test")
    t.run_layer_test(tf_ops.layers.GroupNormalization,
                     init_kwargs={"groups": 2, "axis": 1, "activation": "silu"},
                     input_shape=(3, 4, 5, 5), expected_output_shape=(3, 4, 5, 5),
                     expected_num_trainable_weights=2, expected_num_non_trainable_weights=0,
                     expected_num_seed_generators=0, supports_masking=True)


def test_layer_config_checkpoint_and_activation(tmp_path):
    layer = tf_ops.layers.GroupNormalization(groups=4, activation="silu", epsilon=1e-5)
    x = RNG.standard_normal((2, 3, 3, 8)).astype("float32")
    y = layer(x)
    keras_layer = keras.layers.GroupNormalization(groups=4, epsilon=1e-5)
    keras_layer(x)
    keras_layer.set_weights(layer.get_weights())
    np.testing.assert_allclose(y, keras.activations.silu(keras_layer(x)), rtol=1e-5, atol=1e-5)
    config = layer.get_config()
    assert config["activation"]["name"] == "swish" and config["groups"] == 4
    clone = tf_ops.layers.GroupNormalization.from_config(config)
    clone(x)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(clone(x), y)
    model = keras.Sequential([keras.Input((3, 3, 8)), layer])
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.layers[0], tf_ops.layers.GroupNormalization)
    np.testing.assert_array_equal(loaded(x), model(x))


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy):
    layer = tf_ops.layers.GroupNormalization(groups=4, dtype=policy)
    x = RNG.standard_normal((2, 3, 3, 8)).astype("float32")
    y = layer(x)
    assert y.dtype.name == policy.split("_")[1]
    y16 = layer(tf.cast(x, y.dtype))
    np.testing.assert_allclose(tf.cast(y16, tf.float32), tf.cast(y, tf.float32), atol=5e-2)
