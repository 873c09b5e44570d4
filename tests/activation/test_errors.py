"""Bad input: shape and dtype mismatches, integer inputs, invalid attributes, in
eager, at tf.function trace time and at run time; the process keeps working."""

from __future__ import annotations

import re

import pytest
import tensorflow as tf

from checks import assert_library_still_works, mode_params
from op_specs import SPECS, attrs_id, spec_params

GRAPH_ERRORS = (ValueError, tf.errors.InvalidArgumentError)


def _assert_names_shapes(err: BaseException, *shapes: str):
    msg = str(err)
    for s in shapes:
        assert s in msg, f"error message should name shape {s}: {msg}"


@pytest.mark.parametrize("spec", spec_params())
def test_grad_op_static_shape_mismatch_fails_at_trace(spec):
    fn = tf.function(lambda: spec.grad_op(tf.ones([3]), tf.ones([4])))
    with pytest.raises(GRAPH_ERRORS) as info:
        fn.get_concrete_function()  # tracing only: nothing runs
    _assert_names_shapes(info.value, "[3]", "[4]")
    assert_library_still_works()


@pytest.mark.parametrize("spec", spec_params())
def test_grad_op_eager_shape_mismatch(spec):
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        spec.grad_op(tf.ones([3]), tf.ones([4]))
    _assert_names_shapes(info.value, "[3]", "[4]")
    assert_library_still_works()


@pytest.mark.parametrize("spec", spec_params())
def test_grad_op_dynamic_shape_mismatch_fails_at_run_time(spec):
    fn = tf.function(
        lambda g, v: spec.grad_op(g, v),
        input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], tf.float32)],
    )
    fn.get_concrete_function()  # traces fine: the shapes are unknown
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        fn(tf.ones([3]), tf.ones([4]))
    _assert_names_shapes(info.value, "[3]", "[4]")
    assert fn(tf.ones([4]), tf.ones([4])).shape == (4,)
    assert_library_still_works()


@pytest.mark.parametrize("mode", mode_params())
@pytest.mark.parametrize("spec", spec_params())
def test_grad_op_same_size_different_shape(spec, mode):
    g, v = tf.ones([2, 3]), tf.ones([3, 2])
    if mode == "eager":
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            spec.grad_op(g, v)
    else:
        with pytest.raises(GRAPH_ERRORS) as info:
            tf.function(lambda: spec.grad_op(g, v)).get_concrete_function()
    _assert_names_shapes(info.value, "[2,3]", "[3,2]")
    assert_library_still_works()


@pytest.mark.parametrize("mode", mode_params())
@pytest.mark.parametrize("spec", spec_params())
def test_grad_op_mixed_dtypes(spec, mode):
    call = lambda: spec.grad_op(tf.ones([3], tf.float32), tf.ones([3], tf.float64))  # noqa: E731
    with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError)):
        call() if mode == "eager" else tf.function(call).get_concrete_function()
    assert_library_still_works()


_ALLOWED_TYPES = (("half", "float16"), ("bfloat16",), ("float", "float32"), ("double", "float64"))


@pytest.mark.parametrize("mode", mode_params())
@pytest.mark.parametrize("which", ["forward", "grad_op"])
@pytest.mark.parametrize("spec", spec_params())
def test_rejects_integer_input(spec, which, mode):
    x = tf.constant([1, -2, 3], tf.int32)
    call = (lambda: spec.forward(x)) if which == "forward" else (lambda: spec.grad_op(x, x))
    with pytest.raises((TypeError, tf.errors.InvalidArgumentError)) as info:
        call() if mode == "eager" else tf.function(call).get_concrete_function()
    msg = str(info.value)
    assert "int32" in msg, msg
    for names in _ALLOWED_TYPES:
        assert any(re.search(rf"\b{n}\b", msg) for n in names), f"allowed type {names[0]} not named: {msg}"
    assert_library_still_works()


def _invalid_attr_params():
    return [
        pytest.param(spec, dict(attrs), pattern, id=f"{spec.name}-{attrs_id(attrs)}")
        for spec in SPECS
        for attrs, pattern in spec.invalid_attrs
    ]


@pytest.mark.parametrize("mode", mode_params())
@pytest.mark.parametrize("which", ["forward", "grad_op"])
@pytest.mark.parametrize("spec,attrs,pattern", _invalid_attr_params())
def test_rejects_invalid_attrs(spec, attrs, pattern, which, mode):
    x = tf.constant([-1.0, 0.5, 2.0])
    if which == "forward":
        call = lambda: spec.forward(x, **attrs)  # noqa: E731
    else:
        call = lambda: spec.grad_op(x, x, **attrs)  # noqa: E731
    if mode == "eager":
        with pytest.raises(tf.errors.InvalidArgumentError, match=pattern):
            call()
    else:
        with pytest.raises(GRAPH_ERRORS, match=pattern):
            tf.function(call).get_concrete_function()  # at graph building
    assert_library_still_works()


@pytest.mark.parametrize("spec,attrs,pattern", _invalid_attr_params())
def test_rejects_invalid_attrs_in_v1_graph(spec, attrs, pattern):
    """Graph building through the shape function, in a plain tf.Graph as well."""
    with tf.Graph().as_default():
        with pytest.raises(GRAPH_ERRORS, match=pattern):
            spec.forward(tf.constant([1.0]), **attrs)
    assert_library_still_works()
