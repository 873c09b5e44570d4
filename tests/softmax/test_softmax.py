"""The softmax family's ops: softmax, log_softmax, the scaled masked softmax and their
gradients, against float64 NumPy references (softmax_refs.py), TensorFlow and Keras;
dtypes, odd lengths, specials, compute_gradient, second order, XLA, the composites under
tf_ops.portable(), bad input. One graph or one eager loop per case family."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import softmax_refs as ref
import tf_ops

DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
TOL = {tf.float16: 2e-3, tf.bfloat16: 1.6e-2, tf.float32: 2e-6, tf.float64: 1e-12}
RNG = np.random.default_rng(0)


def _close(got, want, dtype, what):
    got = np.asarray(tf.cast(got, tf.float64))
    want = np.asarray(tf.cast(tf.cast(want, dtype), tf.float64))  # rounded as stored
    tol = TOL[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"{what} {dtype.name}")


def test_softmax_and_log_softmax_values_every_dtype_and_length():
    for dtype in DTYPES:
        for cols in (1, 3, 16, 17, 33, 257):
            x = RNG.normal(0, 4, (5, cols))
            xt = tf.constant(x, dtype)
            xr = np.asarray(tf.cast(xt, tf.float64))
            _close(tf_ops.softmax(xt), ref.softmax(xr), dtype, f"softmax cols={cols}")
            _close(tf_ops.log_softmax(xt), ref.softmax(xr, log=True), dtype, f"log cols={cols}")
    # Other axes, and TensorFlow's own.
    x = tf.constant(RNG.normal(0, 3, (3, 4, 5)), tf.float32)
    for axis in (0, 1, -1):
        np.testing.assert_allclose(tf_ops.softmax(x, axis=axis), tf.nn.softmax(x, axis=axis),
                                   rtol=2e-6, atol=1e-7)
        np.testing.assert_allclose(tf_ops.log_softmax(x, axis=axis),
                                   tf.nn.log_softmax(x, axis=axis), rtol=2e-6, atol=2e-6)


def test_specials_huge_logits_minus_infinity_and_nan():
    big = np.finfo(np.float32).max
    x = tf.constant([[big, -big, 0.0], [-np.inf, 1.0, 1.0], [np.nan, 0.0, 1.0],
                     [-np.inf, -np.inf, -np.inf]], tf.float32)
    y = tf_ops.softmax(x).numpy()
    np.testing.assert_array_equal(y[0], [1.0, 0.0, 0.0])
    np.testing.assert_allclose(y[1], [0.0, 0.5, 0.5])
    assert np.isnan(y[2]).all() and np.isnan(y[3]).all()  # as tf.nn.softmax
    ly = tf_ops.log_softmax(x).numpy()
    assert ly[0, 0] == 0.0 and ly[0, 1] == -np.inf and ly[1, 0] == -np.inf
    np.testing.assert_allclose(ly[1, 1:], np.log(0.5))
    # The gradients stay finite at -inf logits (probability 0).
    with tf.GradientTape() as tape:
        xv = tf.constant([[-np.inf, 1.0, 2.0]])
        tape.watch(xv)
        loss = tf.reduce_sum(tf_ops.softmax(xv) * [[1.0, 2.0, 3.0]])
    assert np.isfinite(tape.gradient(loss, xv).numpy()).all()


def _keras_masked(x, mask):
    return keras.layers.Softmax()(x, mask=mask).numpy()


def test_masked_softmax_matches_keras_and_reference():
    b, h, q, k = 2, 3, 5, 7
    x = RNG.normal(0, 2, (b, h, q, k)).astype(np.float32)
    for mask_shape in ((b, 1, q, k), (b, h, q, k), (k,), (b, 1, 1, k)):
        mask = RNG.random(mask_shape) < 0.6
        flat = mask.reshape(-1, k) if mask.ndim > 1 else mask[None]
        flat[0] = False  # a fully masked row (and, broadcast, more)
        got = tf_ops.softmax(x, mask=mask).numpy()
        np.testing.assert_allclose(got, _keras_masked(x, mask), rtol=2e-6, atol=1e-7,
                                   err_msg=str(mask_shape))
        for dtype in DTYPES:
            xt = tf.constant(x, dtype)
            xr = np.asarray(tf.cast(xt, tf.float64))
            _close(tf_ops.softmax(xt, mask=mask, scale=0.3), ref.masked_softmax(xr, mask, float(np.float32(0.3))),
                   dtype, f"masked {mask_shape}")
    # causal alone and with a mask; float masks keep > 0.5 (as Keras).
    c = ref.causal(q, k)
    _close(tf_ops.softmax(x, causal=True), ref.masked_softmax(x, c), tf.float32, "causal")
    mask = RNG.random((b, 1, q, k)) < 0.7
    _close(tf_ops.softmax(x, mask=mask, causal=True, scale=2.0),
           ref.masked_softmax(x, mask & c, 2.0), tf.float32, "causal+mask")
    _close(tf_ops.softmax(x, mask=mask.astype(np.float32)), ref.masked_softmax(x, mask),
           tf.float32, "float mask")
    # Masked positions ignore what they hold (NaN, inf): as Keras.
    xs = x.copy()
    xs[..., 0] = np.nan
    xs[..., 1] = np.inf
    m = np.ones(k, bool)
    m[:2] = False
    np.testing.assert_allclose(tf_ops.softmax(xs, mask=m), _keras_masked(xs, m), rtol=2e-6,
                               atol=1e-7)
    # The same in rows long enough for the vector loops and their tails, every dtype: the
    # engine reads masked positions too (a select, not a conditional load) and drops them.
    xl = RNG.normal(0, 2, (4, 45)).astype(np.float32)
    kept = RNG.random((4, 45)) < 0.6
    xl[~kept] = np.where(RNG.random(int((~kept).sum())) < 0.5, np.nan, np.inf)
    for dtype in DTYPES:
        xr = np.asarray(tf.cast(tf.constant(np.where(kept, xl, 0), dtype), tf.float64))
        _close(tf_ops.softmax(tf.constant(xl, dtype), mask=kept, scale=0.7),
               ref.masked_softmax(xr, kept, float(np.float32(0.7))), dtype,
               "long rows, NaN and inf where masked")


def test_gradients_against_compute_gradient_float64():
    b, q, k = 2, 3, 6
    x = tf.constant(RNG.normal(0, 1, (b, 1, q, k)))
    w = tf.constant(RNG.normal(0, 1, (b, 1, q, k)))
    mask = RNG.random((b, 1, q, k)) < 0.7
    mask[0, 0, 0] = False
    cases = {
        "softmax": lambda v: tf_ops.softmax(v) * w,
        "log_softmax": lambda v: tf_ops.log_softmax(v) * w,
        "masked": lambda v: tf_ops.softmax(v, mask=mask, scale=0.7, causal=True) * w,
        "axis1": lambda v: tf_ops.softmax(v, axis=2) * w,
    }
    for name, f in cases.items():
        theo, num = tf.test.compute_gradient(f, [x])
        np.testing.assert_allclose(theo[0], num[0], rtol=1e-6, atol=1e-7, err_msg=name)
        # Second order: the gradient of the gradient (composed around the grad ops).
        def first(v, f=f):
            with tf.GradientTape() as t:
                t.watch(v)
                y = tf.reduce_sum(f(v) ** 2)
            return t.gradient(y, v)
        theo, num = tf.test.compute_gradient(first, [x])
        np.testing.assert_allclose(theo[0], num[0], rtol=1e-5, atol=1e-6, err_msg=name + " 2nd")


def test_gradients_match_tensorflow_every_dtype():
    for dtype in DTYPES:
        x = tf.constant(RNG.normal(0, 2, (4, 19)), dtype)
        g = tf.constant(RNG.normal(0, 1, (4, 19)), dtype)
        x64 = tf.cast(x, tf.float64)
        for ours, theirs in ((tf_ops.softmax, tf.nn.softmax), (tf_ops.log_softmax, tf.nn.log_softmax)):
            with tf.GradientTape(persistent=True) as tape:
                tape.watch([x, x64])
                a = ours(x)
                e = theirs(x64)
            got = tape.gradient(a, x, output_gradients=g)
            want = tape.gradient(e, x64, output_gradients=tf.cast(g, tf.float64))
            tol = TOL[dtype] * (4 if dtype in (tf.float16, tf.bfloat16) else 1)
            np.testing.assert_allclose(np.asarray(tf.cast(got, tf.float64)), want.numpy(),
                                       rtol=tol, atol=tol, err_msg=f"{ours.__name__} {dtype}")


def test_xla_and_portable_composites_match_the_kernels():
    x = tf.constant(RNG.normal(0, 2, (2, 2, 4, 9)), tf.float32)
    mask = tf.constant(RNG.random((2, 1, 4, 9)) < 0.6)
    w = tf.constant(RNG.normal(0, 1, (2, 2, 4, 9)), tf.float32)

    def step(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            ys = [tf_ops.softmax(v), tf_ops.log_softmax(v),
                  tf_ops.softmax(v, mask=mask, scale=0.5, causal=True)]
            loss = sum(tf.reduce_sum(y * w) for y in ys)
        return ys + [tape.gradient(loss, v)]

    eager = step(x)
    jit = tf.function(step, jit_compile=True)(x)
    graph = tf.function(step)
    with tf_ops.portable():
        portable = step(x)
        ops = {op.type for op in graph.get_concrete_function(x).graph.get_operations()}
    assert not [t for t in ops if t.startswith("TfOps>")]
    for got in (jit, portable):
        for a, e in zip(got, eager):
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
    for dtype in (tf.bfloat16, tf.float64):  # the lowerings' other compute types
        xd = tf.cast(x, dtype)
        got = tf.function(lambda v: tf_ops.softmax(v, mask=mask), jit_compile=True)(xd)
        _close(got, tf_ops.softmax(xd, mask=mask), dtype, "xla masked")


def test_bad_input_gets_clear_errors():
    x = tf.zeros([2, 3, 4])
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="mask must broadcast"):
        tf_ops.softmax(x, mask=tf.ones([2, 2, 4], tf.bool))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="rank >= 1"):
        tf_ops.softmax(tf.constant(1.0))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="causal"):
        tf_ops.softmax(tf.zeros([4]), causal=True)
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="same shape"):
        tf_ops.softmax_grad(tf.zeros([2, 3]), tf.zeros([2, 4]))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="finite"):
        tf_ops.softmax(x, mask=tf.ones([4], tf.bool), scale=float("inf"))
    # Unknown dimensions pass the shape function: the kernel checks at run time.
    f = tf.function(lambda a, m: tf_ops.softmax(a, mask=m),
                    input_signature=[tf.TensorSpec(None, tf.float32), tf.TensorSpec(None, tf.bool)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="mask must broadcast"):
        f(x, tf.ones([3, 3], tf.bool))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="mask must broadcast"):
        tf.function(lambda a, m: tf_ops.softmax(a, mask=m), jit_compile=True)(
            x, tf.ones([3, 3], tf.bool))
