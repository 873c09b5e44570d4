"""XLA: every op under tf.function(jit_compile=True) and Keras jit_compile, through
the library's XLA lowerings and through the composite fallback that a library built
without them uses, against the non-jit kernels and the float64 references.

Forward, first-order and second-order gradients (nested tapes) and the grad ops
called directly, for every op, attribute variant and dtype; limits at +-inf, NaN
and signed zeros; that the compiled HLO really came from the lowerings; the
kernel registrations on the XLA devices.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels

import tf_ops
from checks import assert_close, assert_each_case, tape_derivatives
from op_specs import (
    DTYPE_IDS,
    DTYPES,
    EPS,
    SPECS,
    Tolerance,
    as_f64,
    round_attrs,
    sample,
    spec_params,
    to_dtype,
)
from tf_ops.python.activation import functions as activations

# TensorFlow 2.19's wheel cannot compile the lowerings: its XLA headers include LLVM headers it
# does not ship (CMakeLists.txt probes for that and builds without them), so built against it
# the wrappers' composites are all there is under jit. From 2.20 on, a library without the
# lowerings is a broken build, and _require_lowerings says so.
TF_CAN_BUILD_LOWERINGS = tuple(int(p) for p in tf.__version__.split(".")[:2]) >= (2, 20)
BACKENDS = ("lowering", "composite") if TF_CAN_BUILD_LOWERINGS else ("composite",)
XLA_DEVICES = ("XLA_CPU_JIT", "XLA_GPU_JIT")
DTYPE_ENUMS = {dt.as_datatype_enum for dt in (tf.half, tf.bfloat16, tf.float32, tf.float64)}
SPECIALS = np.array([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0])


def _require_lowerings():
    info = tf_ops.build_info()
    assert info is not None and info.xla, (
        f"these tests need the library built with its XLA lowerings (make build does, "
        f"TF_OPS_XLA=AUTO); build info: {info}"
    )


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    """'lowering': the library's XLA kernels; 'composite': the wrappers' fallback,
    forced in-process as if the library had been built with TF_OPS_XLA=OFF."""
    if TF_CAN_BUILD_LOWERINGS:
        _require_lowerings()
    if request.param == "composite":
        monkeypatch.setattr(activations, "XLA_LOWERED", frozenset())
    return request.param


def _pair(tol: Tolerance) -> Tolerance:
    """Two computations each within `tol` of the truth are within twice it of each other."""
    return Tolerance(rtol=2 * tol.rtol, atol=2 * tol.atol)


def _all_passes(spec, attrs):
    """forward y, tape gradient dx with upstream g, second derivative d2x = g f''(x)
    from nested tapes, and the grad op called directly on (gv, v)."""

    def fn(x, g, gv, v):
        y, dx, d2x = tape_derivatives(lambda t: spec.forward(t, **attrs), x, g)
        return y, dx, d2x, spec.grad_op(gv, v, **attrs)

    return fn


def _assert_second_order(d2x, non_jit, expected, dtype, what):
    """The second derivatives are TF composites computed in the tensor's dtype
    (gradients.py; the fallback's are TF's derivative of its own f'), which XLA
    evaluates with other roundings, in half/bfloat16 with float intermediates.
    Where f'' cancels those composites are inaccurate, so jit must agree with the
    non-jit path within a few ulps of the dtype (absolute in the largest value),
    or else be closer than it to the float64 truth."""
    a, n, e = as_f64(d2x), as_f64(non_jit), np.asarray(expected, np.float64)
    assert np.array_equal(np.isnan(a), np.isnan(n)), f"{what}: NaN mismatch: {a[np.isnan(a) != np.isnan(n)]}"
    fin = ~np.isnan(n)
    scale = max(float(np.max(np.abs(e[fin]), initial=0.0)), 1.0)
    slack = 16 * EPS[dtype] * (scale + np.abs(e[fin]))
    bad = (np.abs(a[fin] - n[fin]) > slack) & (np.abs(a[fin] - e[fin]) > np.abs(n[fin] - e[fin]) + slack)
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} elements: jit {a[fin][bad][:4]}, non-jit {n[fin][bad][:4]}, "
        f"float64 reference {e[fin][bad][:4]}"
    )


# One input vector per case: random samples over the range (forward, tape
# gradients, grad op), then the special values. The grad op also gets (1.5, a special
# v) and (a special g, an ordinary v) after its samples.
N = 257
SPECIAL_G = np.array([math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -2.0])
SPECIAL_G_V = np.array([0.5, -0.5, 0.5, 0.25, -0.5, 2.0, -2.0])
S = len(SPECIALS)


def _case_inputs(spec, attrs, dtype):
    """(x, g, gv, v) in `dtype`: x and g for the forward and the tapes, (gv, v) for the grad op."""
    x = to_dtype(np.concatenate([sample((N,), seed=40, lo=-3, hi=1), SPECIALS]), dtype)
    g = to_dtype(np.concatenate([sample((N,), seed=41, lo=-1, hi=0.5), np.full(S, 1.5)]), dtype)
    v = to_dtype(np.concatenate([spec.grad_input(as_f64(x[:N]), attrs), as_f64(x[N:]),
                                 spec.grad_input(SPECIAL_G_V, attrs)]), dtype)
    gv = to_dtype(np.concatenate([as_f64(g), SPECIAL_G]), dtype)
    return tuple(tf.constant(a) for a in (x, g, gv, v))


@pytest.mark.parametrize("spec", spec_params())
def test_jit_matches_non_jit_reference_and_special_values(spec, backend, attr_variants=None):
    """Every attribute variant and dtype of the op in one compiled function (one XLA
    compile, one non-jit trace): forward, tape gradient, nested-tape second derivative
    and the grad op against the float64 references and the non-jit kernels on random
    samples; at +-inf the same limits as the kernels (never NaN), NaN for NaN, and
    zeros keep their signs, for the forward and for the grad op with special v and
    special gradients. `attr_variants` (default: all) picks fewer, for
    test_build_without_xla.py, which calls this directly."""
    cases = [(dict(attrs), dtype) for attrs in (attr_variants or spec.attr_variants) for dtype in DTYPES]
    inputs = [_case_inputs(spec, attrs, dtype) for attrs, dtype in cases]

    def all_cases(inputs):
        return [_all_passes(spec, attrs)(x, g, gv, v) for (attrs, _), (x, g, gv, v) in zip(cases, inputs)]

    jit = tf.function(all_cases, jit_compile=True)(inputs)
    non_jit = tf.function(all_cases)(inputs)

    def check(i):
        attrs, dtype = cases[i]
        _check_case(spec, attrs, dtype, backend, inputs[i], jit[i], non_jit[i])

    assert_each_case(range(len(cases)), check)


def _check_case(spec, attrs, dtype, backend, inputs, jit, non_jit):
    x, g, gv, v = (as_f64(t) for t in inputs)
    ra = round_attrs(attrs)
    what = f"{spec.op_type}{attrs} {DTYPE_IDS[dtype]} {backend}"
    names = ("forward", "first-order gradient", "second-order gradient", "grad op")
    for name, a, like in zip(names, jit, (x, x, x, v)):
        assert a.dtype == dtype and a.shape == like.shape, f"{what} {name}: {a.dtype} {a.shape}"
    y, dx, d2x, grad_op = (as_f64(a) for a in jit)
    y_nj, dx_nj, d2x_nj, grad_op_nj = (as_f64(a) for a in non_jit)
    s = slice(0, N)  # the random samples

    tol = spec.tolerance(dtype)
    assert_close(y[s], spec.ref(x[s], **ra), tol, f"{what} forward vs reference")
    assert_close(y[s], y_nj[s], _pair(tol), f"{what} forward vs non-jit")
    # The gradient op receives what the forward produced (Elu: its rounded outputs).
    y_seen = y[s] if spec.grad_takes_outputs else x[s]
    grad_tol = spec.grad_tolerance(dtype, g[s])
    assert_close(dx[s], spec.ref_grad(g[s], y_seen, **ra), grad_tol, f"{what} gradient vs reference")
    assert_close(dx[s], dx_nj[s], _pair(grad_tol), f"{what} gradient vs non-jit")
    assert_close(grad_op[s], spec.ref_grad(gv[s], v[s], **ra), grad_tol, f"{what} grad op vs reference")
    assert_close(grad_op[s], grad_op_nj[s], _pair(grad_tol), f"{what} grad op vs non-jit")
    _assert_second_order(d2x[s], d2x_nj[s], g[s] * spec.ref_second(x[s], **ra), dtype, f"{what} second order")

    at = f"{what} at {SPECIALS}"
    sp = slice(N, N + S)
    assert_close(y[sp], y_nj[sp], _pair(tol), at, check_zero_sign=True)
    for part in (slice(N, N + S), slice(N + S, N + 2 * S)):  # (1.5, special v), (special g, v)
        assert_close(grad_op[part], grad_op_nj[part], _pair(spec.grad_tolerance(dtype, gv[part])), "grad " + at,
                     check_zero_sign=True)


def _hlo(fn, *args) -> str:
    return tf.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)(stage="hlo")


@pytest.mark.parametrize("spec", spec_params())
def test_hlo_comes_from_the_lowerings(spec, backend):
    """With lowerings the HLO is built by the TfOps kernels (its metadata names
    them) and calls nothing opaque, and on the CPU the grad op's input passes an
    optimization barrier (xla_isolated.h: XLA:CPU expands it before fusion; the
    GPU's lowerings emit none); with the fallback no TfOps op is left in the traced
    graph or the HLO."""
    attrs = dict(spec.attr_variants[0])
    x = tf.constant(sample((16,), seed=42))

    def fwd_and_grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = spec.forward(x, **attrs)
        return y, tape.gradient(y, x)

    hlo = _hlo(fwd_and_grad, x)
    assert "custom-call" not in hlo
    graph_ops = {op.type for op in tf.function(fwd_and_grad, jit_compile=True).get_concrete_function(x).graph.get_operations()}
    if backend == "lowering":
        assert f'op_type="{spec.op_type}"' in hlo and f'op_type="{spec.grad_op_type}"' in hlo
        assert spec.op_type in graph_ops
        assert "opt-barrier" in hlo
    else:
        assert "TfOps>" not in hlo
        assert not any(t.startswith("TfOps>") for t in graph_ops), graph_ops


@pytest.mark.parametrize("op_type", [t for s in SPECS for t in (s.op_type, s.grad_op_type)])
def test_xla_kernels_registered_for_all_dtypes(op_type):
    found = {}
    for k in kernels.get_registered_kernels_for_op(op_type).kernel:
        (constraint,) = [c for c in k.constraint if c.name == "T"]
        found.setdefault(k.device_type, set()).update(constraint.allowed_values.list.type)
    if not TF_CAN_BUILD_LOWERINGS:  # none built: jit takes the composites
        assert not set(found) & set(XLA_DEVICES), found
        assert op_type[len("TfOps>"):] not in activations.XLA_LOWERED
        return
    _require_lowerings()
    for device in XLA_DEVICES:
        assert found.get(device) == DTYPE_ENUMS, found
    assert op_type[len("TfOps>"):] in activations.XLA_LOWERED


@pytest.mark.parametrize("spec", spec_params())
def test_jit_grad_op_shape_mismatch_is_a_clear_error(spec, backend):
    """Shapes unknown at trace time: the lowering checks them when XLA compiles (the
    composite's own arithmetic refuses them, in TensorFlow's words)."""
    fn = tf.function(
        lambda g, v: spec.grad_op(g, v),
        input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], tf.float32)],
        jit_compile=True,
    )
    message = {"lowering": r"must have the same shape, got \[3\] and \[4\]",
               "composite": r"Incompatible shapes: \[3\] vs. \[4\]"}[backend]
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        fn(tf.ones([3]), tf.ones([4]))
    assert fn(tf.ones([4]), tf.ones([4])).shape == (4,)


@pytest.mark.parametrize("spec", spec_params())
def test_composite_rejects_invalid_attrs_like_the_op(spec, monkeypatch):
    monkeypatch.setattr(activations, "XLA_LOWERED", frozenset())
    for attrs, pattern in spec.invalid_attrs:
        for fn in (lambda x: spec.forward(x, **attrs), lambda x: spec.grad_op(x, x, **attrs)):
            with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=pattern):
                tf.function(fn, jit_compile=True)(tf.ones([3]))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=r"same shape"):
        tf.function(lambda: spec.grad_op(tf.ones([3]), tf.ones([4])), jit_compile=True)()


def _fit_all(specs, jit_compile):
    """One model with a branch Dense(16) -> op -> Dense(1) per spec (first attribute
    variant), one output and one MSE loss each: the branches share no weights, so each
    trains as it would alone (SGD), all in one compiled train step. Returns the model,
    the loss history (total and per output), predictions and each branch's first kernel."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,))
    firsts, outputs = {}, {}
    for spec in specs:
        attrs = dict(spec.attr_variants[0])
        firsts[spec.name] = keras.layers.Dense(16, name=f"{spec.name}_first")
        act = keras.layers.Lambda(lambda t, spec=spec, attrs=attrs: spec.forward(t, **attrs), name=f"{spec.name}_op")
        outputs[spec.name] = keras.layers.Dense(1, name=spec.name)(act(firsts[spec.name](inputs)))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss={name: "mse" for name in outputs},
                  jit_compile=jit_compile)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype("float32")
    y = rng.normal(size=(64, 1)).astype("float32")
    history = model.fit(x, {name: y for name in outputs}, epochs=2, batch_size=16, verbose=0)
    kernels = {name: layer.kernel.numpy() for name, layer in firsts.items()}
    return model, history.history, model.predict(x[:8], verbose=0), kernels


def _fit(spec, jit_compile):
    """`_fit_all` for one spec: (model, losses, predictions, first kernel)."""
    model, history, pred, kernels = _fit_all([spec], jit_compile)
    return model, history["loss"], pred[spec.name], kernels[spec.name]


_NON_JIT_FIT: list = []


def test_keras_jit_compile_fit_and_predict(backend):
    """Every op in one Keras model, trained with jit_compile=True and without: the same
    training step by step (only float32 rounding differs), per op."""
    model, history, pred, kernels = _fit_all(SPECS, jit_compile=True)
    assert model.jit_compile is True
    if not _NON_JIT_FIT:  # the same for both backends
        _NON_JIT_FIT.extend(_fit_all(SPECS, jit_compile=False)[1:])
    ref_history, ref_pred, ref_kernels = _NON_JIT_FIT

    def check(spec):
        name = spec.name
        what = f"{spec.op_type}{dict(spec.attr_variants[0])} Keras jit_compile fit {backend}"
        key = f"{name}_loss" if f"{name}_loss" in history else "loss"  # per output where Keras logs it
        assert np.all(np.isfinite(history[key])), f"{what}: loss {history[key]}"
        np.testing.assert_allclose(history[key], ref_history[key], rtol=1e-4, err_msg=f"{what}: {key}")
        np.testing.assert_allclose(pred[name], ref_pred[name], rtol=1e-4, atol=1e-5, err_msg=f"{what}: predict")
        np.testing.assert_allclose(kernels[name], ref_kernels[name], rtol=1e-4, atol=1e-5,
                                   err_msg=f"{what}: trained first kernel")

    assert_each_case(SPECS, check)
