"""Gated activations (the GLU family): ``tf_ops.gated(x, activation)``
(``TfOps>Gated{Act}``), its grad op ``tf_ops.gated_<act>_grad``
(``TfOps>Gated{Act}Grad``) and the aliases glu, geglu, swiglu, reglu, for every
activation in op_specs.SPECS: values and gradients against float64 references for
every dtype, first, second and third order, XLA, shape errors at graph build and run
time, and the portable form (no TfOps> op); the same for the gate with a bias
(``TfOps>BiasGated{Act}`` and its grad op ``tf_ops.bias_gated_<act>_grad``, which also
returns the bias gradient). The bias gradient's determinism is test_bias_activation's."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from checks import assert_close, assert_each_case
from fused_refs import (assert_jit_builds, assert_sum_close, bias_z, gate_name,
                        gated_forward_ref, gated_grad_fn, gated_grad_ref, grad_tolerance, op_types)
from op_specs import (DTYPE_IDS, DTYPES, SPECS, as_f64, dtype_params, round_attrs, sample, spec_attr_params,
                      spec_params, to_dtype)

MAX_NUMERIC_ERROR = 1e-5
MIN_KINK_DISTANCE = 0.1
SHAPES = [(2,), (7, 2 * 37), (2, 3, 2 * 5)]


def _x_away_from_kinks(spec, shape, seed):
    """Features whose first half keeps MIN_KINK_DISTANCE from the kinks."""
    x = sample(shape, seed, lo=-1.0, hi=0.5)
    a = sample(shape[:-1] + (shape[-1] // 2,), seed + 1, spec.kinks, MIN_KINK_DISTANCE, lo=-1.0, hi=0.5)
    x[..., : shape[-1] // 2] = a
    return x


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_values_and_grad_op(spec, attrs, dtype, shape):
    x = to_dtype(sample(shape, 31, lo=-2, hi=0.6), dtype)
    out_shape = shape[:-1] + (shape[-1] // 2,)
    g = to_dtype(sample(out_shape, 32, lo=-1, hi=0.3), dtype)
    y = tf_ops.gated(x, gate_name(spec), **attrs)
    assert y.dtype == dtype and tuple(y.shape) == out_shape
    assert_close(y, gated_forward_ref(spec, as_f64(x), attrs), spec.tolerance(dtype), "activations")
    dx = gated_grad_fn(spec)(g, x, **attrs)
    assert dx.dtype == dtype and tuple(dx.shape) == shape
    # g * b * f'(a) rounds g * b once more than the plain grad op: one ulp more.
    tol = grad_tolerance(spec, attrs, dtype, as_f64(g) * np.abs(as_f64(x)).max())
    assert_close(dx, gated_grad_ref(spec, as_f64(g), as_f64(x), attrs),
                 type(tol)(rtol=tol.rtol + 2.0**-23, atol=tol.atol), "backprops")


@pytest.mark.parametrize("spec", spec_params())
def test_tape_gradient_is_the_grad_op(spec):
    x = tf.constant(sample((4, 10), 3))
    g = tf.constant(sample((4, 5), 4))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf_ops.gated(x, gate_name(spec))
    np.testing.assert_array_equal(tape.gradient(y, x, output_gradients=g).numpy(),
                                  gated_grad_fn(spec)(g, x).numpy())


def _max_error(theoretical, numerical):
    return max(float(np.max(np.abs(t - n))) if t.size else 0.0 for t, n in zip(theoretical, numerical))


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_compute_gradient_first_second_and_grad_op(spec, attrs):
    name = gate_name(spec)
    # Few elements (compute_gradient costs per element; the values tests cover the range).
    x = _x_away_from_kinks(spec, (2, 4), seed=5)
    fn = lambda x: tf_ops.gated(x, name, **attrs)  # noqa: E731
    what = f"{spec.name}{attrs}"
    assert _max_error(*tf.test.compute_gradient(fn, [x])) < MAX_NUMERIC_ERROR, f"{what} first order"
    w = tf.constant(sample((2, 2), 6, lo=-1, hi=0.3))

    def gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        return tape.gradient(y, x, output_gradients=w)

    assert _max_error(*tf.test.compute_gradient(gradient, [x])) < MAX_NUMERIC_ERROR, f"{what} second order"
    g = sample((2, 2), 7, lo=-1, hi=0.3)
    grad = lambda g, x: gated_grad_fn(spec)(g, x, **attrs)  # noqa: E731
    assert _max_error(*tf.test.compute_gradient(grad, [g, x])) < MAX_NUMERIC_ERROR, f"{what} grad op"


@pytest.mark.parametrize("spec", spec_params())
def test_third_order_matches_the_plain_ops(spec):
    name = gate_name(spec)
    x = tf.constant(_x_away_from_kinks(spec, (3, 4), seed=8))

    def derivatives(fn):
        with tf.GradientTape() as t3:
            t3.watch(x)
            with tf.GradientTape() as t2:
                t2.watch(x)
                with tf.GradientTape() as t1:
                    t1.watch(x)
                    y = fn(x)
                d1 = t1.gradient(y, x)
            d2 = t2.gradient(d1, x)
        return d1, d2, t3.gradient(d2, x)

    plain = getattr(tf_ops, name)
    unfused = lambda x: plain(x[:, :2]) * x[:, 2:]  # noqa: E731
    for got, want in zip(derivatives(lambda x: tf_ops.gated(x, name)), derivatives(unfused)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_compat_v1_compute_gradient_error():
    for spec in SPECS:
        x0 = _x_away_from_kinks(spec, (3, 4), seed=10)
        with tf.Graph().as_default():
            x = tf.constant(x0)
            y = tf_ops.gated(x, gate_name(spec))
            with tf.compat.v1.Session():
                err = tf.compat.v1.test.compute_gradient_error(x, x0.shape, y, (3, 2), x_init_value=x0)
                assert err < MAX_NUMERIC_ERROR, spec.name


@pytest.mark.parametrize("spec", spec_params())
def test_xla_matches_the_kernels(spec):
    """Every dtype in one compiled function (one XLA compile)."""
    name = gate_name(spec)
    inputs = [(tf.constant(to_dtype(sample((6, 34), 41, lo=-2, hi=0.6), dtype)),
               tf.constant(to_dtype(sample((6, 17), 42, lo=-1, hi=0.3), dtype))) for dtype in DTYPES]

    def step(x, g):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf_ops.gated(x, name)
        return y, tape.gradient(y, x, output_gradients=g)

    jit = tf.function(lambda inputs: [step(x, g) for x, g in inputs], jit_compile=True)
    assert_jit_builds(f"TfOps>Gated{spec.name}", jit.get_concrete_function(inputs).graph.as_graph_def())
    jitted = jit(inputs)

    def check(i):
        dtype, (x, g) = DTYPES[i], inputs[i]
        tol = spec.grad_tolerance(dtype, as_f64(g) * 4)
        loose = type(tol)(rtol=4 * tol.rtol + 2.0**-22, atol=4 * tol.atol)
        for got, want, what in zip(jitted[i], step(x, g), ("y", "dx")):
            assert_close(got, as_f64(want), loose, f"Gated{spec.name} {DTYPE_IDS[dtype]} {what}")

    assert_each_case(range(len(DTYPES)), check)


def test_aliases():
    x = tf.constant(sample((3, 8), 50, lo=-2, hi=0.5))
    for alias, activation, attrs in (("glu", "sigmoid", {}), ("geglu", "gelu", {}),
                                     ("swiglu", "swish", {}), ("reglu", "leaky_relu", {"alpha": 0.0})):
        np.testing.assert_array_equal(getattr(tf_ops, alias)(x).numpy(),
                                      tf_ops.gated(x, activation, **attrs).numpy())
    a, b = x[:, :4], x[:, 4:]
    for got, want in ((tf_ops.glu(x), tf.sigmoid(a) * b), (tf_ops.geglu(x), tf.nn.gelu(a) * b),
                      (tf_ops.swiglu(x), tf.nn.silu(a) * b), (tf_ops.reglu(x), tf.nn.relu(a) * b),
                      (tf_ops.geglu(x, approximate=True), tf.nn.gelu(a, approximate=True) * b)):
        # rtol: TF's float64 gelu is not float64-accurate (op_specs: builtin_floor); the
        # values themselves are checked against float64 references above.
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-300)


# ---------------------------------------------------------------------- bias --


def bias_gated_grad_fn(spec):
    return getattr(tf_ops, f"bias_gated_{gate_name(spec)}_grad")


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_bias_values_and_bias_gradient(spec, attrs, dtype, shape):
    x = to_dtype(sample(shape, 71, lo=-2, hi=0.6), dtype)
    b = to_dtype(sample(shape[-1:], 72, lo=-0.5, hi=0.5), dtype)
    out_shape = shape[:-1] + (shape[-1] // 2,)
    g = to_dtype(sample(out_shape, 73, lo=-1, hi=0.3), dtype)
    y = tf_ops.gated(x, gate_name(spec), bias=b, **attrs)
    z = bias_z(as_f64(x), as_f64(b), dtype, "NHWC")  # x + b as the kernel forms it
    assert y.dtype == dtype and tuple(y.shape) == out_shape
    assert_close(y, gated_forward_ref(spec, z, attrs), spec.tolerance(dtype), "activations")
    dx, db = bias_gated_grad_fn(spec)(g, x, b, **attrs)
    assert dx.dtype == db.dtype == dtype and tuple(dx.shape) == shape and tuple(db.shape) == shape[-1:]
    want = gated_grad_ref(spec, as_f64(g), z, attrs)
    tol = grad_tolerance(spec, attrs, dtype, as_f64(g) * np.abs(z).max())
    assert_close(dx, want, type(tol)(rtol=tol.rtol + 2.0**-23, atol=tol.atol), "backprops")
    axes = tuple(range(len(shape) - 1))
    assert_sum_close(db, want.sum(axis=axes), np.abs(want).sum(axis=axes) + tol.atol, dtype,
                     int(np.prod(shape[:-1])), "bias_backprops")


@pytest.mark.parametrize("spec", spec_params())
def test_bias_is_fused_forward_and_backward(spec):
    """One TfOps>BiasGated op forward and its grad op backward: no BiasAdd, no
    BiasAddGrad, no Gated op beside them; the tape's gradient is the grad op's."""
    x = tf.constant(sample((4, 10), 74))
    b = tf.constant(sample((10,), 75))
    g = tf.constant(sample((4, 5), 76))

    def step(x, b):
        with tf.GradientTape() as tape:
            tape.watch([x, b])
            y = tf_ops.gated(x, gate_name(spec), bias=b)
        return y, tape.gradient(y, [x, b], output_gradients=g)

    types = op_types(tf.function(step).get_concrete_function(x, b).graph.as_graph_def())
    tf_ops_types = {t for t in types if t.startswith("TfOps>")}
    assert tf_ops_types == {f"TfOps>BiasGated{spec.name}", f"TfOps>BiasGated{spec.name}Grad"}
    assert not types & {"BiasAdd", "BiasAddGrad", "AddV2", "Add"}, sorted(types)
    _, (dx, db) = step(x, b)
    want_dx, want_db = bias_gated_grad_fn(spec)(g, x, b)
    np.testing.assert_array_equal(dx.numpy(), want_dx.numpy())
    np.testing.assert_array_equal(db.numpy(), want_db.numpy())


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_bias_compute_gradient_first_second_and_grad_op(spec, attrs):
    name = gate_name(spec)
    b = sample((4,), 77, lo=-0.2, hi=0.2)
    # Features away from the kinks once the bias is added; few elements (compute_gradient
    # costs per element), two rows for the bias gradient's sum.
    x = _x_away_from_kinks(spec, (2, 4), seed=78) - b
    fn = lambda x, b: tf_ops.gated(x, name, bias=b, **attrs)  # noqa: E731
    what = f"bias {spec.name}{attrs}"
    assert _max_error(*tf.test.compute_gradient(fn, [x, b])) < MAX_NUMERIC_ERROR, f"{what} first order"
    w = tf.constant(sample((2, 2), 79, lo=-1, hi=0.3))

    def gradient(x, b):
        with tf.GradientTape() as tape:
            tape.watch([x, b])
            y = fn(x, b)
        dx, db = tape.gradient(y, [x, b], output_gradients=w)
        return tf.concat([tf.reshape(dx, [-1]), db], 0)

    assert _max_error(*tf.test.compute_gradient(gradient, [x, b])) < MAX_NUMERIC_ERROR, f"{what} second order"
    g = sample((2, 2), 80, lo=-1, hi=0.3)

    def grad(g, x, b):
        dx, db = bias_gated_grad_fn(spec)(g, x, b, **attrs)
        return tf.concat([tf.reshape(dx, [-1]), db], 0)

    assert _max_error(*tf.test.compute_gradient(grad, [g, x, b])) < MAX_NUMERIC_ERROR, f"{what} grad op"


@pytest.mark.parametrize("spec", spec_params())
def test_bias_third_order_matches_the_unfused_ops(spec):
    name = gate_name(spec)
    b = tf.constant(sample((4,), 81, lo=-0.2, hi=0.2))
    x = tf.constant(_x_away_from_kinks(spec, (3, 4), seed=82)) - b

    def derivatives(fn):
        with tf.GradientTape(persistent=True) as t3:
            t3.watch([x, b])
            with tf.GradientTape(persistent=True) as t2:
                t2.watch([x, b])
                with tf.GradientTape() as t1:
                    t1.watch([x, b])
                    y = fn(x, b)
                d1 = t1.gradient(y, [x, b])
            d2 = [t2.gradient(d, [x, b]) for d in d1]
        d3 = [t3.gradient(d, [x, b]) for pair in d2 for d in pair]
        return [*d1, *(d for pair in d2 for d in pair), *(d for pair in d3 for d in pair)]

    plain = getattr(tf_ops, name)

    def unfused(x, b):
        z = x + b
        return plain(z[:, :2]) * z[:, 2:]

    for got, want in zip(derivatives(lambda x, b: tf_ops.gated(x, name, bias=b)), derivatives(unfused)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec", spec_params())
def test_bias_xla_matches_the_kernels(spec):
    """Every dtype in one compiled function (one XLA compile)."""
    name = gate_name(spec)
    inputs = [tuple(tf.constant(to_dtype(sample(shape, seed, lo=lo, hi=hi), dtype))
                    for shape, seed, lo, hi in (((6, 34), 83, -2, 0.6), ((34,), 84, -0.5, 0.5), ((6, 17), 85, -1, 0.3)))
              for dtype in DTYPES]

    def step(x, b, g):
        with tf.GradientTape() as tape:
            tape.watch([x, b])
            y = tf_ops.gated(x, name, bias=b)
        return (y, *tape.gradient(y, [x, b], output_gradients=g))

    jit = tf.function(lambda inputs: [step(*t) for t in inputs], jit_compile=True)
    assert_jit_builds(f"TfOps>BiasGated{spec.name}", jit.get_concrete_function(inputs).graph.as_graph_def())
    jitted = jit(inputs)

    def check(i):
        dtype, (x, b, g), got = DTYPES[i], inputs[i], jitted[i]
        what = f"BiasGated{spec.name} {DTYPE_IDS[dtype]}"
        want = step(x, b, g)
        tol = spec.grad_tolerance(dtype, as_f64(g) * 4)
        loose = type(tol)(rtol=4 * tol.rtol + 2.0**-22, atol=4 * tol.atol)
        for k, name_k in enumerate(("y", "dx")):
            assert_close(got[k], as_f64(want[k]), loose, f"{what} {name_k}")
        # db: sums of 6 terms, in F32 under XLA for float32 (fused_xla.cc).
        dx64 = np.abs(as_f64(want[1]))
        assert_sum_close(got[2], as_f64(want[2]), dx64.sum(axis=0) * 4 + loose.atol, dtype, 6 * 4, f"{what} db")

    assert_each_case(range(len(DTYPES)), check)


# ----------------------------------------------------------------- bad input --


@pytest.mark.parametrize("spec", spec_params())
def test_bad_shapes(spec):
    name, grad = gate_name(spec), gated_grad_fn(spec)
    with pytest.raises(ValueError, match=r"last axis of features must be even.*\[2,5\]"):
        tf.function(lambda: tf_ops.gated(tf.zeros([2, 5]), name)).get_concrete_function()
    with pytest.raises(ValueError, match=r"gradients must have the shape of the activations.*\[2,3\].*\[2,4\]"):
        tf.function(lambda: grad(tf.zeros([2, 3]), tf.zeros([2, 4]))).get_concrete_function()
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"must be even.*\[3\]"):
        tf_ops.gated(tf.zeros([3]), name)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"must be even.*\[\]"):
        tf_ops.gated(tf.zeros([]), name)
    unknown = tf.TensorSpec(None, tf.float32)
    f = tf.function(lambda x: tf_ops.gated(x, name), input_signature=[unknown])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"must be even.*\[4,7\]"):
        f(tf.zeros([4, 7]))
    fg = tf.function(lambda g, x: grad(g, x), input_signature=[unknown, unknown])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"gradients \[4,3\] and features \[4,4\]"):
        fg(tf.zeros([4, 3]), tf.zeros([4, 4]))
    assert tf_ops.gated(tf.zeros([0, 4]), name).shape == (0, 2)


@pytest.mark.parametrize("spec", spec_params())
def test_bias_bad_shapes(spec):
    name, grad = gate_name(spec), bias_gated_grad_fn(spec)
    x = tf.zeros([2, 4])
    with pytest.raises(ValueError, match=r"bias must be 1-D.*\[1,4\]"):
        tf.function(lambda: tf_ops.gated(x, name, bias=tf.zeros([1, 4]))).get_concrete_function()
    with pytest.raises(ValueError, match=r"one element per feature of the last axis.*\[2,4\].*\[2\]"):
        tf.function(lambda: tf_ops.gated(x, name, bias=tf.zeros([2]))).get_concrete_function()
    with pytest.raises(ValueError, match=r"last axis of features must be even.*\[2,5\]"):
        tf.function(lambda: tf_ops.gated(tf.zeros([2, 5]), name, bias=tf.zeros([5]))).get_concrete_function()
    with pytest.raises(ValueError, match=r"one element per feature.*\[2,4\].*\[6\]"):
        tf.function(lambda: grad(tf.zeros([2, 2]), x, tf.zeros([6]))).get_concrete_function()
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"one element per feature.*\[2,4\].*\[2\]"):
        tf_ops.gated(x, name, bias=tf.zeros([2]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bias must be 1-D"):
        tf_ops.gated(x, name, bias=tf.zeros([]))
    unknown = tf.TensorSpec(None, tf.float32)
    f = tf.function(lambda x, b: tf_ops.gated(x, name, bias=b), input_signature=[unknown, unknown])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"one element per feature.*\[4,6\].*\[4\]"):
        f(tf.zeros([4, 6]), tf.zeros([4]))
    fg = tf.function(lambda g, x, b: grad(g, x, b), input_signature=[unknown] * 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"gradients \[4,2\] and features \[4,6\]"):
        fg(tf.zeros([4, 2]), tf.zeros([4, 6]), tf.zeros([6]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"one element per feature.*\[4,6\].*\[5\]"):
        fg(tf.zeros([4, 3]), tf.zeros([4, 6]), tf.zeros([5]))
    # Empty features: empty outputs, a zero bias gradient.
    assert tf_ops.gated(tf.zeros([0, 4]), name, bias=tf.ones([4])).shape == (0, 2)
    dx, db = grad(tf.zeros([0, 2]), tf.zeros([0, 4]), tf.ones([4]))
    assert dx.shape == (0, 4) and db.numpy().tolist() == [0.0] * 4


def test_unknown_activation_and_attribute():
    with pytest.raises(ValueError, match="activation must be one of"):
        tf_ops.gated(tf.zeros([2]), "selu")
    with pytest.raises(TypeError, match="unexpected attribute"):
        tf_ops.gated(tf.zeros([2]), "swish", alpha=1.0)


# ------------------------------------------------------------------ portable --


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_portable_builds_no_tf_ops_op_and_matches(spec, attrs):
    name = gate_name(spec)
    x = tf.constant(sample((3, 8), 60), tf.float32)
    g = tf.constant(sample((3, 4), 61), tf.float32)

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf_ops.gated(x, name, **attrs)
        return y, tape.gradient(y, x, output_gradients=g)

    with tf_ops.portable():
        concrete = tf.function(step).get_concrete_function(x)
    assert not any(t.startswith("TfOps>") for t in op_types(concrete.graph.as_graph_def()))
    for got, want in zip(concrete(x), step(x)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_bias_portable_builds_no_tf_ops_op_and_matches(spec, attrs):
    name = gate_name(spec)
    x = tf.constant(sample((3, 8), 62), tf.float32)
    b = tf.constant(sample((8,), 63, lo=-0.5, hi=0.5), tf.float32)
    g = tf.constant(sample((3, 4), 64), tf.float32)

    def step(x, b):
        with tf.GradientTape() as tape:
            tape.watch([x, b])
            y = tf_ops.gated(x, name, bias=b, **attrs)
        return (y, *tape.gradient(y, [x, b], output_gradients=g))

    with tf_ops.portable():
        concrete = tf.function(step).get_concrete_function(x, b)
    assert not any(t.startswith("TfOps>") for t in op_types(concrete.graph.as_graph_def()))
    for got, want in zip(concrete(x, b), step(x, b)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=1e-6)
