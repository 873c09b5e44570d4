"""Attribute values at the edges, beyond test_errors.py's NaN and +-inf:

- Non-finite alpha / beta are all rejected when the op is built (NaN, +-inf, and
  finite Python floats that overflow the float32 attribute, like 1e39); none is
  given a meaning.
- Every finite value the op accepts is accepted in eager, tf.function and v1
  graphs, extremes included (+-0, the smallest subnormal, +-FLT_MAX, within
  the op's own limits: OpSpec.attr_min, e.g. Elu's alpha >= 0), and never turns
  a non-NaN input into NaN, infinities included.
  (Their values are checked against the references by test_properties.py.)
- Attributes of the wrong Python type fail with TypeError.
- A GraphDef edited to carry a non-finite attribute or an unsupported dtype is
  refused when imported.
The process keeps working after every error."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from checks import assert_library_still_works, mode_params
from op_specs import DTYPE_IDS, SPECS, as_f64, dtype_params, to_dtype

GRAPH_ERRORS = (ValueError, tf.errors.InvalidArgumentError)
FLT_MAX = float(np.finfo(np.float32).max)
FLT_TRUE_MIN = float(np.finfo(np.float32).smallest_subnormal)
FLT_MIN = float(np.finfo(np.float32).tiny)

# (spec, float attribute) for every float attribute of every op.
FLOAT_ATTRS = [
    (spec, key)
    for spec in SPECS
    for key, value in spec.attr_variants[0].items()
    if isinstance(value, float)
]


def _float_attr_params(values_for):
    return [
        pytest.param(spec, key, value, id=f"{spec.name}-{key}={value!r}")
        for spec, key in FLOAT_ATTRS
        for value in values_for(spec, key)
    ]


def _build(spec, which, attrs, mode, dtype=tf.float32):
    x = tf.constant([-1.0, 0.5, 2.0], dtype)
    call = (lambda: spec.forward(x, **attrs)) if which == "forward" else (lambda: spec.grad_op(x, x, **attrs))
    if mode == "eager":
        return call()
    return tf.function(call)()


@pytest.mark.parametrize("mode", mode_params())
@pytest.mark.parametrize("which", ["forward", "grad_op"])
@pytest.mark.parametrize(
    "spec,key,value", _float_attr_params(lambda spec, key: (1e39, -1e39, 1e300, -1e300))
)
def test_attr_overflowing_float32_is_rejected(spec, key, value, which, mode):
    """TF stores float attributes as float32: 1e39 becomes inf there, and must be
    refused like inf (for Elu, -1e39 is refused either way)."""
    errors = tf.errors.InvalidArgumentError if mode == "eager" else GRAPH_ERRORS
    with pytest.raises(errors, match=rf"'{key}' must be (finite|>= 0)"):
        _build(spec, which, {key: value}, mode)
    assert_library_still_works()


def _extremes(spec, key):
    values = [0.0, -0.0, FLT_TRUE_MIN, FLT_MIN, FLT_MAX, 1e-30, 1e30, -FLT_TRUE_MIN, -FLT_MAX, -1e30]
    lo = spec.attr_min.get(key)  # the op's own limit (OpSpec.attr_min)
    return [v for v in values if lo is None or v >= lo]


SPECIAL_INPUTS = np.array(
    [-math.inf, -1e30, -88.7, -20.0, -1.0, -1e-30, -0.0, 0.0, 1e-30, 1.0, 20.0, 88.7, 1e30, math.inf]
)


@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec,key,value", _float_attr_params(_extremes))
def test_extreme_finite_attrs_accepted_and_never_make_nan(spec, key, value, dtype):
    attrs = {key: value}
    what = f"{spec.op_type}{attrs} {DTYPE_IDS[dtype]}"
    with np.errstate(over="ignore"):  # 1e30 is inf in half
        x = tf.constant(to_dtype(SPECIAL_INPUTS, dtype))
    g = tf.constant(to_dtype(np.full(SPECIAL_INPUTS.shape, 1.5), dtype))
    y = spec.forward(x, **attrs)
    assert not np.isnan(as_f64(y)).any(), f"{what}: NaN from {SPECIAL_INPUTS}: {as_f64(y)}"
    v = y if spec.grad_takes_outputs else x
    dx = spec.grad_op(g, v, **attrs)
    assert not np.isnan(as_f64(dx)).any(), f"grad {what}: NaN at v={as_f64(v)}: {as_f64(dx)}"
    # And in graphs, through the shape function.
    fn = tf.function(lambda x: spec.forward(x, **attrs))
    np.testing.assert_array_equal(as_f64(fn(x)), as_f64(y))
    with tf.Graph().as_default():
        spec.forward(tf.constant([1.0]), **attrs)


@pytest.mark.parametrize("mode", mode_params())
@pytest.mark.parametrize(
    "spec,attrs",
    [
        pytest.param(spec, {key: bad}, id=f"{spec.name}-{key}={bad!r}")
        for spec, key in FLOAT_ATTRS
        for bad in ("0.2", [1.0])
    ]
    + [
        pytest.param(spec, {"approximate": bad}, id=f"{spec.name}-approximate={bad!r}")
        for spec in SPECS
        if "approximate" in spec.attr_variants[0]
        for bad in ("yes", 1, 1.5)
    ],
)
def test_attr_of_wrong_type_is_rejected(spec, attrs, mode):
    with pytest.raises(TypeError, match=next(iter(attrs))):
        _build(spec, "forward", attrs, mode)
    with pytest.raises(TypeError, match=next(iter(attrs))):
        _build(spec, "grad_op", attrs, mode)
    assert_library_still_works()


def _edited_graph_def(spec, edit):
    with tf.Graph().as_default() as graph:
        spec.forward(tf.constant([1.0, -1.0]), name="node")
    graph_def = graph.as_graph_def()
    (node,) = [n for n in graph_def.node if n.name == "node"]
    edit(node)
    return graph_def


@pytest.mark.parametrize(
    "spec,key,value,pattern",
    [
        pytest.param(spec, key, value, "must be finite", id=f"{spec.name}-{key}={value}")
        for spec, key in FLOAT_ATTRS
        for value in (math.nan, math.inf, -math.inf)
    ],
)
def test_graph_def_with_non_finite_attr_is_refused(spec, key, value, pattern):
    """A GraphDef (as from a file) that bypasses the Python wrappers."""
    graph_def = _edited_graph_def(spec, lambda node: setattr(node.attr[key], "f", value))
    with tf.Graph().as_default():
        with pytest.raises(GRAPH_ERRORS, match=pattern):
            tf.graph_util.import_graph_def(graph_def, name="")
    assert_library_still_works()


@pytest.mark.parametrize("spec", [pytest.param(s, id=s.name) for s in SPECS])
def test_graph_def_with_unsupported_dtype_is_refused(spec):
    def to_int32(node):
        node.attr["T"].type = tf.int32.as_datatype_enum

    graph_def = _edited_graph_def(spec, to_int32)
    with tf.Graph().as_default():
        allowed = r"int32 is not in the list of allowed values: half, bfloat16, float, double"
        with pytest.raises(GRAPH_ERRORS, match=allowed):
            tf.graph_util.import_graph_def(graph_def, name="")
    assert_library_still_works()
