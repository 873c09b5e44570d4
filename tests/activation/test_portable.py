"""`tf_ops.portable()` in this process: what it builds (TensorFlow built-in ops only, at
every gradient order) and that it computes the ops' function (float64 references,
every op, attribute variant and dtype, limits at +-inf and NaN), with the ops' own
errors; how it nests, decorates and stays in its thread. Exports loaded where tf_ops
is absent (SavedModel, TFLite, ONNX) are in test_export.py."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from checks import assert_close, tape_derivatives
from op_specs import (
    DTYPE_IDS,
    SPECS,
    Tolerance,
    as_f64,
    function_name,
    layer_class,
    dtype_params,
    round_attrs,
    sample,
    spec_attr_params,
    to_dtype,
)

SPECIALS = np.array([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 25.0, -25.0, -100.0])


def _graph_op_types(concrete: tf.types.experimental.ConcreteFunction) -> set[str]:
    """Every op type in a traced function, its function library included (gradient
    and nested functions: what a SavedModel would hold)."""
    graph_def = concrete.graph.as_graph_def()
    types = {node.op for node in graph_def.node}
    for fn in graph_def.library.function:
        types |= {node.op for node in fn.node_def}
    return types


def _all_passes(spec, attrs):
    """y, tape gradient with upstream g, second derivative g f'' from nested tapes,
    the grad op and the grad-grad op called directly."""

    def fn(x, g, v):
        y, dx, d2x = tape_derivatives(lambda t: spec.forward(t, **attrs), x, g)
        grad_grad = getattr(tf_ops, f"{function_name(spec)}_grad_grad")
        return (y, dx, d2x, spec.grad_op(g, v, **attrs), *grad_grad(g, g, v, **attrs))

    return fn


def test_portable_nests_decorates_and_stays_in_its_thread():
    assert not tf_ops.is_portable()
    with tf_ops.portable():
        assert tf_ops.is_portable()
        with tf_ops.portable(False):
            assert not tf_ops.is_portable()
            with tf_ops.portable():
                assert tf_ops.is_portable()
            assert not tf_ops.is_portable()
        assert tf_ops.is_portable()
        seen = []
        thread = threading.Thread(target=lambda: seen.append(tf_ops.is_portable()))
        thread.start()
        thread.join()
        assert seen == [False], "a thread started inside the block must not inherit it"
    assert not tf_ops.is_portable()

    @tf_ops.portable()
    def decorated(depth):
        assert tf_ops.is_portable()
        return decorated(depth - 1) if depth else tf_ops.is_portable()

    assert decorated(2) is True  # re-entered three times through one instance
    assert not tf_ops.is_portable()
    with pytest.raises(ZeroDivisionError):
        with tf_ops.portable():
            1 / 0
    assert not tf_ops.is_portable(), "an exception leaves the state as it was"


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_portable_graph_has_only_builtin_ops(spec, attrs):
    x = tf.TensorSpec([None], tf.float32)
    with tf_ops.portable():
        concrete = tf.function(_all_passes(spec, attrs)).get_concrete_function(x, x, x)
    types = _graph_op_types(concrete)
    assert not [t for t in types if t.startswith("TfOps>")], sorted(types)
    # The same function traced outside the block has the fused ops, and only them.
    fused = _graph_op_types(tf.function(_all_passes(spec, attrs)).get_concrete_function(x, x, x))
    assert {f"TfOps>{spec.name}", f"TfOps>{spec.name}Grad", f"TfOps>{spec.name}GradGrad"} <= fused


def _expected(spec, x64, attrs):
    """The float64 reference, with the op's limits at +-inf."""
    y = spec.ref(x64, **attrs)
    limits = spec.ref_limits(**attrs)
    for inf, limit in limits.items():
        y = np.where(x64 == inf, limit, y)
    return y


@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_portable_matches_reference(spec, attrs, dtype):
    """Forward, tape gradient, grad op and grad-grad op's first output, every dtype,
    special values included, within the kernels' own tolerances."""
    ra = round_attrs(attrs)
    x = tf.constant(to_dtype(np.concatenate([SPECIALS, sample((300,), seed=60, lo=-3, hi=1.3)]), dtype))
    g = tf.constant(to_dtype(sample(x.shape, seed=61, lo=-1, hi=0.5), dtype))
    v = tf.constant(to_dtype(spec.grad_input(as_f64(x), attrs), dtype))
    with tf_ops.portable():
        y, dx, _, grad_op, gg_g, _ = tf.function(_all_passes(spec, attrs))(x, g, v)
    what = f"portable {spec.op_type}{attrs} {DTYPE_IDS[dtype]}"
    assert_close(y, _expected(spec, as_f64(x), ra), spec.tolerance(dtype), f"{what} forward")
    grad_tol = spec.grad_tolerance(dtype, g)
    finite = np.isfinite(as_f64(x))
    y_seen = as_f64(y) if spec.grad_takes_outputs else as_f64(x)
    expected_dx = spec.ref_grad(as_f64(g), y_seen, **ra)
    assert_close(as_f64(dx)[finite], expected_dx[finite], grad_tol, f"{what} gradient")
    expected_grad = spec.ref_grad(as_f64(g), as_f64(v), **ra)
    assert_close(grad_op, expected_grad, grad_tol, f"{what} grad op")
    assert_close(gg_g, expected_grad, grad_tol, f"{what} grad-grad d_gradients")


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_portable_second_order_float64(spec, attrs):
    """Nested tapes and the grad-grad op's second output against f'' (float64, away
    from the kinks, as the fused ops' own second-order tests)."""
    ra = round_attrs(attrs)
    x = tf.constant(sample((48,), seed=63, kinks=spec.kinks, min_dist=0.1, lo=-1.0, hi=0.5) * 2)
    g = tf.constant(sample((48,), seed=64, lo=-1, hi=0.3))
    with tf_ops.portable():
        _, _, d2x, _, _, gg_v = tf.function(_all_passes(spec, attrs))(x, g, x)
    expected = as_f64(g) * spec.ref_second(as_f64(x), **ra)
    tol = Tolerance(rtol=1e-12, atol=1e-15)
    assert_close(d2x, expected, tol, f"portable {spec.op_type}{attrs} d2y/dx2")
    if not spec.grad_takes_outputs:  # Elu's grad-grad op differentiates in the outputs
        assert_close(gg_v, as_f64(g) * expected, tol, f"portable {spec.op_type}{attrs} grad-grad")


def test_portable_checks_like_the_ops():
    with tf_ops.portable():
        with pytest.raises(ValueError, match=r"TfOps>Elu: attribute 'alpha' must be >= 0"):
            tf.function(lambda x: tf_ops.elu(x, alpha=-1.0))(tf.zeros([2]))
        with pytest.raises(ValueError, match=r"TfOps>GeluGrad.*same shape.*\[2\].*\[3\]"):
            tf_ops.gelu_grad(tf.zeros([2]), tf.zeros([3]))
        with pytest.raises(TypeError, match="alpha"):
            tf_ops.leaky_relu(tf.zeros([2]), alpha="x")


@pytest.mark.parametrize("spec", [pytest.param(s, id=s.name) for s in SPECS])
def test_portable_layers_match_fused_layers(spec):
    x = tf.constant(to_dtype(sample((64,), seed=62), tf.float32))
    layer = layer_class(spec)()
    with tf_ops.portable():
        portable_y = tf.function(layer)(x)
    assert_close(portable_y, as_f64(layer(x)), spec.tolerance(tf.float32).__class__(
        rtol=2 * spec.tolerance(tf.float32).rtol, atol=2 * spec.tolerance(tf.float32).atol), spec.name)
