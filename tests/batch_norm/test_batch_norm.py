"""The batch-norm ops (`tf_ops.batch_norm`, `batch_norm_inference`, their grad ops and
`batch_norm_input_grad`, the training grad's second pass):
values against float64 NumPy references for every activation, four dtypes, channels-last
and channels-first; gradients with `tf.test.compute_gradient` (first and second order);
the XLA path; bad input at graph building and at run time; determinism; an empty batch.
The Keras layer is tests/batch_norm/test_batch_norm_layer.py. Lean: many cases per call, few calls.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from tf_ops.python.core import op_info
from op_specs import SPECS

EPS = 1e-3
ACTIVATIONS = [None] + [s.name for s in SPECS]
_SPEC = {s.name: s for s in SPECS}
_NAME = {s.name: op_info.snake_case(s.name) for s in SPECS}
TOL = {tf.float16: 4e-3, tf.bfloat16: 3e-2, tf.float32: 2e-5, tf.float64: 1e-11}


def _act_ref(name):
    """f and f' in float64."""
    if name is None:
        return (lambda z: z), (lambda z: np.ones_like(z))
    spec = _SPEC[name]
    # The attributes as the ops hold them: float32.
    attrs = {a.name: float(np.float32(a.default)) if a.type is float else a.default
             for a in op_info.attrs(op_info.NAMESPACE + name)}

    def deriv(z):
        v = spec.ref(z, **attrs) if spec.grad_takes_outputs else z
        return spec.ref_grad(np.ones_like(z), v, **attrs)

    return (lambda z: spec.ref(z, **attrs)), deriv


def _ref(x, gamma, beta, dy, dm, dv, axis, name):
    """Training forward and backward, inference forward and backward, in float64."""
    f, df = _act_ref(name)
    x = x.astype(np.float64)
    axes = tuple(d for d in range(x.ndim) if d != axis % x.ndim)
    shape = [1] * x.ndim
    shape[axis] = -1
    b = lambda v: np.reshape(v.astype(np.float64), shape)
    n = x.size // x.shape[axis]
    mean = x.mean(axes)
    var = ((x - b(mean)) ** 2).mean(axes)
    r = 1.0 / np.sqrt(b(var) + np.float32(EPS))
    s = b(gamma) * r
    z = x * s + (b(beta) - b(mean) * s)
    y = f(z)
    dz = dy * df(z)
    xc = x - b(mean)
    sdz, sdzx = dz.sum(axes), (dz * xc).sum(axes)
    dx = s * (dz - b(sdz) / n - xc * r * r * b(sdzx) / n) + b(dm) / n + 2 * b(dv) * xc / n
    return dict(y=y, mean=mean, var=var, dx=dx, dgamma=np.reshape(r, -1) * sdzx, dbeta=sdz,
                dx_inf=s * dz)


def _check(got, want, tol, what):
    got = np.asarray(tf.cast(got, tf.float64))
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale, err_msg=what)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64],
                         ids=lambda d: d.name)
def test_values_against_float64_reference(dtype):
    """All four ops, every activation, NHWC / NCHW / rank 2 and 5, with and without
    gamma and beta: one eager call per op and case."""
    rng = np.random.default_rng(23)
    u = tf.float64 if dtype == tf.float64 else tf.float32
    cases = [((4, 3, 5, 6), -1), ((3, 5, 4, 2), 1), ((17, 9), -1), ((2, 3, 2, 2, 4), 1)]
    for shape, axis in cases:
        c = shape[axis]
        x = tf.cast(3.0 + 2.0 * rng.standard_normal(shape), dtype)
        dy = tf.cast(rng.standard_normal(shape), dtype)
        xs, dys = np.asarray(tf.cast(x, tf.float64)), np.asarray(tf.cast(dy, tf.float64))
        gamma, beta = 1 + 0.3 * rng.standard_normal(c), 0.3 * rng.standard_normal(c)
        dm, dv = rng.standard_normal(c), rng.standard_normal(c)
        gamma, beta, dm, dv = (np.asarray(tf.cast(tf.cast(v, u), tf.float64))
                               for v in (gamma, beta, dm, dv))
        for k, name in enumerate(ACTIVATIONS):
            affine = k % 2 == 0
            g, b = (gamma, beta) if affine else (np.ones(c), np.zeros(c))
            ref = _ref(xs, g, b, dys, dm, dv, axis, name)
            act = None if name is None else _NAME[name]
            what = f"{name} {shape} axis={axis} {dtype.name}"
            tol = TOL[dtype]
            y, mean, var = tf_ops.batch_norm(x, g if affine else None, b if affine else None,
                                             axis=axis, epsilon=EPS, activation=act)
            assert y.dtype == dtype and mean.dtype == u
            # The statistics are computed from x in float32 or float64: tight.
            stat_tol = {tf.float64: 1e-12, tf.float32: 1e-6}.get(dtype, 1e-5)  # float32 sums
            _check(mean, ref["mean"], stat_tol, what + " mean")
            _check(var, ref["var"], stat_tol, what + " var")
            _check(y, ref["y"], tol, what + " y")
            dx, dg, db = tf_ops.batch_norm_grad(dy, x, g, b, mean, var, dm, dv, axis=axis,
                                                epsilon=EPS, activation=act)
            _check(dx, ref["dx"], 4 * tol, what + " dx")
            _check(dg, ref["dgamma"], tol, what + " dgamma")
            _check(db, ref["dbeta"], tol, what + " dbeta")
            yi = tf_ops.batch_norm_inference(x, mean, var, g, b, axis=axis, epsilon=EPS,
                                             activation=act)
            _check(yi, ref["y"], tol, what + " inference y")
            dxi, dgi, dbi = tf_ops.batch_norm_inference_grad(dy, x, g, b, mean, var, axis=axis,
                                                             epsilon=EPS, activation=act)
            _check(dxi, ref["dx_inf"], tol, what + " inference dx")
            _check(dgi, ref["dgamma"], tol, what + " inference dgamma")
            _check(dbi, ref["dbeta"], tol, what + " inference dbeta")
            # The training grad is the inference grad's sums, then the input grad
            # (synchronized batch norm runs the halves with an all-reduce between).
            dx2 = tf_ops.batch_norm_input_grad(dy, x, g, b, mean, var, dgi, dbi,
                                               xs.size // c, dm, dv, axis=axis,
                                               epsilon=EPS, activation=act)
            np.testing.assert_array_equal(dx2, dx, err_msg=what + " input grad")


def test_every_keras_activation_function_resolves_as_its_name():
    """A keras.activations function resolves as its name does, for every name the
    resolver accepts: the function list is derived from the activation table, so a
    new table row (or Keras alias) is accepted as a function with no second list."""
    from tf_ops.python.activation import resolver
    import keras
    names = [n for n in dir(keras.activations) if callable(getattr(keras.activations, n))]
    accepted = []
    for name in names:
        try:
            by_name = resolver.resolve(name)
        except ValueError:
            continue
        accepted.append(name)
        assert resolver.resolve(getattr(keras.activations, name)) == by_name, name
    # Every table row (and the identity, and Keras's names for rows) is among them.
    assert {e.function for e in resolver.ACTIVATIONS} <= set(accepted)
    assert {"relu", "silu", "hard_silu", "linear"} <= set(accepted)


def test_activation_spellings():
    x = tf.constant(np.random.default_rng(1).standard_normal((8, 3)), tf.float32)
    relu = tf_ops.batch_norm(x, activation="relu")[0]
    np.testing.assert_array_equal(relu, tf_ops.batch_norm(x, activation="leaky_relu", alpha=0.0)[0])
    np.testing.assert_array_equal(relu, tf_ops.batch_norm(x, activation=tf.keras.activations.relu)[0])
    np.testing.assert_array_equal(tf_ops.batch_norm(x, activation=tf_ops.swish)[0],
                                  tf_ops.batch_norm(x, activation="silu")[0])
    np.testing.assert_array_equal(tf_ops.batch_norm(x, activation="tf_ops>gelu", approximate=True)[0],
                                  tf_ops.batch_norm(x, activation="gelu", approximate=True)[0])
    for bad, match in [("softmax", "unknown activation"), (tf.nn.relu6, "cannot be fused"),
                       ("linear", None)]:
        if match is None:
            tf_ops.batch_norm(x, activation=bad)
            continue
        with pytest.raises(ValueError, match=match):
            tf_ops.batch_norm(x, activation=bad)
    with pytest.raises(ValueError, match="no attribute 'beta'"):
        tf_ops.batch_norm(x, activation="gelu", beta=2.0)


def _rel_error(theoretical, numerical):
    worst = 0.0
    for t, n in zip(theoretical, numerical):
        worst = max(worst, float(np.max(np.abs(t - n), initial=0.0)) / max(1.0, float(np.max(np.abs(n), initial=0.0))))
    return worst


@pytest.mark.parametrize("axis", [-1, 1])
def test_gradients_with_compute_gradient(axis):
    """First order of both forward ops (all their inputs, the statistics outputs
    included), and second order through the grad ops' composites, in float64."""
    rng = np.random.default_rng(5)
    shape = (3, 4, 2, 3) if axis == 1 else (3, 2, 3, 4)
    x = tf.constant(1 + rng.standard_normal(shape))
    g = tf.constant(1 + 0.3 * rng.standard_normal(4))
    b = tf.constant(0.3 * rng.standard_normal(4))
    m = tf.constant(0.5 * rng.standard_normal(4))
    v = tf.constant(1 + rng.random(4))
    w = tf.constant(rng.standard_normal(shape))
    # Smooth at the samples (a kink spoils finite differences); one per layout.
    for act in (("swish", None) if axis == -1 else ("elu",)):
        def train(x, g, b, act=act):
            y, mean, var = tf_ops.batch_norm(x, g, b, axis=axis, activation=act)
            return tf.reduce_sum(y * w) + 0.7 * tf.reduce_sum(mean * g) + 0.3 * tf.reduce_sum(var * b)

        def infer(x, g, b, m, v, act=act):
            return tf.reduce_sum(w * tf_ops.batch_norm_inference(x, m, v, g, b, axis=axis, activation=act))

        assert _rel_error(*tf.test.compute_gradient(train, [x, g, b])) < 2e-4, act
        assert _rel_error(*tf.test.compute_gradient(infer, [x, g, b, m, v])) < 2e-4, act

    def second(x, g, b):
        with tf.GradientTape() as tape:
            tape.watch([x, g, b])
            y = tf_ops.batch_norm(x, g, b, axis=axis, activation="gelu")[0]
            loss = tf.reduce_sum(y * w)
        dx, dg = tape.gradient(loss, [x, g])
        return tf.reduce_sum(dx * w) + tf.reduce_sum(dg)

    def second_inf(x, g, m):
        with tf.GradientTape() as tape:
            tape.watch([x, g])
            loss = tf.reduce_sum(w * tf_ops.batch_norm_inference(x, m, v, g, b, axis=axis, activation="swish"))
        dx, dg = tape.gradient(loss, [x, g])
        return tf.reduce_sum(dx * w) + tf.reduce_sum(dg)

    assert _rel_error(*tf.test.compute_gradient(second, [x, g, b])) < 1e-5
    assert _rel_error(*tf.test.compute_gradient(second_inf, [x, g, m])) < 1e-5

    # The input grad's own gradient (every input independent), through its composite.
    dgam, dbet = tf.constant(rng.standard_normal(4)), tf.constant(rng.standard_normal(4))

    def input_grad(dy, x, g, m, v, dgam, dbet):
        dx = tf_ops.batch_norm_input_grad(dy, x, g, b, m, v, dgam, dbet, 40.0, 0.3 * g, 0.2 * m,
                                          axis=axis, activation="swish")
        return tf.reduce_sum(dx * w)

    assert _rel_error(*tf.test.compute_gradient(input_grad, [w * 0.5, x, g, m, v, dgam, dbet])) < 1e-5


def _all_four(axis, act):
    """A step through all four ops and their gradients (the statistics outputs' too)."""
    def step(x, g, b, dy):
        with tf.GradientTape() as tape:
            tape.watch([x, g, b])
            y, mean, var = tf_ops.batch_norm(x, g, b, axis=axis, activation=act)
            yi = tf_ops.batch_norm_inference(x, tf.stop_gradient(mean) + 0.1,
                                             tf.stop_gradient(var) + 0.2, g, b, axis=axis,
                                             activation=act)
            loss = (tf.reduce_sum(tf.cast(y, tf.float64) * tf.cast(dy, tf.float64))
                    + tf.reduce_sum(tf.cast(yi, tf.float64) * tf.cast(dy, tf.float64) ** 2)
                    + tf.reduce_sum(tf.cast(mean * g, tf.float64))
                    + tf.reduce_sum(tf.cast(var * b, tf.float64)))
        dx2 = tf_ops.batch_norm_input_grad(dy, x, g, b, mean, var, g * 0.5, b - 0.2, 7.0,
                                           b * 0.1, g * 0.3, axis=axis, activation=act)
        return [y, mean, var, yi, dx2] + tape.gradient(loss, [x, g, b])
    return step


def test_xla_lowering_matches_the_kernels(xla_path):
    """Under jit_compile the ops are lowered (custom calls into the engine for the
    training ops, or the composite): values and gradients match the kernels, four
    dtypes, both layouts, every activation once; through the custom calls the training
    op's outputs are the kernel's bits."""
    from tf_ops.python.batch_norm import functions

    # Lowered in a library built with its lowerings (a TensorFlow without the XLA
    # headers, as 2.19's, builds the composites: none lowered).
    expected = set(functions.OPS) if tf_ops.build_info().xla else set()
    assert functions._LOWERED == expected
    rng = np.random.default_rng(9)
    # Every activation once (an XLA compile each is the cost here), every dtype.
    cases = [(tf.float32, (5, 4, 3, 6), -1, [None, "relu", "elu", "gelu"]),
             (tf.float32, (4, 6, 3, 5), 1, ["mish", "hard_swish"]),
             (tf.bfloat16, (4, 6, 3, 5), 1, ["celu"]), (tf.float16, (5, 4, 3, 6), -1, ["sigmoid"]),
             (tf.float64, (5, 6, 7), 1, ["swish"])]
    for dtype, shape, axis, names in cases:
        u = tf.float64 if dtype == tf.float64 else tf.float32
        c = shape[axis]
        x = tf.cast(rng.standard_normal(shape) * 2 + 1, dtype)
        dy = tf.cast(rng.standard_normal(shape), dtype)
        g = tf.constant(1 + 0.3 * rng.standard_normal(c), u)
        b = tf.constant(0.3 * rng.standard_normal(c), u)
        # Every activation of the case in one function: one XLA compile per case.
        def step(x, g, b, dy):
            return [out for act in names for out in _all_four(axis, act)(x, g, b, dy)]

        want = tf.function(step)(x, g, b, dy)
        got = tf.function(step, jit_compile=True)(x, g, b, dy)
        tol = 2 * TOL[dtype] + 1e-5 if dtype != tf.float64 else 1e-10
        per_act = len(got) // len(names)
        for i, (a, e) in enumerate(zip(got, want)):
            what = f"xla {dtype.name} {names[i // per_act]} axis={axis} output {i % per_act}"
            if xla_path == "custom_call" and tf_ops.build_info().xla and i % per_act < 3:
                np.testing.assert_array_equal(np.asarray(tf.cast(a, tf.float64)),
                                              np.asarray(tf.cast(e, tf.float64)), err_msg=what)
            e = np.asarray(tf.cast(e, tf.float64))
            _check(a, e, tol, what)
    # An empty batch: NaN statistics, as the kernels.
    empty = tf.function(lambda x: tf_ops.batch_norm(x), jit_compile=True)(tf.zeros([0, 3]))
    assert empty[0].shape == (0, 3) and np.isnan(empty[1].numpy()).all()


def test_portable_matches_the_ops():
    """tf_ops.portable() builds the composite (Keras's math): same values, same
    gradients."""
    rng = np.random.default_rng(9)
    for dtype in (tf.bfloat16, tf.float32):
        x = tf.cast(rng.standard_normal((4, 5, 5, 3)) * 2 + 1, dtype)
        dy = tf.cast(rng.standard_normal((4, 5, 5, 3)), dtype)
        g, b = tf.constant([1.5, 0.5, 1.0]), tf.constant([0.1, -0.2, 0.3])
        step = tf.function(_all_four(-1, "swish"))
        want = step(x, g, b, dy)
        with tf_ops.portable():
            portable = tf.function(_all_four(-1, "swish"))(x, g, b, dy)
        tol = 30 * TOL[dtype] if dtype == tf.bfloat16 else 1e-4
        for i, (p, e) in enumerate(zip(portable, want)):
            _check(p, np.asarray(tf.cast(e, tf.float64)), tol, f"portable {dtype.name} output {i}")


def test_bad_input_at_graph_building_and_run_time():
    x4 = np.zeros([2, 3, 4, 5], np.float32)
    good = np.ones([5], np.float32)
    graph_cases = [
        (lambda: tf_ops.batch_norm(x4, tf.ones([4])), r"scale must (have|be 1-D with) one element per channel"),
        (lambda: tf_ops.batch_norm(x4, axis=1, offset=tf.ones([5])), r"offset must (have|be 1-D with) one element"),
        (lambda: tf_ops.batch_norm(tf.zeros([5])), r"rank >= 2"),
        (lambda: tf_ops.batch_norm(x4, axis=4), r"'axis' must be in \[-4, 4\)"),
        (lambda: tf_ops.batch_norm(x4, epsilon=0.0), r"'epsilon' must be finite and > 0"),
        (lambda: tf_ops.batch_norm(x4, epsilon=-1.0), r"'epsilon' must be finite and > 0"),
        (lambda: tf_ops.batch_norm(x4, epsilon=float("nan")), r"'epsilon' must be finite"),
        (lambda: tf_ops.batch_norm(x4, epsilon=float("inf")), r"'epsilon' must be finite"),
        (lambda: tf_ops.batch_norm(x4, activation="celu", alpha=0.0), r"alpha.*> 0"),
        (lambda: tf_ops.batch_norm_inference(x4, tf.ones([5, 1]), good), r"mean must be 1-D"),
        (lambda: tf_ops.batch_norm_inference(x4, good, tf.ones([6])), r"variance must (have|be 1-D with) one element"),
        (lambda: tf_ops.batch_norm_grad(tf.zeros([2, 3, 4, 4]), x4, good, good, good, good),
         r"y_backprop and x must have the same shape"),
        (lambda: tf_ops.batch_norm_inference_grad(x4, x4, good, good, good, tf.ones([2])),
         r"variance must (have|be 1-D with) one element"),
        (lambda: tf_ops.batch_norm_input_grad(x4, x4, good, good, good, good, good, good,
                                              tf.ones([2])), r"count must be a scalar"),
        (lambda: tf_ops.batch_norm_input_grad(x4, x4, good, good, good, good, good,
                                              tf.ones([4]), 3.0),
         r"offset_backprop must (have|be 1-D with) one element"),
    ]
    # Graph building: the shape function.
    for fn, match in graph_cases:
        with tf.Graph().as_default():
            with pytest.raises(ValueError, match=match):
                fn()
    # Run time: the kernels (eager calls and graphs with unknown shapes).
    for fn, match in graph_cases:
        with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=match):
            fn()
    unknown = tf.TensorSpec(None, tf.float32)

    @tf.function(input_signature=[unknown, unknown, unknown])
    def train(x, s, dy):
        y = tf_ops.batch_norm(x, s, None)[0]
        return tf_ops.batch_norm_grad(dy, x, s, None, s, s)

    for args, match in [((x4, tf.ones([4]), x4), "scale must be 1-D with one element per channel"),
                        ((tf.zeros([3]), tf.ones([1]), tf.zeros([3])), "rank >= 2"),
                        ((x4, good, tf.zeros([2, 3, 4, 4])), "y_backprop and x must have the same shape")]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=match):
            train(*args)
    # The XLA lowerings check again when they are compiled for concrete shapes.
    if tf_ops.build_info().xla:
        @tf.function(input_signature=[unknown, unknown, unknown], jit_compile=True)
        def jit_train(x, s, dy):
            return tf_ops.batch_norm_grad(dy, x, s, None, s, s)[0]

        for args, match in [((x4, tf.ones([4]), x4), "scale must be 1-D with one element per channel"),
                            ((x4, good, tf.zeros([2, 3, 4, 4])), "y_backprop and x must have the same shape")]:
            with pytest.raises(tf.errors.InvalidArgumentError, match=match):
                jit_train(*args)
    with pytest.raises(ValueError, match="momentum must be in"):
        tf_ops.layers.BatchNormalization(momentum=1.5)


def test_deterministic_and_empty_batch():
    rng = np.random.default_rng(3)
    for shape, axis in (((16, 28, 28, 64), -1), ((8, 32, 30, 30), 1)):
        x = tf.constant(rng.standard_normal(shape) * 3 + 5, tf.float32)
        dy = tf.constant(rng.standard_normal(shape), tf.float32)
        runs = []
        for _ in range(2):
            y, m, v = tf_ops.batch_norm(x, axis=axis, activation="mish")
            runs.append([y, m, v, *tf_ops.batch_norm_grad(dy, x, None, None, m, v, axis=axis,
                                                          activation="mish")])
        for a, b in zip(*runs):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    # An empty batch behaves as Keras's layer: NaN statistics (0 / 0), an empty y, and
    # so a NaN dgamma (rsqrt(NaN) times an empty sum) and a zero dbeta.
    x = tf.zeros([0, 4])
    y, m, v = tf_ops.batch_norm(x)
    assert y.shape == (0, 4) and np.isnan(m.numpy()).all() and np.isnan(v.numpy()).all()
    _, dg, db = tf_ops.batch_norm_grad(x, x, None, None, m, v)
    layer = tf.keras.layers.BatchNormalization()
    layer.build((None, 4))
    with tf.GradientTape() as tape:
        keras_y = layer(x, training=True)
    keras_dg, keras_db = tape.gradient(keras_y, [layer.gamma, layer.beta])
    assert np.isnan(layer.moving_mean.numpy()).all()
    np.testing.assert_array_equal(dg, keras_dg)  # NaN
    np.testing.assert_array_equal(db, keras_db)  # 0
    assert np.isnan(dg.numpy()).all() and (db.numpy() == 0).all()
