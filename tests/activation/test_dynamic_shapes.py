"""Grad ops given inputs whose shapes differ only at run time: every grad op,
every dtype, in eager, in `tf.function`s whose input_signature has unknown
dimensions or unknown rank, and in a v1 Session fed through placeholders. Each
mismatch raises InvalidArgumentError naming both shapes and the process goes on
working; none is broadcast or read past the smaller buffer.
(Static mismatches and the basic dynamic case are in test_errors.py.)

Also: forward ops, tape gradients and second-order gradients give the right
values when the shapes are only known at run time."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from checks import assert_close, assert_library_still_works
from op_specs import DTYPE_IDS, Tolerance, as_f64, dtype_params, round_attrs, sample, spec_params, to_dtype

# (gradients shape, second input's shape): different sizes, broadcastable pairs
# (which must not broadcast), the same size in another shape, scalars against
# one element, empty against non-empty, and a large input against a small one
# (an unchecked kernel would read far past the small buffer).
MISMATCHES = (
    ((3,), (4,)),
    ((4,), (3,)),
    ((1,), (5,)),
    ((5,), (1,)),
    ((), (1,)),
    ((1,), ()),
    ((0,), (1,)),
    ((1,), (0,)),
    ((2, 3), (3, 2)),
    ((2, 1), (2, 3)),
    ((0, 3), (3, 0)),
    ((2, 3, 4), (24,)),
    ((1 << 20,), (1,)),
    ((1,), (1 << 20,)),
    ((7, 1, 1, 1, 1, 1, 1, 2), (7, 1, 1, 1, 1, 1, 2, 1)),
)


def _shape_str(shape) -> str:
    """A shape as TensorFlow's TensorShape::DebugString writes it: [2,3]."""
    return "[" + ",".join(str(d) for d in shape) + "]"


def _assert_mismatch_error(err: BaseException, spec, g_shape, v_shape):
    msg = str(err)
    assert spec.grad_op_type in msg, msg
    for shape in (g_shape, v_shape):
        assert _shape_str(shape) in msg, f"error should name {_shape_str(shape)}: {msg}"


def _tensors(g_shape, v_shape, dtype):
    return tf.ones(g_shape, dtype), tf.ones(v_shape, dtype)


def _mismatch_params(same_rank: bool):
    return [
        pytest.param(g, v, id=f"{_shape_str(g)}-vs-{_shape_str(v)}")
        for g, v in MISMATCHES
        if not same_rank or len(g) == len(v)
    ]


@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec", spec_params())
def test_eager_mismatch(spec, dtype):
    attrs = dict(spec.attr_variants[-1])
    for g_shape, v_shape in MISMATCHES:
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            spec.grad_op(*_tensors(g_shape, v_shape, dtype), **attrs)
        _assert_mismatch_error(info.value, spec, g_shape, v_shape)
    assert_library_still_works()


@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec", spec_params())
def test_unknown_rank_signature_mismatch(spec, dtype):
    """One concrete function with inputs of unknown rank: every pair passes
    tracing and must be caught by the kernel."""
    attrs = dict(spec.attr_variants[-1])
    fn = tf.function(
        lambda g, v: spec.grad_op(g, v, **attrs),
        input_signature=[tf.TensorSpec(None, dtype), tf.TensorSpec(None, dtype)],
    )
    for g_shape, v_shape in MISMATCHES:
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            fn(*_tensors(g_shape, v_shape, dtype))
        _assert_mismatch_error(info.value, spec, g_shape, v_shape)
    # The same function still computes when the shapes agree.
    assert fn(tf.ones([2, 3], dtype), tf.ones([2, 3], dtype)).shape == (2, 3)
    assert_library_still_works()


@pytest.mark.parametrize("g_shape,v_shape", _mismatch_params(same_rank=True))
@pytest.mark.parametrize("spec", spec_params())
def test_unknown_dims_signature_mismatch(spec, g_shape, v_shape):
    """Known rank, unknown dimensions, every dtype."""
    attrs = dict(spec.attr_variants[0])
    unknown = [None] * len(g_shape)
    for dtype in (tf.half, tf.bfloat16, tf.float32, tf.float64):
        fn = tf.function(
            lambda g, v: spec.grad_op(g, v, **attrs),
            input_signature=[tf.TensorSpec(unknown, dtype), tf.TensorSpec(unknown, dtype)],
        )
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            fn(*_tensors(g_shape, v_shape, dtype))
        _assert_mismatch_error(info.value, spec, g_shape, v_shape)
    assert_library_still_works()


@pytest.mark.parametrize("spec", spec_params())
def test_v1_session_placeholders_mismatch(spec):
    """A TF1-style graph fed at run time: the executor path of graph mode."""
    attrs = dict(spec.attr_variants[0])
    with tf.Graph().as_default():
        g = tf.compat.v1.placeholder(tf.float32, shape=None)
        v = tf.compat.v1.placeholder(tf.float32, shape=[None, None])
        dx = spec.grad_op(g, v, **attrs)
        with tf.compat.v1.Session() as sess:
            for g_shape, v_shape in (((2, 3), (3, 2)), ((1,), (1, 1)), ((4, 5), (4, 6))):
                with pytest.raises(tf.errors.InvalidArgumentError) as info:
                    sess.run(dx, {g: np.ones(g_shape), v: np.ones(v_shape)})
                _assert_mismatch_error(info.value, spec, g_shape, v_shape)
            ok = sess.run(dx, {g: np.ones((2, 3)), v: np.ones((2, 3))})
            assert ok.shape == (2, 3)
    assert_library_still_works()


DYNAMIC_SHAPES = [(), (0,), (1,), (7,), (3, 5), (2, 0, 4), (1, 2, 1, 3, 1, 2, 1, 2)]


@pytest.mark.parametrize("dtype", dtype_params((tf.half, tf.float32, tf.float64)))
@pytest.mark.parametrize("spec", spec_params())
def test_values_and_gradients_with_unknown_shapes(spec, dtype):
    """Forward, first and second derivative through functions traced once for
    inputs of unknown rank, called with many shapes."""
    attrs = dict(spec.attr_variants[-1])
    ra = round_attrs(attrs)

    @tf.function(input_signature=[tf.TensorSpec(None, dtype)])
    def derivatives(x):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = spec.forward(x, **attrs)
            dy = inner.gradient(y, x)
        return y, dy, outer.gradient(dy, x)

    tol = spec.tolerance(dtype)
    for i, shape in enumerate(DYNAMIC_SHAPES):
        # Away from kinks (where f'' is a delta) and from the tails.
        x = to_dtype(sample(shape, seed=30 + i, kinks=spec.kinks, min_dist=0.1, lo=-1, hi=0.5), dtype)
        y, dy, d2y = derivatives(tf.constant(x))
        what = f"{spec.op_type}{attrs} {DTYPE_IDS[dtype]} shape={shape}"
        assert tuple(y.shape) == tuple(dy.shape) == tuple(d2y.shape) == shape, what
        x64 = as_f64(x)
        assert_close(y, spec.ref(x64, **ra), tol, what)
        v = as_f64(y) if spec.grad_takes_outputs else x64  # the grad op sees the outputs
        ones = np.ones(shape)
        assert_close(dy, spec.ref_grad(ones, v, **ra), spec.grad_tolerance(dtype, ones), "d/dx " + what)
        if dtype == tf.float64:  # f'' is composed from TF ops in the dtype: check in float64 only
            assert_close(d2y, spec.ref_second(x64, **ra), Tolerance(rtol=1e-9, atol=1e-12), "d2/dx2 " + what)
