"""`tf_ops.layer_norm` and `tf_ops.rms_norm` (the norm family, issue 24): values against
a float64 NumPy reference in four dtypes (rows of 1 to 16384, odd lengths, axis lists,
the residual form), gradients (`tf.test.compute_gradient`, and against the float64
reference), second order, XLA, bad input at graph build and at run time, and the
determinism of dgamma/dbeta across thread counts. Lean: each case family is one loop
over eager calls or one traced function."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tf_ops

DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
# Relative to max(|value|, 1): a few roundings of the output dtype (the statistics are
# float32, float64 for float64).
TOL = {tf.float16: 4e-3, tf.bfloat16: 3e-2, tf.float32: 2e-5, tf.float64: 1e-12}


def ref(x, gamma, beta, axes, eps, centered, r=None, dy=None, dh=None):
    """float64 forward (and backward when dy is given), NumPy."""
    x = np.asarray(x, np.float64)
    if r is not None:
        x = x + np.asarray(r, np.float64)
    axes = tuple(axes)
    mu = x.mean(axis=axes, keepdims=True) if centered else 0.0
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = (x - mu) * rstd
    shape = [x.shape[a] if a in axes else 1 for a in range(x.ndim)]
    g = np.reshape(gamma, shape).astype(np.float64)
    b = 0.0 if beta is None else np.reshape(beta, shape).astype(np.float64)
    y = xhat * g + b
    if dy is None:
        return x, y
    dy = np.asarray(dy, np.float64)
    n = np.prod([x.shape[a] for a in axes])
    gg = dy * g
    c_mean = gg.sum(axis=axes, keepdims=True) / n if centered else 0.0
    c_proj = (gg * xhat).sum(axis=axes, keepdims=True) / n
    dx = rstd * (gg - c_mean - xhat * c_proj)
    if dh is not None:
        dx = dx + np.asarray(dh, np.float64)
    others = tuple(a for a in range(x.ndim) if a not in axes)
    dgamma = (dy * xhat).sum(axis=others).reshape(np.shape(gamma))
    dbeta = dy.sum(axis=others).reshape(np.shape(gamma))
    return x, y, dx, dgamma, dbeta


def close(got, want, tol, what):
    got = np.asarray(tf.cast(got, tf.float64))
    want = np.asarray(want, np.float64)
    err = np.abs(got - want) / np.maximum(np.abs(want), 1.0)
    assert np.all(np.isfinite(got)), what
    assert err.max(initial=0.0) <= tol, f"{what}: max rel err {err.max():.3g} > {tol:.3g}"


def call(centered, x, gamma, beta, axes, eps, r=None):
    if centered:
        return tf_ops.layer_norm(x, gamma, beta, axis=axes, epsilon=eps, residual=r)
    return tf_ops.rms_norm(x, gamma, axis=axes, epsilon=eps, residual=r)


CASES = [((3, 7), [-1]), ((4, 64), [1]), ((2, 1031), [-1]), ((1, 16384), [-1]),
         ((2, 3, 5), [-2, -1]), ((2, 3, 4), [1]), ((3, 2, 4), [0, 2]), ((5, 1), [-1])]


def test_values_and_gradients_against_float64_reference():
    rng = np.random.default_rng(24)
    for dtype in DTYPES:
        tol = TOL[dtype]
        for shape, axes in CASES:
            nax = sorted(a % len(shape) for a in axes)
            pshape = [shape[a] for a in nax]
            for centered in (True, False):
                for residual in (False, True):
                    what = f"{dtype.name} {shape} axes={axes} centered={centered} residual={residual}"
                    x = tf.cast(rng.normal(1.0, 2.0, shape), dtype)
                    r = tf.cast(rng.normal(size=shape), dtype) if residual else None
                    u = tf.float64 if dtype == tf.float64 else tf.float32
                    gamma = tf.constant(rng.uniform(0.5, 1.5, pshape), u)
                    beta = tf.constant(rng.normal(size=pshape), u) if centered else None
                    dy = tf.cast(rng.normal(size=shape), dtype)
                    dh = tf.cast(rng.normal(size=shape), dtype) if residual else None
                    with tf.GradientTape() as tape:
                        tape.watch([x, gamma] + ([beta] if centered else []) + ([r] if residual else []))
                        out = call(centered, x, gamma, beta, axes, 1e-3, r)
                        h, y = out if residual else (None, out)
                    targets = [x, gamma] + ([beta] if centered else []) + ([r] if residual else [])
                    grads = tape.gradient([y] + ([h] if residual else []), targets,
                                          output_gradients=[dy] + ([dh] if residual else []))
                    xs = x.numpy().astype(np.float64)
                    rs = None if r is None else r.numpy().astype(np.float64)
                    if residual:
                        # h is x + r rounded to the dtype: the reference normalises it.
                        want_h = tf.cast(tf.cast(x, tf.float64) + tf.cast(r, tf.float64), dtype)
                        np.testing.assert_array_equal(np.asarray(tf.cast(h, tf.float64)),
                                                      np.asarray(tf.cast(want_h, tf.float64)))
                        xs, rs = np.asarray(tf.cast(h, tf.float64)), None
                    assert y.dtype == dtype and y.shape == shape, what
                    _, want_y, want_dx, want_dg, want_db = ref(
                        xs, gamma.numpy(), None if beta is None else beta.numpy(), nax, np.float32(1e-3),
                        centered, rs, dy.numpy().astype(np.float64),
                        None if dh is None else dh.numpy().astype(np.float64))
                    close(y, want_y, tol, what + " y")
                    close(grads[0], want_dx, 4 * tol, what + " dx")
                    rows = np.prod(shape) / np.prod(pshape)
                    close(grads[1], want_dg, tol * (np.sqrt(rows) + 2), what + " dgamma")
                    if centered:
                        close(grads[2], want_db, tol * (np.sqrt(rows) + 2), what + " dbeta")
                    if residual:
                        np.testing.assert_array_equal(grads[-1].numpy(), grads[0].numpy())
                    assert grads[1].dtype == u


def test_compute_gradient_float64_first_and_second_order():
    rng = np.random.default_rng(7)
    x = tf.constant(rng.normal(size=(3, 6)))
    r = tf.constant(rng.normal(size=(3, 6)))
    g = tf.constant(rng.uniform(0.5, 1.5, (6,)))
    b = tf.constant(rng.normal(size=(6,)))
    fns = [
        lambda x, g, b: tf_ops.layer_norm(x, g, b, epsilon=1e-2),
        lambda x, g: tf_ops.rms_norm(x, g, epsilon=1e-2),
        lambda x, r, g, b: tf.add_n(list(tf_ops.layer_norm(x, g, b, residual=r, epsilon=1e-2))),
        lambda x, r, g: tf.add_n(list(tf_ops.rms_norm(x, g, residual=r, epsilon=1e-2))),
        lambda x: tf_ops.layer_norm(x, axis=[0, 1]),
    ]
    args = [(x, g, b), (x, g), (x, r, g, b), (x, r, g), (x,)]
    for fn, a in zip(fns, args):
        theoretical, numerical = tf.test.compute_gradient(fn, list(a))
        for t, n in zip(theoretical, numerical):
            np.testing.assert_allclose(t, n, rtol=1e-6, atol=1e-6)

    # Second order: the gradient of the grad ops (composed from TF ops).
    def grad_of(centered):
        def f(x, g):
            with tf.GradientTape() as tape:
                tape.watch([x, g])
                y = tf_ops.layer_norm(x, g, epsilon=1e-2) if centered else tf_ops.rms_norm(x, g, epsilon=1e-2)
                loss = tf.reduce_sum(y * tf.sin(x))
            dx, dg = tape.gradient(loss, [x, g])
            return tf.reduce_sum(dx * dx) + tf.reduce_sum(dg * tf.cos(g))
        return f

    for centered in (True, False):
        theoretical, numerical = tf.test.compute_gradient(grad_of(centered), [x, g])
        for t, n in zip(theoretical, numerical):
            np.testing.assert_allclose(t, n, rtol=1e-5, atol=1e-5)


def test_xla_lowering_matches_the_kernels():
    from tf_ops.python.norm import functions as norm

    # Lowered, not the composite fallback, in a library built with its lowerings (a
    # TensorFlow without the XLA headers, as 2.19's, runs the composites: none lowered).
    expected = set(norm.OP_NAMES) if tf_ops.build_info().xla else set()
    assert norm.XLA_LOWERED == expected
    rng = np.random.default_rng(3)

    def step(centered, residual):
        def f(x, r, g, b, dy):
            with tf.GradientTape() as tape:
                tape.watch([x, r, g, b])
                if centered:
                    out = tf_ops.layer_norm(x, g, b, axis=[-2, -1], residual=r if residual else None)
                else:
                    out = tf_ops.rms_norm(x, g, axis=[-2, -1], residual=r if residual else None)
                y = out[1] if residual else out
                loss = tf.reduce_sum(tf.cast(y, tf.float32) * tf.cast(dy, tf.float32))
                if residual:
                    loss += tf.reduce_sum(tf.cast(out[0], tf.float32))
            grads = tape.gradient(loss, [x, r, g, b] if residual else [x, g, b],
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
            return [y] + grads
        return f

    kinds = [(c, r) for c in (True, False) for r in (False, True)]
    for dtype, cases in ((tf.float32, kinds), (tf.bfloat16, kinds[1:3]), (tf.float64, kinds[::3])):
        u = tf.float64 if dtype == tf.float64 else tf.float32
        x = tf.cast(rng.normal(size=(6, 5, 13)), dtype)
        r = tf.cast(rng.normal(size=(6, 5, 13)), dtype)
        g = tf.constant(rng.uniform(0.5, 1.5, (5, 13)), u)
        b = tf.constant(rng.normal(size=(5, 13)), u)
        dy = tf.cast(rng.normal(size=(6, 5, 13)), dtype)
        for centered, residual in cases:
            f = step(centered, residual)
            jit = tf.function(f, jit_compile=True)
            got, want = jit(x, r, g, b, dy), f(x, r, g, b, dy)
            for a, e in zip(got, want):
                close(a, e.numpy().astype(np.float64), 2 * TOL[dtype] + 1e-5,
                      f"xla {dtype.name} {centered} {residual}")


def test_constant_rows_give_beta():
    x = tf.fill([4, 300], 2.5)
    beta = tf.linspace(-1.0, 1.0, 300)
    for dtype in DTYPES:
        y = tf_ops.layer_norm(tf.cast(x, dtype), tf.ones([300]), beta)
        close(y, np.broadcast_to(beta.numpy(), (4, 300)), TOL[dtype], f"constant {dtype.name}")
        y = tf_ops.rms_norm(tf.zeros([2, 5], dtype))
        np.testing.assert_array_equal(tf.cast(y, tf.float32).numpy(), 0.0)


def test_bad_input_at_graph_build_and_run_time():
    x = tf.zeros([2, 4])
    spec = tf.TensorSpec([None, None], tf.float32)
    cases = [
        (lambda x: tf_ops.layer_norm(x, tf.ones([3])), r"gamma must .*\[4\].*got gamma \(3,\)"),
        (lambda x: tf_ops.layer_norm(x, None, tf.ones([5])), r"beta must"),
        (lambda x: tf_ops.rms_norm(x, residual=tf.zeros([2, 5])), r"x and residual must have the same shape"),
        (lambda x: tf_ops.layer_norm(x, epsilon=-1.0), r"epsilon' must be finite and >= 0"),
        (lambda x: tf_ops.rms_norm(x, epsilon=float("nan")), r"epsilon' must be finite and >= 0"),
        (lambda x: tf_ops.layer_norm(x, axis=2), r"out of bounds"),
        (lambda x: tf_ops.layer_norm(x, axis=[0, -2]), r"repeated"),
    ]
    for fn, msg in cases:
        with pytest.raises(ValueError, match=msg):
            fn(x)  # eager: checked in Python before the op
        with pytest.raises(ValueError, match=msg):
            tf.function(fn).get_concrete_function(tf.TensorSpec([2, 4]))
    # Shapes unknown at graph build: the kernels' run-time checks.
    lazy = tf.function(lambda x, g: tf_ops.layer_norm(x, g), input_signature=[spec, tf.TensorSpec([None])])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"gamma must be 1-D.*\(4\).*x \[2,4\].*gamma \[3\]"):
        lazy(x, tf.ones([3]))
    lazy_r = tf.function(lambda x, r: tf_ops.rms_norm(x, residual=r), input_signature=[spec, spec])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"x and residual must have the same shape"):
        lazy_r(x, tf.zeros([2, 5]))
    # Grad ops with inputs that disagree: at graph build and in eager calls.
    from tf_ops.python.norm import functions as norm
    grad = norm.op_fn("LayerNormGrad")
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=r"x and dy must have the same shape"):
        grad(tf.zeros([2, 5]), x, tf.ones([4]), tf.zeros([2]), tf.ones([2]))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=r"rstd must have x's shape"):
        grad(x, x, tf.ones([4]), tf.zeros([2]), tf.ones([3]))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=r"dtype U must be float"):
        norm.op_fn("RmsNorm")(x, tf.ones([4], tf.float64))


def test_dgamma_dbeta_bit_identical_across_thread_counts():
    """The backward's tiles come from the shape alone: 1 or 2 threads, same bits."""
    rng = np.random.default_rng(5)
    values = rng.normal(size=(3000, 96)).astype(np.float32)
    results = []
    for threads in (1, 2, 1):
        graph = tf.Graph()
        with graph.as_default():
            x = tf.constant(values)
            gamma, beta = tf.ones([96]), tf.zeros([96])
            with tf.GradientTape() as tape:
                tape.watch([gamma, beta])
                loss = tf.reduce_sum(tf_ops.layer_norm(x, gamma, beta) * tf.sin(x))
            fetches = tape.gradient(loss, [gamma, beta])
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                          inter_op_parallelism_threads=threads,
                                          use_per_session_threads=True)
        with tf.compat.v1.Session(graph=graph, config=config) as sess:
            results.append(sess.run(fetches))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)
