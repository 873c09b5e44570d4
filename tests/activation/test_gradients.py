"""Gradients: numeric checks (TF2 and compat.v1 checkers), first and second
order, of the forward ops and of the grad ops; nested tapes and tf.hessians
against the analytic f''; tape gradients against the reference derivative."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from checks import assert_close, in_mode, mode_params
from op_specs import (
    DTYPE_IDS,
    Tolerance,
    as_f64,
    dtype_params,
    round_attrs,
    sample,
    spec_attr_params,
    to_dtype,
)

# Central differences with TF's delta (1/1024) on float64: truncation error
# ~ delta^2 / 6 * |f'''| ~ 1e-7 for these ops; a wrong gradient is off by O(0.1).
MAX_NUMERIC_ERROR = 1e-5
MIN_KINK_DISTANCE = 0.1
F64_EXACT = Tolerance(rtol=1e-12, atol=1e-15)


def _away_from_kinks(spec, shape, seed):
    return sample(shape, seed, spec.kinks, MIN_KINK_DISTANCE, lo=-1.0, hi=0.5)


def _max_jacobian_error(theoretical, numerical):
    assert len(theoretical) == len(numerical)
    errs = []
    for t, n in zip(theoretical, numerical):
        assert t.shape == n.shape
        errs.append(float(np.max(np.abs(t - n))) if t.size else 0.0)
    return max(errs)


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_compute_gradient_first_order(spec, attrs):
    x = _away_from_kinks(spec, (3, 4), seed=1)
    theoretical, numerical = tf.test.compute_gradient(lambda x: spec.forward(x, **attrs), [x])
    assert _max_jacobian_error(theoretical, numerical) < MAX_NUMERIC_ERROR
    # The Jacobian of an elementwise op is diagonal, with the reference f'.
    expected = spec.ref_grad(np.ones(x.size), spec.grad_input(x.ravel(), attrs), **round_attrs(attrs))
    assert_close(np.diag(theoretical[0]), expected, F64_EXACT, "diag of Jacobian")


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_compute_gradient_second_order(spec, attrs):
    def first_derivative(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = spec.forward(x, **attrs)
        return tape.gradient(y, x)

    x = _away_from_kinks(spec, (2, 5), seed=2)
    theoretical, numerical = tf.test.compute_gradient(first_derivative, [x])
    assert _max_jacobian_error(theoretical, numerical) < MAX_NUMERIC_ERROR


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_compute_gradient_of_grad_op(spec, attrs):
    """The grad op's own gradient, w.r.t. both its inputs (v away from the kinks)."""
    g = sample((2, 4), seed=3, lo=-1, hi=0.3)
    v = _away_from_kinks(spec, (2, 4), seed=4)
    theoretical, numerical = tf.test.compute_gradient(lambda g, v: spec.grad_op(g, v, **attrs), [g, v])
    assert len(theoretical) == 2
    assert _max_jacobian_error(theoretical, numerical) < MAX_NUMERIC_ERROR


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_compat_v1_compute_gradient_error(spec, attrs):
    x0 = _away_from_kinks(spec, (3, 4), seed=5)
    g0 = sample((3, 4), seed=6, lo=-1, hi=0.3)
    v0 = _away_from_kinks(spec, (3, 4), seed=7)
    with tf.Graph().as_default():
        x = tf.constant(x0)
        y = spec.forward(x, **attrs)
        g, v = tf.constant(g0), tf.constant(v0)
        dx = spec.grad_op(g, v, **attrs)
        with tf.compat.v1.Session():
            err = tf.compat.v1.test.compute_gradient_error(x, x0.shape, y, x0.shape, x_init_value=x0)
            assert err < MAX_NUMERIC_ERROR
            err = tf.compat.v1.test.compute_gradient_error(
                [g, v], [g0.shape, v0.shape], dx, g0.shape, x_init_value=[g0, v0]
            )
            assert err < MAX_NUMERIC_ERROR


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_nested_tape_second_derivative(spec, attrs):
    x = tf.constant(_away_from_kinks(spec, (24,), seed=8) * 2)
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = spec.forward(x, **attrs)
        dy = inner.gradient(y, x)
    d2y = outer.gradient(dy, x)
    assert d2y is not None, "second derivative disconnected"
    assert_close(d2y, spec.ref_second(x.numpy(), **round_attrs(attrs)), F64_EXACT, f"{spec.name} f''")


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_hessians_in_tf_function(spec, attrs):
    @tf.function
    def hessian(x):
        return tf.hessians(tf.reduce_sum(spec.forward(x, **attrs)), x)[0]

    x0 = _away_from_kinks(spec, (6,), seed=9) * 2
    h = hessian(tf.constant(x0))
    assert h.shape == (6, 6)
    assert_close(h, np.diag(spec.ref_second(x0, **round_attrs(attrs))), F64_EXACT, f"{spec.name} Hessian")


@pytest.mark.parametrize("mode", mode_params())
@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_tape_gradient_matches_reference(spec, attrs, dtype, mode):
    """d/dx of the forward op with a random upstream gradient, every dtype: the
    reference derivative at what the grad op receives (features, or the op's
    actual rounded outputs)."""
    x = tf.constant(to_dtype(sample((257,), seed=10, lo=-3, hi=1), dtype))
    g = tf.constant(to_dtype(sample((257,), seed=11, lo=-1, hi=0.5), dtype))

    def fwd_and_grad(x, g):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = spec.forward(x, **attrs)
        return y, tape.gradient(y, x, output_gradients=g)

    y, dx = in_mode(fwd_and_grad, mode)(x, g)
    assert dx.dtype == dtype
    v = as_f64(y) if spec.grad_takes_outputs else as_f64(x)
    expected = spec.ref_grad(as_f64(g), v, **round_attrs(attrs))
    assert_close(dx, expected, spec.grad_tolerance(dtype, g), f"{spec.name}{attrs} {DTYPE_IDS[dtype]} {mode} tape")
