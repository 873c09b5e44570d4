"""Batch norm under jit_compile: TfOps>BatchNormTraining and TfOps>BatchNormTrainingGrad
lowered to XLA custom calls into the CPU engine (XLA FFI, platform "Host"), and to the
XlaBuilder composite where no handler is used (forced with TF_OPS_XLA_CUSTOM_CALLS=0).
Values of every op on both paths are tests/batch_norm/test_batch_norm.py's
`test_xla_lowering_matches_the_kernels`; here: that the compiled HLO of a train step holds
the two custom calls and none of the composite's reductions (the composite path: the
reductions and no custom call); a jitted train step of `tf_ops.layers.BatchNormalization`
with an activation giving the non-jit step's bits through the custom calls; the
inference ops staying composites; and bad input raising InvalidArgumentError under jit.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tf_ops

TF_CAN_BUILD_LOWERINGS = tuple(int(p) for p in tf.__version__.split(".")[:2]) >= (2, 20)
pytestmark = pytest.mark.skipif(
    not TF_CAN_BUILD_LOWERINGS, reason="TensorFlow < 2.20 builds no XLA lowerings"
)


def _hlo(fn, *args) -> str:
    return tf.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)(stage="hlo")


def _train_step(axis=-1, activation="swish"):
    gamma = tf.Variable(tf.linspace(0.5, 1.5, 8))
    beta = tf.Variable(tf.linspace(-0.5, 0.5, 8))

    def step(x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y, _, _ = tf_ops.batch_norm(x, gamma, beta, axis=axis, activation=activation)
        return (y, *tape.gradient(y, [x, gamma, beta], output_gradients=dy))

    return step


@pytest.mark.parametrize("dtype", (tf.float32, tf.bfloat16), ids=("float", "bfloat16"))
def test_hlo_is_custom_calls_not_the_composite(dtype, xla_path):
    assert tf_ops.build_info().xla, tf_ops.build_info()
    rng = np.random.default_rng(1)
    x = tf.cast(rng.normal(size=(4, 3, 3, 8)), dtype)
    hlo = _hlo(_train_step(), x, tf.ones_like(x))
    if xla_path == "custom_call":
        assert 'custom_call_target="tf_ops_batch_norm_training"' in hlo, hlo
        assert 'custom_call_target="tf_ops_batch_norm_training_grad"' in hlo, hlo
        assert "API_VERSION_TYPED_FFI" in hlo, hlo
        assert " reduce(" not in hlo, hlo
    else:
        assert "custom-call" not in hlo, hlo
        assert " reduce(" in hlo, hlo


def test_inference_ops_stay_composites():
    """One element-wise pass given the statistics: left to XLA to fuse with its
    neighbours, in the custom-call path too."""
    x = tf.ones((4, 8))
    stat = tf.ones(8)

    def infer(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf_ops.batch_norm_inference(x, stat, stat, activation="relu")
        return y, tape.gradient(y, x)

    assert "custom-call" not in _hlo(infer, x)


@pytest.mark.parametrize("axis", (-1, 1), ids=("channels_last", "channels_first"))
@pytest.mark.parametrize("dtype", (tf.float16, tf.bfloat16, tf.float32, tf.float64),
                         ids=("half", "bfloat16", "float", "double"))
def test_jit_layer_train_step_is_the_kernels_bits(axis, dtype, xla_path):
    """The layer's train step (statistics, moving averages, the fused gradient) inside
    one jitted function: the non-jit step's bits through the custom calls, within a few
    roundings on the composite path."""
    rng = np.random.default_rng(5)
    shape = (6, 5, 4, 8) if axis == -1 else (6, 8, 5, 4)
    x = tf.cast(rng.normal(size=shape) * 2 + 1, dtype)
    dy = tf.cast(rng.normal(size=shape), dtype)
    layer = tf_ops.layers.BatchNormalization(axis=axis, activation="swish", dtype=dtype.name)
    layer.build(shape)

    def step(x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
        grads = tape.gradient(y, [x, *layer.trainable_weights], output_gradients=dy)
        return (y, *grads, *[tf.identity(v) for v in layer.non_trainable_weights])

    start = [v.numpy() for v in layer.weights]
    jitted = tf.function(step, jit_compile=True)(x, dy)
    for v, s in zip(layer.weights, start):
        v.assign(s)
    eager = tf.function(step)(x, dy)
    names = ("y", "dx", "dgamma", "dbeta", "moving_mean", "moving_variance")
    tol = {tf.float16: 8e-3, tf.bfloat16: 6e-2, tf.float32: 4e-5, tf.float64: 1e-11}[dtype]
    for name, got, want in zip(names, jitted, eager):
        got = tf.cast(got, tf.float64).numpy()
        want = tf.cast(want, tf.float64).numpy()
        if xla_path == "custom_call":
            np.testing.assert_array_equal(got, want, err_msg=name)
        else:
            scale = max(1.0, float(np.max(np.abs(want))))
            np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale, err_msg=name)


def test_bad_input_raises_invalid_argument_under_jit(xla_path):
    """Shapes unknown when tracing are checked by the lowering when XLA compiles, on
    both paths."""
    spec = tf.TensorSpec([None] * 4, tf.float32)
    vec = tf.TensorSpec([None], tf.float32)

    @tf.function(jit_compile=True, input_signature=[spec, vec])
    def train(x, scale):
        return tf_ops.batch_norm(x, scale, None, activation="swish")[0]

    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"scale must be 1-D with one element per channel"):
        train(tf.zeros((2, 3, 4, 5)), tf.ones(4))

    @tf.function(jit_compile=True, input_signature=[spec, spec, vec])
    def grad(dy, x, stat):
        return tf_ops.batch_norm_grad(dy, x, stat, None, stat, stat)[0]

    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"y_backprop and x must have the same shape"):
        grad(tf.zeros((2, 3, 4, 4)), tf.zeros((2, 3, 4, 5)), tf.ones(5))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"scale must be 1-D"):
        grad(tf.zeros((2, 3, 4, 5)), tf.zeros((2, 3, 4, 5)), tf.ones(4))
