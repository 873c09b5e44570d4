"""Assertions and small helpers shared by the test modules."""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np
import pytest
import tensorflow as tf

from op_specs import SPECS, Tolerance, as_f64, round_attrs, to_dtype

MODES = ("eager", "function")


def mode_params():
    return [pytest.param(m, id=m) for m in MODES]


def in_mode(fn, mode: str):
    """`fn` itself (eager) or wrapped in a fresh `tf.function`."""
    if mode == "eager":
        return fn
    assert mode == "function"
    return tf.function(fn)


def assert_close(actual, expected, tol: Tolerance, what: str = "", check_zero_sign: bool = False):
    """|actual - expected| <= atol + rtol * |expected| elementwise, NaN where and
    only where expected is NaN, infinities equal; shapes must match exactly."""
    a = as_f64(actual)
    e = np.asarray(expected, np.float64)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != expected {e.shape}"
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    assert np.array_equal(nan_a, nan_e), (
        f"{what}: NaN mismatch at {np.argwhere(nan_a != nan_e)[:5].tolist()}: "
        f"got {a[nan_a != nan_e][:5]}, expected {e[nan_a != nan_e][:5]}"
    )
    inf_e = np.isinf(e)
    assert np.array_equal(a[inf_e], e[inf_e]), f"{what}: infinities: got {a[inf_e]}, expected {e[inf_e]}"
    fin = ~nan_e & ~inf_e
    err = np.abs(a[fin] - e[fin])
    bound = tol.atol + tol.rtol * np.abs(e[fin])
    bad = err > bound
    if bad.any():
        i = np.argmax(err - bound)
        rel = err[i] / max(abs(e[fin][i]), 1e-300)
        raise AssertionError(
            f"{what}: {int(bad.sum())}/{bad.size} elements outside rtol={tol.rtol:.3g} "
            f"atol={tol.atol:.3g}; worst: got {a[fin][i]!r}, expected {e[fin][i]!r} "
            f"(abs err {err[i]:.3g}, rel err {rel:.3g})"
        )
    if check_zero_sign:
        zero = fin & (e == 0)
        assert np.array_equal(np.signbit(a[zero]), np.signbit(e[zero])), (
            f"{what}: signs of zeros: got {a[zero]}, expected {e[zero]}"
        )


def assert_each_case(cases: Iterable, check: Callable[..., None]) -> None:
    """Calls `check(case)` for every case and fails once, listing every case that
    failed: a test item that batches many cases into one traced or compiled function
    still names each failing case (its messages name the op, attrs, dtype and mode).

    Example: `assert_each_case([(a, dt) for a in variants for dt in DTYPES], check_one)`
    """
    failures, count = [], 0
    for case in cases:
        count += 1
        try:
            check(case)
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, f"{len(failures)} of {count} cases failed:\n" + "\n".join(failures)


def tape_derivatives(forward, x, g):
    """(y, dy/dx for upstream g, d/dx of that) through nested GradientTapes: what a
    user's second derivative runs (forward, grad and grad-grad ops)."""
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = forward(x)
        dx = inner.gradient(y, x, output_gradients=g)
    return y, dx, outer.gradient(dx, x)


def assert_library_still_works():
    """After an error: every op of every spec still runs and is right (float32)."""
    x = np.array([-1.5, -0.25, 0.5, 2.0])
    g = np.array([1.0, -2.0, 0.5, 3.0])
    for spec in SPECS:
        attrs = dict(spec.attr_variants[0])
        ra = round_attrs(attrs)
        x32 = to_dtype(x, tf.float32)
        y = spec.forward(tf.constant(x32), **attrs)
        assert_close(y, spec.ref(as_f64(x32), **ra), spec.tolerance(tf.float32), f"{spec.name} after error")
        v = to_dtype(spec.grad_input(as_f64(x32), attrs), tf.float32)
        dx = spec.grad_op(tf.constant(g, tf.float32), tf.constant(v), **attrs)
        assert_close(dx, spec.ref_grad(g, as_f64(v), **ra), spec.grad_tolerance(tf.float32, g), f"{spec.name}Grad after error")
