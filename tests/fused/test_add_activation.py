"""Add + activation: ``tf_ops.add_activation(x, a, act)`` (``TfOps>Add{Act}``), for every
activation in op_specs.SPECS: values and gradients against float64 references for every
dtype, gradients of first and second order, what the backward keeps (only the output
where it gives f'), XLA, shape errors at graph build and run time, and the portable form
(no TfOps> op)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from checks import assert_close
from fused_refs import assert_jit_builds, compute_np, grad_tolerance, op_types
from op_specs import SPECS, as_f64, dtype_params, round_attrs, sample, spec_attr_params, to_dtype
from tf_ops.python.activation.table import ACTIVATIONS
from tf_ops.python.core import op_info
from tf_ops.python.fused import functions as fused

MAX_NUMERIC_ERROR = 1e-5
SHAPES = [(7,), (3, 5, 37), (2, 3, 4, 9)]
ENTRIES = {a.op: a for a in ACTIVATIONS}


def _name(spec) -> str:
    return op_info.snake_case(spec.name)


def _inputs(shape, dtype, seed):
    x = to_dtype(sample(shape, seed, lo=-2, hi=0.6), dtype)
    a = to_dtype(sample(shape, seed + 1, lo=-2, hi=0.3), dtype)
    g = to_dtype(sample(shape, seed + 2, lo=-1, hi=0.3), dtype)
    return x, a, g


def _z(x, a, dtype):
    """x + a as the kernel forms it: in the compute type."""
    c = compute_np(dtype)
    return (as_f64(x).astype(c) + as_f64(a).astype(c)).astype(np.float64)


def _reads_output(spec, attrs) -> bool:
    """Where f' is a function of f (stated here apart from the table's
    `slope_from_output`, which this checks): Elu's grad op takes the outputs anyway,
    ReLU's and ReLU6's slopes are where their outputs are inside their linear pieces."""
    alpha = attrs.get("alpha", 0.2)
    return (spec.grad_takes_outputs or spec.name == "Relu6"
            or (spec.name == "LeakyRelu" and alpha >= 0))


def test_output_gives_slope_is_the_table_s_statement():
    for spec in SPECS:
        for attrs in spec.attr_variants:
            full = {**{a.name: a.default for a in op_info.attrs(spec.op_type)}, **attrs}
            assert fused.output_gives_slope(ENTRIES[spec.name], full) == _reads_output(
                spec, attrs), (spec.name, attrs)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_values_and_gradients(spec, attrs, dtype, shape):
    x, a, g = _inputs(shape, dtype, seed=21)
    x, a, g = tf.constant(x), tf.constant(a), tf.constant(g)
    with tf.GradientTape() as tape:
        tape.watch([x, a])
        y = tf_ops.add_activation(x, a, _name(spec), **attrs)
    dx, da = tape.gradient(y, [x, a], output_gradients=g)
    assert y.dtype == dtype and y.shape == shape
    z = _z(x, a, dtype)
    assert_close(y, spec.ref(z, **round_attrs(attrs)), spec.tolerance(dtype), "activations")
    # The grad op reads the output where it gives f' (ReLU's, Elu's), as rounded to the
    # dtype: the reference takes that same output; else the sum in the compute type.
    v = as_f64(y) if _reads_output(spec, attrs) else z
    want = spec.ref_grad(as_f64(g), v, **round_attrs(attrs))
    tol = grad_tolerance(spec, attrs, dtype, g)
    assert_close(dx, want, tol, "d features")
    np.testing.assert_array_equal(as_f64(dx), as_f64(da))


def test_relu_keeps_only_the_output_for_the_backward_pass():
    """The gradient of add + ReLU reads the op's output, never an addend: what lets the
    patched ResNet keep no more than Keras's add and Relu (whose ReluGrad reads y)."""
    x = tf.TensorSpec([4, 8], tf.float32)

    @tf.function
    def step(x, a):
        with tf.GradientTape() as tape:
            tape.watch([x, a])
            y = tf_ops.add_activation(x, a, "relu")
        return tape.gradient(y, [x, a])

    graph = step.get_concrete_function(x, x).graph
    forward = [o for o in graph.get_operations() if o.type == "TfOps>AddLeakyRelu"]
    backward = [o for o in graph.get_operations() if o.type == "TfOps>LeakyReluGrad"]
    assert len(forward) == 1 and len(backward) == 1
    assert backward[0].inputs[1] is forward[0].outputs[0]
    # Swish's derivative needs its input: the sum is formed again from both addends.
    graph = tf.function(lambda x, a: tf.gradients(tf_ops.add_activation(x, a, "swish"),
                                                  [x, a])).get_concrete_function(x, x).graph
    (grad_op,) = [o for o in graph.get_operations() if o.type == "TfOps>SwishGrad"]
    assert grad_op.inputs[1].op.type == "AddV2"


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_compute_gradient_first_and_second_order(spec, attrs):
    a = np.array([[0.25, -0.5, 0.125], [1.0, -0.75, 0.5]])
    z = sample(a.shape, 5, spec.kinks, 0.1, lo=-1.0, hi=0.5)
    x = z - a
    what = f"{spec.name}{attrs}"

    def first(x, a):
        return tf_ops.add_activation(x, a, _name(spec), **attrs)

    theoretical, numerical = tf.test.compute_gradient(first, [x, a])
    assert max(np.abs(t - n).max() for t, n in zip(theoretical, numerical)) < MAX_NUMERIC_ERROR, what
    w = sample(a.shape, 6, lo=-1, hi=0.3)

    def gradient(x, a):
        with tf.GradientTape() as tape:
            tape.watch([x, a])
            y = first(x, a)
        return tf.concat([tf.reshape(d, [-1]) for d in tape.gradient(
            y, [x, a], output_gradients=tf.constant(w))], 0)

    theoretical, numerical = tf.test.compute_gradient(gradient, [x, a])
    assert max(np.abs(t - n).max() for t, n in zip(theoretical, numerical)) < MAX_NUMERIC_ERROR, (
        f"{what} second order")


def test_errors_name_the_shapes():
    x, a = tf.zeros([2, 3]), tf.zeros([3, 2])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"same shape.*\[2,3\].*\[3,2\]"):
        tf_ops.add_activation(x, a, "relu")  # the kernel (eager)
    with pytest.raises(ValueError, match=r"same shape"):  # the shape function
        tf.function(lambda: tf_ops.add_activation(x, tf.zeros([2, 4]), "relu"))()
    unknown = tf.TensorSpec(None, tf.float32)
    run = tf.function(lambda x, a: tf_ops.add_activation(x, a, "gelu"),
                      input_signature=[unknown, unknown])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"same shape \(no broadcasting\)"):
        run(x, tf.zeros([1, 3]))  # broadcastable, still refused: no silent broadcast
    # The XLA lowering checks again when it is compiled for concrete shapes. (A library
    # without lowerings, TensorFlow 2.19's, compiles the composite: TensorFlow's add.)
    jit = tf.function(lambda x, a: tf_ops.add_activation(x, a, "relu"), jit_compile=True,
                      input_signature=[unknown, unknown])
    message = (r"same shape" if tf_ops.build_info().xla
               else r"Incompatible shapes: \[2,3\] vs. \[3,2\]")
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=message):
        jit(x, a)
    with pytest.raises(ValueError, match="needs an activation"):
        tf_ops.add_activation(x, x, None)


def test_empty_and_in_place():
    empty = tf.zeros([0, 4])
    assert tf_ops.add_activation(empty, empty, "relu").shape == (0, 4)
    x = tf.constant([[-1.0, 2.0, 0.5]])
    np.testing.assert_array_equal(tf_ops.add_activation(x, x, "relu6"), [[0.0, 4.0, 1.0]])


@pytest.mark.parametrize("activation", ["relu", "gelu", "elu"])
@pytest.mark.parametrize("dtype", dtype_params([tf.bfloat16, tf.float32]))
def test_xla_lowering_matches_the_kernel(activation, dtype):
    x, a, g = (tf.constant(t) for t in _inputs((3, 16), dtype, seed=31))

    def step(x, a):
        with tf.GradientTape() as tape:
            tape.watch([x, a])
            y = tf_ops.add_activation(x, a, activation)
        return [y, *tape.gradient(y, [x, a], output_gradients=g)]

    jit = tf.function(step, jit_compile=True)
    assert_jit_builds(f"TfOps>Add{resolve_op(activation)}",
                      jit.get_concrete_function(x, a).graph.as_graph_def())
    for got, want in zip(jit(x, a), step(x, a)):
        np.testing.assert_allclose(as_f64(got), as_f64(want), rtol=1e-6, atol=1e-6)


def resolve_op(activation: str) -> str:
    from tf_ops.python.activation.resolver import resolve

    return resolve(activation).entry.op


def test_portable_runs_no_library_op():
    x, a, g = (tf.constant(t) for t in _inputs((4, 6), tf.float32, seed=41))

    def step(x, a):
        with tf.GradientTape() as tape:
            tape.watch([x, a])
            y = tf_ops.add_activation(x, a, "relu")
        return [y, *tape.gradient(y, [x, a], output_gradients=g)]

    want = step(x, a)
    with tf_ops.portable():
        fn = tf.function(step)
        types = op_types(fn.get_concrete_function(x, a).graph.as_graph_def())
        got = fn(x, a)
    assert not [t for t in types if t.startswith("TfOps>")], sorted(types)
    for u, v in zip(got, want):
        np.testing.assert_array_equal(as_f64(u), as_f64(v))


def test_every_activation_has_its_add_op():
    assert {f"Add{a.op}" for a in ACTIVATIONS} <= set(fused.OP_NAMES)
    assert {s.name for s in SPECS} == {a.op for a in ACTIVATIONS}
