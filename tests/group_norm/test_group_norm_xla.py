"""Group norm under jit_compile: TfOps>GroupNorm and TfOps>GroupNormGrad lowered to XLA
custom calls into the CPU engine (XLA FFI, platform "Host"), and to the XlaBuilder
composite where no handler is used (forced here with TF_OPS_XLA_CUSTOM_CALLS=0).

For every dtype, channels last and first, with an activation: forward and gradients
(the grad op, and the fused gradient of a whole jitted step) against the non-jit op (bit
for bit through the custom calls: the same engine) and against a float64 reference on
both paths; that the compiled HLO holds the custom calls and not the composite (and the
composite path no custom call); the empty-x edge; and bad input raising
InvalidArgumentError under jit (shapes unknown when tracing, checked by the lowering).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from tf_ops.python.core.library import load_library

TF_CAN_BUILD_LOWERINGS = tuple(int(p) for p in tf.__version__.split(".")[:2]) >= (2, 20)
pytestmark = pytest.mark.skipif(
    not TF_CAN_BUILD_LOWERINGS, reason="TensorFlow < 2.20 builds no XLA lowerings"
)

DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
DTYPE_IDS = ("half", "bfloat16", "float", "double")
# Relative to the largest reference value (inputs rounded to the dtype first).
TOL = {tf.float16: 4e-3, tf.bfloat16: 3e-2, tf.float32: 3e-5, tf.float64: 1e-10}
EPSILON = 1e-3

# shape, groups, axis, activation (the op's name and attributes)
CASES = {
    "last_swish": ((2, 5, 6, 16), 4, -1, dict(activation="Swish", beta=1.0)),
    # (not Gelu: TensorFlow's float64 erf, the reference's, is 4e-9 off)
    "first_mish": ((2, 12, 3, 7), 3, 1, dict(activation="Mish")),
    "rank3_groups1_leaky": ((3, 9, 8), 1, -1, dict(activation="LeakyRelu", alpha=0.1)),
    "rank5_first_elu": ((2, 6, 2, 3, 5), 6, 1, dict(activation="Elu", alpha=1.0)),
}


def _ops():
    info = tf_ops.build_info()
    assert info is not None and info.xla, f"needs the library built with XLA; {info}"
    return load_library()


def _reference(x, scale, offset, groups, axis, activation, **attrs):
    """float64 group norm + activation in TensorFlow (Keras's math), differentiable."""
    act = {"Swish": lambda z: z * tf.sigmoid(attrs.get("beta", 1.0) * z),
           "Mish": lambda z: z * tf.tanh(tf.nn.softplus(z)),
           "LeakyRelu": lambda z: tf.nn.leaky_relu(z, attrs.get("alpha", 0.2)),
           "Elu": tf.nn.elu}[activation]
    rank = len(x.shape)
    a = axis % rank
    shape = list(x.shape)
    grouped = shape[:a] + [groups, shape[a] // groups] + shape[a + 1:]
    xg = tf.reshape(x, grouped)
    axes = [d for d in range(1, len(grouped)) if d != a]
    mean, var = tf.nn.moments(xg, axes=axes, keepdims=True)
    xhat = tf.reshape((xg - mean) * tf.math.rsqrt(var + np.float64(np.float32(EPSILON))), shape)
    pshape = [1] * rank
    pshape[a] = -1
    return act(xhat * tf.reshape(scale, pshape) + tf.reshape(offset, pshape))


def _inputs(case, dtype, seed=0):
    shape, groups, axis, attrs = CASES[case]
    rng = np.random.default_rng(seed)
    c = shape[axis]
    u = tf.float64 if dtype == tf.float64 else tf.float32
    x = tf.cast(rng.normal(size=shape) * 2 + 3, dtype)
    dy = tf.cast(rng.normal(size=shape), dtype)
    gamma = tf.cast(rng.uniform(0.5, 1.5, c), u)
    beta = tf.cast(rng.uniform(-0.5, 0.5, c), u)
    return x, dy, gamma, beta, dict(groups=groups, epsilon=EPSILON, axis=axis, **attrs)


def _assert_close(actual, expected, dtype, what):
    actual = tf.cast(actual, tf.float64).numpy()
    expected = np.asarray(expected)
    scale = max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=TOL[dtype] * scale, err_msg=what)


def _same_bits(got, want, what):
    np.testing.assert_array_equal(tf.cast(got, tf.float64).numpy(),
                                  tf.cast(want, tf.float64).numpy(), err_msg=what)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_jit_ops_match_non_jit_and_float64_reference(case, dtype, xla_path):
    ops = _ops()
    x, dy, gamma, beta, attrs = _inputs(case, dtype)

    def forward(x, gamma, beta):
        return ops.tf_ops_group_norm(x=x, scale=gamma, offset=beta, **attrs)

    def backward(dy, x, gamma, beta):
        _, mean, rstd = forward(x, gamma, beta)
        return ops.tf_ops_group_norm_grad(dy=dy, x=x, scale=gamma, offset=beta, mean=mean,
                                          rstd=rstd, **attrs)

    jitted = [*tf.function(forward, jit_compile=True)(x, gamma, beta),
              *tf.function(backward, jit_compile=True)(dy, x, gamma, beta)]
    eager = [*forward(x, gamma, beta), *backward(dy, x, gamma, beta)]
    names = ("y", "mean", "rstd", "dx", "dgamma", "dbeta")
    assert [t.dtype for t in jitted] == [t.dtype for t in eager]
    if xla_path == "custom_call":
        for name, got, want in zip(names, jitted, eager):
            _same_bits(got, want, name)
    x64, g64, b64 = (tf.cast(t, tf.float64) for t in (x, gamma, beta))
    with tf.GradientTape() as tape:
        tape.watch([x64, g64, b64])
        y64 = _reference(x64, g64, b64, **{k: v for k, v in attrs.items() if k != "epsilon"})
    grads = tape.gradient(y64, [x64, g64, b64], output_gradients=tf.cast(dy, tf.float64))
    _assert_close(jitted[0], y64, dtype, "y")
    for name, got, ref in zip(("dx", "dgamma", "dbeta"), jitted[3:], grads):
        # dgamma, dbeta: sums over the batch and the group, float32 for 16-bit x.
        _assert_close(got, ref, dtype if name == "dx" else tf.float32
                      if dtype != tf.float64 else dtype, name)


@pytest.mark.parametrize("axis", (-1, 1), ids=("channels_last", "channels_first"))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_jit_train_step_gradients_through_tf_ops_group_norm(axis, dtype, xla_path):
    """`tf_ops.group_norm` and its registered gradient inside one jitted step, with an
    activation: the same as the step without jit (bits through the custom calls)."""
    rng = np.random.default_rng(3)
    shape = (2, 4, 5, 8) if axis == -1 else (2, 8, 4, 5)
    x = tf.cast(rng.normal(size=shape), dtype)
    u = tf.float64 if dtype == tf.float64 else tf.float32
    gamma = tf.Variable(tf.cast(rng.uniform(0.5, 1.5, 8), u))
    beta = tf.Variable(tf.cast(rng.uniform(-0.5, 0.5, 8), u))

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf_ops.group_norm(x, gamma, beta, groups=4, axis=axis, activation="silu")
            loss = tf.reduce_sum(tf.cast(y, u) ** 2)
        return (y, *tape.gradient(loss, [x, gamma, beta]))

    jitted = tf.function(step, jit_compile=True)(x)
    eager = step(x)
    for name, got, want in zip(("y", "dx", "dgamma", "dbeta"), jitted, eager):
        if xla_path == "custom_call":
            _same_bits(got, want, name)
        else:
            scale = max(1.0, float(tf.reduce_max(tf.abs(tf.cast(want, tf.float64)))))
            np.testing.assert_allclose(tf.cast(got, tf.float64).numpy(),
                                       tf.cast(want, tf.float64).numpy(), rtol=0,
                                       atol=TOL[dtype] * scale * 4, err_msg=name)


def _hlo(fn, *args) -> str:
    return tf.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)(stage="hlo")


@pytest.mark.parametrize("dtype", (tf.float32, tf.bfloat16), ids=("float", "bfloat16"))
def test_hlo_is_custom_calls_not_the_composite(dtype, xla_path):
    """A jitted step compiles to the two custom calls and none of the composite's
    reductions (the composite path: reductions and no custom call)."""
    _ops()
    x = tf.cast(np.random.default_rng(1).normal(size=(2, 4, 4, 8)), dtype)

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf_ops.group_norm(x, groups=4, activation="silu")
        return tape.gradient(y, x, output_gradients=tf.ones_like(y))

    hlo = _hlo(step, x)
    if xla_path == "custom_call":
        assert 'custom_call_target="tf_ops_group_norm_forward"' in hlo, hlo
        assert 'custom_call_target="tf_ops_group_norm_backward"' in hlo, hlo
        assert "API_VERSION_TYPED_FFI" in hlo, hlo
        assert " reduce(" not in hlo, hlo
    else:
        assert "custom-call" not in hlo, hlo
        assert " reduce(" in hlo, hlo


def test_empty_x_under_jit(xla_path):
    """As the kernels: NaN statistics over no elements, zero parameter gradients."""
    ops = _ops()
    x = tf.zeros((2, 0, 8))
    gamma, beta = tf.ones(8), tf.zeros(8)

    @tf.function(jit_compile=True)
    def run(x):
        y, mean, rstd = ops.tf_ops_group_norm(x=x, scale=gamma, offset=beta, groups=4)
        dx, dg, db = ops.tf_ops_group_norm_grad(dy=x, x=x, scale=gamma, offset=beta,
                                                mean=mean, rstd=rstd, groups=4)
        return y, mean, rstd, dx, dg, db

    y, mean, rstd, dx, dg, db = run(x)
    assert y.shape == x.shape and dx.shape == x.shape
    assert mean.shape == (2, 4) and np.isnan(mean.numpy()).all() and np.isnan(rstd).all()
    np.testing.assert_array_equal(dg.numpy(), np.zeros(8))
    np.testing.assert_array_equal(db.numpy(), np.zeros(8))


def test_bad_input_raises_invalid_argument_under_jit(xla_path):
    """Shapes unknown when tracing (so the shape function lets them through) are checked
    by the lowering when XLA compiles: channels not a multiple of groups, a scale of the
    wrong length, statistics of the wrong shape."""
    ops = _ops()
    spec = tf.TensorSpec([None] * 3, tf.float32)
    vec = tf.TensorSpec([None], tf.float32)

    @tf.function(jit_compile=True, input_signature=[spec, vec])
    def norm(x, gamma):
        return ops.tf_ops_group_norm(x=x, scale=gamma, offset=gamma, groups=4)[0]

    with pytest.raises(tf.errors.InvalidArgumentError, match=r"multiple of groups = 4"):
        norm(tf.zeros((2, 3, 6)), tf.ones(6))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"scale must be 1-D"):
        norm(tf.zeros((2, 3, 8)), tf.ones(6))

    stat = tf.TensorSpec([None, None], tf.float32)

    @tf.function(jit_compile=True, input_signature=[spec, stat])
    def grad(x, mean):
        return ops.tf_ops_group_norm_grad(dy=x, x=x, scale=tf.ones(8), offset=tf.zeros(8),
                                          mean=mean, rstd=mean, groups=4)[0]

    with pytest.raises(tf.errors.InvalidArgumentError, match=r"mean must have shape"):
        grad(tf.zeros((2, 3, 8)), tf.zeros((2, 2)))
