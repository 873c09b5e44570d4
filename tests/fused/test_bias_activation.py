"""Bias + activation: ``tf_ops.<act>(x, bias=b)`` (``TfOps>Bias{Act}``) and its grad
op ``tf_ops.bias_<act>_grad`` (``TfOps>Bias{Act}Grad``), for every activation in
op_specs.SPECS: values and both gradients against float64 references (fused_refs.py)
for every dtype and both data formats, gradients of first and second order, XLA,
shape errors at graph build and run time, determinism of the bias gradient (run to
run and across thread counts; the gated ops' bias gradient too), and the portable form (no TfOps> op)."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from checks import assert_close, assert_each_case
from fused_refs import (assert_jit_builds, assert_sum_close, bias_forward_ref, bias_grad_fn,
                        bias_grad_ref, function, grad_tolerance, op_types)
from op_specs import (DTYPE_IDS, DTYPES, SPECS, as_f64, dtype_params, sample, spec_attr_params,
                      spec_params, to_dtype)
from subprocesses import python_env, REPO_ROOT

MAX_NUMERIC_ERROR = 1e-5
MIN_KINK_DISTANCE = 0.1
# (features shape, data_format): the last axis, and axis 1 of 4-D and 3-D input.
LAYOUTS = [((6, 37), "NHWC"), ((2, 3, 5, 37), "NHWC"), ((3, 5, 4, 7), "NCHW"), ((4, 6, 33), "NCHW")]
LAYOUT_IDS = [f"{df}-{'x'.join(map(str, s))}" for s, df in LAYOUTS]


def _inputs(shape, data_format, dtype, seed):
    channels = shape[1] if data_format == "NCHW" else shape[-1]
    x = to_dtype(sample(shape, seed, lo=-2, hi=0.6), dtype)
    b = to_dtype(sample((channels,), seed + 1, lo=-2, hi=0.3), dtype)
    g = to_dtype(sample(shape, seed + 2, lo=-1, hi=0.3), dtype)
    return x, b, g


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_values_and_bias_gradient(spec, attrs, dtype, layout):
    shape, df = layout
    x, b, g = _inputs(shape, df, dtype, seed=11)
    y = function(spec)(x, bias=b, data_format=df, **attrs)
    assert y.dtype == dtype and y.shape == shape
    assert_close(y, bias_forward_ref(spec, as_f64(x), as_f64(b), attrs, dtype, df),
                 spec.tolerance(dtype), "activations")
    dx, db = bias_grad_fn(spec)(g, x, b, data_format=df, **attrs)
    ref_dx, ref_db, abs_sum = bias_grad_ref(spec, as_f64(g), as_f64(x), as_f64(b), attrs, dtype, df)
    assert dx.dtype == dtype and db.dtype == dtype and db.shape == b.shape
    assert_close(dx, ref_dx, grad_tolerance(spec, attrs, dtype, g), "backprops")
    assert_sum_close(db, ref_db, abs_sum, dtype, x.size // b.size, "bias_backprops")


@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec", spec_params())
def test_tape_gradient_is_the_grad_op(spec, dtype):
    x, b, g = _inputs((5, 2, 9), "NHWC", dtype, seed=3)
    x, b, g = tf.constant(x), tf.constant(b), tf.constant(g)

    @tf.function
    def grads(x, b):
        with tf.GradientTape() as tape:
            tape.watch([x, b])
            y = function(spec)(x, bias=b)
        return tape.gradient(y, [x, b], output_gradients=g)

    dx, db = grads(x, b)
    want_dx, want_db = bias_grad_fn(spec)(g, x, b)
    np.testing.assert_array_equal(as_f64(dx), as_f64(want_dx))
    np.testing.assert_array_equal(as_f64(db), as_f64(want_db))


def _features_away_from_kinks(spec, shape, bias, seed):
    """Features whose x + bias keep MIN_KINK_DISTANCE from the activation's kinks."""
    z = sample(shape, seed, spec.kinks, MIN_KINK_DISTANCE, lo=-1.0, hi=0.5)
    return z - bias


def _max_error(theoretical, numerical):
    return max(float(np.max(np.abs(t - n))) if t.size else 0.0 for t, n in zip(theoretical, numerical))


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_compute_gradient_first_and_second_order(spec, attrs, data_format):
    fn = function(spec)
    b = np.array([0.25, -0.5, 0.125])
    # Few elements (compute_gradient costs per element; the values tests cover the range),
    # two of them per channel for the bias gradient's sum.
    shape = (1, 3, 2) if data_format == "NCHW" else (1, 2, 3)
    x = _features_away_from_kinks(spec, shape, b.reshape((3, 1)) if data_format == "NCHW" else b, seed=5)
    what = f"{spec.name}{attrs} {data_format}"
    first = lambda x, b: fn(x, bias=b, data_format=data_format, **attrs)  # noqa: E731
    assert _max_error(*tf.test.compute_gradient(first, [x, b])) < MAX_NUMERIC_ERROR, f"{what} first order"

    w = sample(shape, 6, lo=-1, hi=0.3)

    def gradient(x, b):  # d/d(x, b) of sum(w * f(x + b)), whose Jacobian is second order
        with tf.GradientTape() as tape:
            tape.watch([x, b])
            y = fn(x, bias=b, data_format=data_format, **attrs)
        dx, db = tape.gradient(y, [x, b], output_gradients=tf.constant(w))
        return tf.concat([tf.reshape(dx, [-1]), db], 0)

    assert _max_error(*tf.test.compute_gradient(gradient, [x, b])) < MAX_NUMERIC_ERROR, f"{what} second order"


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_compute_gradient_of_the_grad_op(spec, attrs):
    b = np.array([0.25, -0.5, 0.125, 1.0])
    x = _features_away_from_kinks(spec, (2, 4), b, seed=7)
    g = sample((2, 4), 8, lo=-1, hi=0.3)
    grad = bias_grad_fn(spec)
    both = lambda g, x, b: tf.concat([tf.reshape(t, [-1]) for t in grad(g, x, b, **attrs)], 0)  # noqa: E731
    assert _max_error(*tf.test.compute_gradient(both, [g, x, b])) < MAX_NUMERIC_ERROR, f"{spec.name}{attrs}"


@pytest.mark.parametrize("spec", spec_params())
def test_third_order_composes(spec):
    b = tf.constant([0.3, -0.2], tf.float64)
    x = tf.constant(_features_away_from_kinks(spec, (3, 2), b.numpy(), seed=9))
    fn = function(spec)
    with tf.GradientTape() as t3:
        t3.watch(x)
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                y = fn(x, bias=b)
            d1 = t1.gradient(y, x)
        d2 = t2.gradient(d1, x)
    d3 = t3.gradient(d2, x)
    # The same derivatives of the plain op at x + b.
    z = x + b
    with tf.GradientTape() as p3:
        p3.watch(z)
        with tf.GradientTape() as p2:
            p2.watch(z)
            with tf.GradientTape() as p1:
                p1.watch(z)
                yp = fn(z)
            e1 = p1.gradient(yp, z)
        e2 = p2.gradient(e1, z)
    e3 = p3.gradient(e2, z)
    for got, want in ((d1, e1), (d2, e2), (d3, e3)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_compat_v1_compute_gradient_error():
    for spec in SPECS:
        b0 = np.array([0.1, -0.3, 0.2])
        x0 = _features_away_from_kinks(spec, (4, 3), b0, seed=10)
        with tf.Graph().as_default():
            x, b = tf.constant(x0), tf.constant(b0)
            y = function(spec)(x, bias=b)
            with tf.compat.v1.Session():
                err = tf.compat.v1.test.compute_gradient_error(
                    [x, b], [x0.shape, b0.shape], y, x0.shape, x_init_value=[x0, b0])
                assert err < MAX_NUMERIC_ERROR, spec.name


@pytest.mark.parametrize("spec", spec_params())
def test_xla_matches_the_kernels(spec):
    """Every dtype and both data formats in one compiled function (one XLA compile)."""
    cases = [(dtype, shape, df) for dtype in DTYPES for shape, df in LAYOUTS[1:3]]
    inputs = [tuple(tf.constant(t) for t in _inputs(shape, df, dtype, seed=13)) for dtype, shape, df in cases]

    def step(x, b, g, df):
        with tf.GradientTape() as tape:
            tape.watch([x, b])
            y = function(spec)(x, bias=b, data_format=df)
        return (y, *tape.gradient(y, [x, b], output_gradients=g))

    def all_cases(inputs):
        return [step(x, b, g, df) for (_, _, df), (x, b, g) in zip(cases, inputs)]

    jit = tf.function(all_cases, jit_compile=True)
    graph = jit.get_concrete_function(inputs).graph.as_graph_def()
    assert_jit_builds(f"TfOps>Bias{spec.name}", graph)
    got = jit(inputs)

    def check(i):
        (dtype, _, df), (x, b, g) = cases[i], inputs[i]
        what = f"{spec.name} {DTYPE_IDS[dtype]} {df} {x.shape}"
        ref_y, ref_dx, ref_db = step(x, b, g, df)
        y, dx, db = got[i]
        tol = grad_tolerance(spec, {}, dtype, g)
        loose = type(tol)(rtol=4 * tol.rtol, atol=4 * tol.atol)
        assert_close(y, as_f64(ref_y), loose, f"{what} activations")
        assert_close(dx, as_f64(ref_dx), loose, f"{what} backprops")
        _, _, abs_sum = bias_grad_ref(spec, as_f64(g), as_f64(x), as_f64(b), {}, dtype, df)
        assert_sum_close(db, as_f64(ref_db), 2 * abs_sum, dtype, x.shape.num_elements(), f"{what} bias_backprops")

    assert_each_case(range(len(cases)), check)


# ----------------------------------------------------------------- bad input --


@pytest.mark.parametrize("spec", spec_params())
def test_bad_shapes_fail_when_the_graph_is_built(spec):
    fn, grad = function(spec), bias_grad_fn(spec)
    x = tf.zeros([2, 3])
    with pytest.raises(ValueError, match=r"bias must be 1-D.*\[2,3\]"):
        tf.function(lambda: fn(x, bias=tf.zeros([1, 3]))).get_concrete_function()
    with pytest.raises(ValueError, match=r"one element per channel.*\[2,3\].*\[4\]"):
        tf.function(lambda: fn(x, bias=tf.zeros([4]))).get_concrete_function()
    with pytest.raises(ValueError, match=r"one element per channel.*NCHW.*\[2,3\].*\[2\]"):
        tf.function(lambda: fn(x, bias=tf.zeros([2]), data_format="NCHW")).get_concrete_function()
    with pytest.raises(ValueError, match=r"rank >= 2 for data_format NCHW"):
        tf.function(lambda: fn(tf.zeros([3]), bias=tf.zeros([3]), data_format="NCHW")).get_concrete_function()
    with pytest.raises(ValueError, match=r"gradients and features must have the same shape.*\[2,4\].*\[2,3\]"):
        tf.function(lambda: grad(tf.zeros([2, 4]), x, tf.zeros([3]))).get_concrete_function()
    with pytest.raises(ValueError, match="data_format"):
        fn(x, bias=tf.zeros([3]), data_format="NDHWC")


@pytest.mark.parametrize("spec", spec_params())
def test_bad_shapes_fail_at_run_time(spec):
    fn, grad = function(spec), bias_grad_fn(spec)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"one element per channel.*\[2,3\].*\[4\]"):
        fn(tf.zeros([2, 3]), bias=tf.zeros([4]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bias must be 1-D"):
        fn(tf.zeros([2, 3]), bias=tf.zeros([]))
    unknown = tf.TensorSpec(None, tf.float32)
    f = tf.function(lambda x, b: fn(x, bias=b), input_signature=[unknown, unknown])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[5,2\].*\[3\]"):
        f(tf.zeros([5, 2]), tf.zeros([3]))
    g = tf.function(lambda g, x, b: grad(g, x, b), input_signature=[unknown] * 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"same shape.*\[2,2\].*\[2,3\]"):
        g(tf.zeros([2, 2]), tf.zeros([2, 3]), tf.zeros([3]))
    # Empty features: empty outputs, a zero bias gradient.
    dx, db = grad(tf.zeros([0, 3]), tf.zeros([0, 3]), tf.ones([3]))
    assert dx.shape == (0, 3) and db.numpy().tolist() == [0.0, 0.0, 0.0]


# --------------------------------------------------------------- determinism --

# The bias gradients' digests, each case computed 3 times: run in a subprocess with one
# intra-op thread and in this process with TensorFlow's default pool (one per core).
_DIGESTS = """
def digests():
    import hashlib
    import numpy as np
    import tensorflow as tf
    import tf_ops
    rng = np.random.default_rng(0)
    out = []
    for dtype, shape, df in ((tf.float32, (3000, 96), "NHWC"), (tf.half, (3000, 96), "NHWC"),
                             (tf.float32, (8, 16, 40, 41), "NCHW"), (tf.bfloat16, (8, 16, 40, 41), "NCHW")):
        c = shape[1] if df == "NCHW" else shape[-1]
        x = tf.constant(rng.standard_normal(shape), dtype)
        g = tf.constant(rng.standard_normal(shape), dtype)
        b = tf.constant(rng.standard_normal(c), dtype)
        for name in ("gelu", "swish", "elu"):
            for _ in range(3):
                _, db = getattr(tf_ops, f"bias_{name}_grad")(g, x, b, data_format=df)
                out.append((f"bias_{name}_grad {dtype.name} {shape} {df}",
                            hashlib.sha256(tf.io.serialize_tensor(db).numpy()).hexdigest()))
    for dtype in (tf.float32, tf.bfloat16):  # the gated ops' bias gradient
        x = tf.constant(rng.standard_normal((3000, 2 * 48)), dtype)
        g = tf.constant(rng.standard_normal((3000, 48)), dtype)
        b = tf.constant(rng.standard_normal(2 * 48), dtype)
        for name in ("gelu", "swish"):
            for _ in range(3):
                _, db = getattr(tf_ops, f"bias_gated_{name}_grad")(g, x, b)
                out.append((f"bias_gated_{name}_grad {dtype.name}",
                            hashlib.sha256(tf.io.serialize_tensor(db).numpy()).hexdigest()))
    return out
"""
_ONE_THREAD_SCRIPT = _DIGESTS + """
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
print("\\n".join(f"{case}|{digest}" for case, digest in digests()))
"""


def _digests_in_one_thread() -> list[tuple[str, str]]:
    result = subprocess.run([sys.executable, "-c", _ONE_THREAD_SCRIPT], env=python_env(), cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return [tuple(line.split("|")) for line in result.stdout.strip().splitlines()]


@pytest.mark.heavy  # a fresh process
def test_bias_gradient_is_bit_identical_across_runs_and_thread_counts():
    import os

    assert len(os.sched_getaffinity(0)) > 1, "needs two cores: TensorFlow's default pool is one thread per core"
    namespace: dict = {}
    exec(_DIGESTS, namespace)  # noqa: S102 - the same code as the subprocess's
    one, many = _digests_in_one_thread(), namespace["digests"]()
    assert len(one) == len(many) == 48  # 4 inputs x 3 ops x 3 runs, 2 x 2 x 3 gated
    for (case, d1), (_, dn) in zip(one, many):
        assert d1 == dn, f"{case}: bias gradient differs between one thread and the default pool"
    # Each case ran 3 times in each process: the same bits each time.
    for i in range(0, len(one), 3):
        assert len({d for _, d in one[i:i + 3] + many[i:i + 3]}) == 1, one[i][0]


# ------------------------------------------------------------------ portable --


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_portable_builds_no_tf_ops_op_and_matches(spec, attrs):
    fn = function(spec)
    x, b, g = (tf.constant(t) for t in _inputs((3, 4, 5), "NCHW", tf.float32, seed=21))

    def step(x, b):
        with tf.GradientTape() as tape:
            tape.watch([x, b])
            y = fn(x, bias=b, data_format="NCHW", **attrs)
        return (y, *tape.gradient(y, [x, b], output_gradients=g))

    with tf_ops.portable():
        concrete = tf.function(step).get_concrete_function(x, b)
    assert not any(t.startswith("TfOps>") for t in op_types(concrete.graph.as_graph_def()))
    fused = step(x, b)
    for got, want, what in zip(concrete(x, b), fused, ("y", "dx", "db")):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=1e-6, err_msg=what)
