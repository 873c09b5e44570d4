"""Forward and grad op values: against the float64 reference, against TF's own
kernels, for every op x attr variant x dtype, eager and in tf.function, over
scalar, empty, odd-length and 8-D shapes, and at 0, -0, +-inf and NaN."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from checks import assert_close, in_mode, mode_params
from op_specs import (
    DTYPE_IDS,
    SPECS,
    as_f64,
    attrs_id,
    builtin_tolerance,
    dtype_params,
    round_attrs,
    sample,
    spec_attr_params,
    spec_params,
    to_dtype,
)

SHAPES = [(), (0,), (3, 0, 2), (1001,), (2, 1, 3, 1, 2, 1, 2, 3)]


def _inputs(spec, attrs, shape, dtype, seed):
    """(x, g, v) rounded to dtype: features, upstream gradient, grad op's 2nd input."""
    x = to_dtype(sample(shape, seed, lo=-3, hi=1), dtype)
    g = to_dtype(sample(shape, seed + 1, lo=-1, hi=0.5), dtype)
    v = to_dtype(spec.grad_input(as_f64(x), attrs), dtype)
    return x, g, v


@pytest.mark.parametrize("mode", mode_params())
@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_matches_reference(spec, attrs, dtype, mode):
    ra = round_attrs(attrs)
    tol = spec.tolerance(dtype)
    fwd = in_mode(lambda x: spec.forward(x, **attrs), mode)
    grad = in_mode(lambda g, v: spec.grad_op(g, v, **attrs), mode)
    for i, shape in enumerate(SHAPES):
        x, g, v = _inputs(spec, attrs, shape, dtype, seed=100 + i)
        what = f"{spec.op_type}{attrs} {DTYPE_IDS[dtype]} {mode} shape={shape}"

        y = fwd(tf.constant(x))
        assert y.dtype == dtype, what
        assert tuple(y.shape) == shape, what
        assert_close(y, spec.ref(as_f64(x), **ra), tol, what)

        dx = grad(tf.constant(g), tf.constant(v))
        assert dx.dtype == dtype, what
        assert tuple(dx.shape) == shape, what
        assert_close(dx, spec.ref_grad(as_f64(g), as_f64(v), **ra), spec.grad_tolerance(dtype, g), "grad " + what)


def _builtin_params():
    return [
        pytest.param(spec, dict(attrs), id=f"{spec.name}-{attrs_id(attrs)}")
        for spec in SPECS
        for attrs in spec.attr_variants
        if spec.builtin_forward(attrs) is not None or spec.builtin_grad(attrs) is not None
    ]


@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec,attrs", _builtin_params())
def test_matches_tf_builtin(spec, attrs, dtype):
    tol = builtin_tolerance(dtype, spec.builtin_atol_eps, spec.builtin_ulps, spec.builtin_floor)
    x, g, v = _inputs(spec, attrs, (1001,), dtype, seed=7)
    what = f"{spec.op_type}{attrs} {DTYPE_IDS[dtype]} vs TF"
    if (builtin := spec.builtin_forward(attrs)) is not None:
        ours, theirs = spec.forward(tf.constant(x), **attrs), builtin(tf.constant(x))
        assert ours.dtype == theirs.dtype == dtype
        assert_close(ours, as_f64(theirs), tol, what)
    if (builtin := spec.builtin_grad(attrs)) is not None:
        ours = spec.grad_op(tf.constant(g), tf.constant(v), **attrs)
        theirs = builtin(tf.constant(g), tf.constant(v))
        assert_close(ours, as_f64(theirs), tol, "grad " + what)


SPECIALS = np.array([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0])


def _expected_forward(spec, attrs, x64):
    ra = round_attrs(attrs)
    with np.errstate(invalid="ignore"):
        e = spec.ref(x64, **ra)
    limits = spec.ref_limits(**ra)
    for inf, value in limits.items():
        e = np.where(x64 == inf, value, e)
    return e


@pytest.mark.parametrize("mode", mode_params())
@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_special_values(spec, attrs, dtype, mode):
    """0 and -0 (sign of the result as IEEE gives it in the formula), +-inf give the
    limits (never NaN), NaN gives NaN; grad op: NaN in the gradient gives NaN, the
    rest as the reference formula (TF's convention)."""
    ra = round_attrs(attrs)
    tol = spec.tolerance(dtype)
    what = f"{spec.op_type}{attrs} {DTYPE_IDS[dtype]} {mode}"
    x = to_dtype(SPECIALS, dtype)
    y = in_mode(lambda x: spec.forward(x, **attrs), mode)(tf.constant(x))
    expected = _expected_forward(spec, attrs, as_f64(x))
    assert np.isnan(as_f64(y)[4]), f"{what}: NaN in must give NaN out, got {as_f64(y)}"
    assert_close(y, expected, tol, f"{what} at {SPECIALS}", check_zero_sign=True)

    grad = in_mode(lambda g, v: spec.grad_op(g, v, **attrs), mode)
    # Special v, finite gradient.
    v = to_dtype(SPECIALS, dtype)
    g = to_dtype(np.full(SPECIALS.shape, 1.5), dtype)
    dx = grad(tf.constant(g), tf.constant(v))
    assert_close(dx, spec.ref_grad(as_f64(g), as_f64(v), **ra), spec.grad_tolerance(dtype, g), f"grad {what} at v={SPECIALS}")
    # Special gradient, ordinary v.
    gs = to_dtype(np.array([math.nan, math.nan, math.inf, -math.inf, 0.0, -0.0]), dtype)
    vs = to_dtype(spec.grad_input(np.array([0.5, -0.5, 0.5, 0.25, 0.5, -0.5]), attrs), dtype)
    dx = grad(tf.constant(gs), tf.constant(vs))
    assert np.isnan(as_f64(dx)[:2]).all(), f"grad {what}: NaN gradient must give NaN, got {as_f64(dx)}"
    assert_close(dx, spec.ref_grad(as_f64(gs), as_f64(vs), **ra), spec.grad_tolerance(dtype, gs), f"grad {what} at g={as_f64(gs)}")


@pytest.mark.parametrize("spec", spec_params())
def test_static_shape_inference(spec):
    """The shape functions: forward keeps the (partial) shape; the grad op merges
    its two inputs' partial shapes."""
    attrs = dict(spec.attr_variants[0])
    fwd = tf.function(lambda x: spec.forward(x, **attrs))
    for shape in ([None, 3, 2], [None], [], [2, 1, 3, 1, 2, 1, 2, 3]):
        cf = fwd.get_concrete_function(tf.TensorSpec(shape, tf.float32))
        assert cf.structured_outputs.shape.as_list() == shape
    assert fwd.get_concrete_function(tf.TensorSpec(None, tf.float32)).structured_outputs.shape.rank is None
    grad = tf.function(lambda g, v: spec.grad_op(g, v, **attrs))
    cf = grad.get_concrete_function(tf.TensorSpec([None, 3], tf.half), tf.TensorSpec([2, None], tf.half))
    assert cf.structured_outputs.shape.as_list() == [2, 3]
    assert cf.structured_outputs.dtype == tf.half


@pytest.mark.parametrize("dtype", dtype_params((tf.half, tf.bfloat16)))
@pytest.mark.parametrize("name,attrs", [("Elu", {"alpha": 1.0}), ("LeakyRelu", {"alpha": 0.2})])
def test_tolerance_rejects_double_rounding(name, attrs, dtype):
    """The half/bfloat16 tolerance is tight enough to catch a kernel that rounds
    more than once: TF's own kernels compute in T (Elu: exp in T, then -1; LeakyRelu:
    alpha cast to T), and `tolerance()` must reject them where it accepts ours."""
    spec = next(s for s in SPECS if s.name == name)
    x = to_dtype(sample((4001,), 11, lo=-3, hi=1), dtype)
    expected = spec.ref(as_f64(x), **round_attrs(attrs))
    assert_close(spec.forward(tf.constant(x), **attrs), expected, spec.tolerance(dtype))
    with pytest.raises(AssertionError, match="elements outside"):
        assert_close(spec.builtin_forward(attrs)(tf.constant(x)), expected, spec.tolerance(dtype))
