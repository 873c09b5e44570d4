"""The grad-grad ops, TfOps>{Act}GradGrad: the gradient of each grad op, both
derivatives in one fused pass.

Both outputs against float64 references for every op, attribute variant and
dtype over the whole range (far tails; Mish up to x = 45, where f'' is about
-8x e^-2x), eager and in tf.function; special values; the first output against
the grad op itself; buffers TF lets the kernel reuse; shape errors when the graph
is built (tf.function, v1 graph) and at run time (eager, dynamic shapes, v1
Session); XLA (the lowering and the composite fallback); second derivatives
through nested tapes and tf.hessians in every dtype and into the tails; third
order (tf.test.compute_gradient of the second derivative and of the op,
compat.v1 compute_gradient_error in a graph).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from checks import assert_close, assert_each_case, assert_library_still_works, in_mode, mode_params, tape_derivatives
from op_specs import (
    DTYPE_IDS,
    DTYPES,
    EPS,
    SPECS,
    Tolerance,
    as_f64,
    dtype_params,
    round_attrs,
    sample,
    spec_attr_params,
    spec_params,
    to_dtype,
)
from tf_ops.python.activation import functions as activations
from test_xla import BACKENDS, TF_CAN_BUILD_LOWERINGS, _require_lowerings

GRAPH_ERRORS = (ValueError, tf.errors.InvalidArgumentError)
# Far-tail inputs for every op, and where Mish's f'' is tiny but far from underflow.
TAILS = np.array([5.0, 8.0, 10.0, 13.0, 15.0, 20.0, 30.0, 50.0, 100.0, 1e4])
MISH_TAILS = np.array([8.0, 9.0, 12.0, 16.0, 20.0, 25.0, 30.0, 40.0, 45.0])
MAX_NUMERIC_ERROR = 1e-5


def _inputs(spec, attrs, dtype, seed, n=257):
    """u, g, x and the grad op's v (x, or Elu's outputs), rounded to dtype: random
    magnitudes 10**[-3, 1.5) of both signs, then the far tails (up to 1e4, or the
    largest finite value of dtype)."""
    x = sample((n,), seed=seed, lo=-3, hi=1.5)
    tails = np.concatenate([TAILS, -TAILS] + ([MISH_TAILS] if spec.name == "Mish" else []))
    x = np.concatenate([x, tails])
    x = to_dtype(np.clip(x, -float(dtype.max), float(dtype.max)), dtype)
    u = to_dtype(sample(x.shape, seed=seed + 1, lo=-1, hi=0.5), dtype)
    g = to_dtype(sample(x.shape, seed=seed + 2, lo=-1, hi=0.5), dtype)
    v = to_dtype(spec.grad_input(as_f64(x), attrs), dtype)
    return tuple(tf.constant(t) for t in (u, g, x, v))


def _expected(spec, attrs, u, g, v):
    """float64 (u f'(v), u g f''(v)) on the rounded inputs."""
    u64, g64, v64 = as_f64(u), as_f64(g), as_f64(v)
    return spec.ref_grad(u64, v64, **round_attrs(attrs)), u64 * g64 * spec.second_in_v(v64, attrs)


def _assert_matches_reference(spec, attrs, dtype, u, g, v, got, what):
    d_g, d_v = got
    assert d_g.dtype == dtype and d_v.dtype == dtype, what
    want_g, want_v = _expected(spec, attrs, u, g, v)
    assert_close(d_g, want_g, spec.grad_tolerance(dtype, u), f"{what} d_gradients")
    assert_close(d_v, want_v, spec.grad_tolerance(dtype, as_f64(u) * as_f64(g)), f"{what} d_v")


@pytest.mark.parametrize("mode", mode_params())
@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_values_match_reference(spec, attrs, dtype, mode):
    u, g, _, v = _inputs(spec, attrs, dtype, seed=60)
    got = in_mode(lambda u, g, v: spec.grad_grad_op(u, g, v, **attrs), mode)(u, g, v)
    _assert_matches_reference(spec, attrs, dtype, u, g, v, got, f"{spec.grad_grad_op_type}{attrs} "
                              f"{DTYPE_IDS[dtype]} {mode}")


@pytest.mark.parametrize("spec", spec_params())
def test_mish_and_tails_in_float32(spec):
    """f'' where it is tiny: relative accuracy, not just an absolute bound (the old
    composite second derivative of Mish returned 0 from x ~ 8 in float32)."""
    attrs = dict(spec.attr_variants[0])
    tails = MISH_TAILS if spec.name == "Mish" else np.array([3.0, 4.0, 5.0, 6.0])
    x = to_dtype(np.concatenate([tails, -tails]), tf.float32)
    v = tf.constant(to_dtype(spec.grad_input(as_f64(x), attrs), tf.float32))
    ones = tf.ones_like(v)
    _, d_v = spec.grad_grad_op(ones, ones, v, **attrs)
    want = spec.second_in_v(as_f64(v), attrs)
    nonzero = np.abs(want) > 1e-36  # well inside the normal floats
    assert_close(as_f64(d_v)[nonzero], want[nonzero], Tolerance(rtol=1e-5, atol=0.0), f"{spec.name} f'' tails")
    if spec.name == "Mish":
        assert nonzero.sum() == len(nonzero) - 1, want  # all but mish''(45) ~ 1e-37
        assert abs(float(d_v[0]) + 6.292e-6) < 1e-9, d_v.numpy()


@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_first_output_is_the_grad_op(spec, attrs, dtype):
    """d_gradients = u f'(v) is what the grad op computes for gradients u: bit for bit,
    specials included (same functor, same rounding)."""
    u, _, _, v = _inputs(spec, attrs, dtype, seed=61)
    specials = tf.constant(to_dtype(np.array([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0]), dtype))
    u = tf.concat([u, tf.fill(specials.shape, tf.constant(1.5, dtype)), specials], 0)
    v = tf.concat([v, specials, tf.fill(specials.shape, tf.constant(0.5, dtype))], 0)
    g = tf.ones_like(u)
    d_g, _ = spec.grad_grad_op(u, g, v, **attrs)
    np.testing.assert_array_equal(as_f64(d_g), as_f64(spec.grad_op(u, v, **attrs)))


@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_special_values(spec, attrs, dtype):
    """+-inf in v give finite results (f'' reaches its limit 0, or Elu's y-form value),
    never NaN; NaN in u or g gives NaN in d_v (IEEE products); NaN in v gives what
    the grad op and f'' give there (NaN where the float64 f'' is NaN at NaN: not the
    select-based derivatives)."""
    inf = to_dtype(np.array([math.inf, -math.inf]), dtype)
    v = tf.constant(to_dtype(spec.grad_input(as_f64(inf), attrs), dtype))
    u, g = tf.fill(v.shape, tf.constant(2.0, dtype)), tf.fill(v.shape, tf.constant(3.0, dtype))
    d_g, d_v = spec.grad_grad_op(u, g, v, **attrs)
    assert np.all(np.isfinite(as_f64(d_g))) and np.all(np.isfinite(as_f64(d_v))), (d_g, d_v)
    if not spec.grad_takes_outputs:
        np.testing.assert_array_equal(as_f64(d_v), 0.0)
    else:
        np.testing.assert_array_equal(as_f64(d_v), 6.0 * spec.second_in_v(as_f64(v), attrs))
    nan, one, half = (tf.constant([c], dtype) for c in (math.nan, 1.0, 0.5))
    for u1, g1 in ((nan, one), (one, nan)):
        assert np.isnan(as_f64(spec.grad_grad_op(u1, g1, half, **attrs)[1])).all()
    d_g, d_v = spec.grad_grad_op(one, one, nan, **attrs)
    np.testing.assert_array_equal(as_f64(d_g), as_f64(spec.grad_op(one, nan, **attrs)))
    # NaN where the float64 f'' is NaN there (the select-based ones, LeakyRelu's,
    # HardSwish's, Relu6's, ..., give a number).
    nan_second = np.isnan(spec.second_in_v(np.array([math.nan]), attrs)).all()
    assert np.isnan(as_f64(d_v)).all() == nan_second, d_v


@pytest.mark.parametrize("spec", spec_params())
def test_empty_and_scalar(spec):
    for shape in ((0,), (), (2, 0, 3)):
        t = tf.ones(shape)
        d_g, d_v = spec.grad_grad_op(t, t, t)
        assert d_g.shape == shape and d_v.shape == shape


@pytest.mark.parametrize("spec", spec_params())
def test_reused_input_buffers(spec):
    """Inside a graph TF hands the kernel its input buffers for the outputs when
    nothing else uses them: every pairing it can make must still be right."""
    attrs = dict(spec.attr_variants[0])
    u, g, _, v = _inputs(spec, attrs, tf.float32, seed=62, n=4099)
    want_g, want_v = _expected(spec, attrs, u, g, v)

    @tf.function
    def fresh_inputs(u, g, v):  # u * 1 etc. are temporaries the op may overwrite
        return spec.grad_grad_op(u * 1.0, g * 1.0, v * 1.0, **attrs)

    @tf.function
    def only_d_v(u, g, v):
        return spec.grad_grad_op(u * 1.0, g * 1.0, v * 1.0, **attrs)[1]

    @tf.function
    def only_d_g(u, g, v):
        return spec.grad_grad_op(u * 1.0, g * 1.0, v * 1.0, **attrs)[0]

    d_g, d_v = fresh_inputs(u, g, v)
    tol_g, tol_v = spec.grad_tolerance(tf.float32, u), spec.grad_tolerance(tf.float32, as_f64(u) * as_f64(g))
    assert_close(d_g, want_g, tol_g, "d_g, reused buffers")
    assert_close(d_v, want_v, tol_v, "d_v, reused buffers")
    assert_close(only_d_v(u, g, v), want_v, tol_v, "d_v alone")
    assert_close(only_d_g(u, g, v), want_g, tol_g, "d_g alone")


# --------------------------------------------------------------- errors ----


_MISMATCHES = (([3], [4], [3]), ([3], [3], [4]), ([4], [3], [3]), ([2, 3], [3, 2], [2, 3]))


@pytest.mark.parametrize("shapes", _MISMATCHES, ids=str)
@pytest.mark.parametrize("spec", spec_params())
def test_shape_mismatch_eager(spec, shapes):
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        spec.grad_grad_op(*(tf.ones(s) for s in shapes))
    for s in shapes:
        assert str(s).replace(" ", "") in str(info.value), info.value
    assert "must have the same shape" in str(info.value)
    assert_library_still_works()


@pytest.mark.parametrize("shapes", _MISMATCHES, ids=str)
@pytest.mark.parametrize("spec", spec_params())
def test_shape_mismatch_at_graph_build(spec, shapes):
    fn = tf.function(lambda: spec.grad_grad_op(*(tf.ones(s) for s in shapes)))
    with pytest.raises(GRAPH_ERRORS, match="must have the same shape"):
        fn.get_concrete_function()
    with tf.Graph().as_default():
        with pytest.raises(GRAPH_ERRORS, match="must have the same shape"):
            spec.grad_grad_op(*(tf.ones(s) for s in shapes))
    assert_library_still_works()


@pytest.mark.parametrize("spec", spec_params())
def test_shape_mismatch_at_run_time(spec):
    """Unknown dimensions pass the shape function; the kernel checks, in a
    tf.function and in a v1 Session."""
    sig = [tf.TensorSpec([None], tf.float32)] * 3
    fn = tf.function(lambda u, g, v: spec.grad_grad_op(u, g, v), input_signature=sig)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"got \[3\], \[4\] and \[3\]"):
        fn(tf.ones([3]), tf.ones([4]), tf.ones([3]))
    assert fn(tf.ones([4]), tf.ones([4]), tf.ones([4]))[1].shape == (4,)
    with tf.Graph().as_default():
        ph = [tf.compat.v1.placeholder(tf.float32, [None]) for _ in range(3)]
        out = spec.grad_grad_op(*ph)
        with tf.compat.v1.Session() as sess:
            with pytest.raises(tf.errors.InvalidArgumentError, match=r"got \[3\], \[3\] and \[5\]"):
                sess.run(out, dict(zip(ph, (np.ones(3), np.ones(3), np.ones(5)))))
            assert sess.run(out, dict(zip(ph, (np.ones(2),) * 3)))[1].shape == (2,)
    assert_library_still_works()


@pytest.mark.parametrize("spec", spec_params())
def test_rejects_integer_and_mixed_dtypes(spec):
    i32, f32, f64 = tf.constant([1, 2], tf.int32), tf.constant([1.0, 2.0]), tf.constant([1.0, 2.0], tf.float64)
    with pytest.raises((TypeError, tf.errors.InvalidArgumentError), match="int32"):
        spec.grad_grad_op(i32, i32, i32)
    with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError)):
        spec.grad_grad_op(f32, f32, f64)
    assert_library_still_works()


@pytest.mark.parametrize("spec", spec_params())
def test_invalid_attrs_rejected(spec):
    for attrs, pattern in spec.invalid_attrs:
        with pytest.raises(tf.errors.InvalidArgumentError, match=pattern):
            spec.grad_grad_op(tf.ones([2]), tf.ones([2]), tf.ones([2]), **attrs)
        with pytest.raises(GRAPH_ERRORS, match=pattern):
            tf.function(lambda: spec.grad_grad_op(tf.ones([2]), tf.ones([2]), tf.ones([2]), **attrs)
                        ).get_concrete_function()
    assert_library_still_works()


# ------------------------------------------------------------------ XLA ----


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    """'lowering': the library's XLA kernels; 'composite': the wrappers' fallback (the only
    one where TensorFlow cannot build the lowerings: test_xla.BACKENDS)."""
    if TF_CAN_BUILD_LOWERINGS:
        _require_lowerings()
    if request.param == "composite":
        monkeypatch.setattr(activations, "XLA_LOWERED", frozenset())
    return request.param


JIT_SPECIALS = np.array([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 30.0, -30.0])


def _jit_special_inputs(spec, attrs):
    """float32 (u, g, v) with the special values in v (through the grad op's v: Elu's outputs)."""
    v = tf.constant(to_dtype(spec.grad_input(JIT_SPECIALS, attrs), tf.float32))
    u = tf.constant([1.5, -2.0, 0.5, 1.0, 2.0, -1.0, 0.0, -0.0, 3.0])
    return u, tf.reverse(u, [0]), v


@pytest.mark.parametrize("spec", spec_params())
def test_jit_matches_reference_kernel_and_special_values(spec, backend, attr_variants=None):
    """Every attribute variant and dtype in one compiled function (one XLA compile),
    plus each variant's special values in float32: both outputs against the float64
    references and, for the lowering (the same functor), within rounding of the
    kernel. At +-inf, NaN and signed zeros the lowering gives the kernel's limits and
    signs of zeros; the composite's f'' is TF's autodiff of its f', which is NaN at
    +-inf and NaN inputs where the kernels give limits: it is held to the finite ones.
    `attr_variants` (default: all) picks fewer, for test_build_without_xla.py."""
    variants = attr_variants or spec.attr_variants
    cases = [(dict(attrs), dtype) for attrs in variants for dtype in DTYPES]
    cases += [(dict(attrs), "specials") for attrs in variants]
    inputs = [_jit_special_inputs(spec, attrs) if dtype == "specials"
              else tuple(t for k, t in enumerate(_inputs(spec, attrs, dtype, seed=63)) if k != 2)  # (u, g, v)
              for attrs, dtype in cases]

    def all_cases(inputs):
        return [spec.grad_grad_op(u, g, v, **attrs) for (attrs, _), (u, g, v) in zip(cases, inputs)]

    jit = tf.function(all_cases, jit_compile=True)(inputs)

    def check(i):
        (attrs, dtype), (u, g, v) = cases[i], inputs[i]
        kernel = spec.grad_grad_op(u, g, v, **attrs)
        if dtype == "specials":
            _assert_jit_specials(spec, attrs, backend, u, g, jit[i], kernel)
            return
        what = f"{spec.grad_grad_op_type}{attrs} {DTYPE_IDS[dtype]} jit {backend}"
        _assert_matches_reference(spec, attrs, dtype, u, g, v, jit[i], what)
        if backend == "lowering":  # the same functor: within rounding of the kernel
            for a, b, scale in zip(jit[i], kernel, (u, as_f64(u) * as_f64(g))):
                tol = spec.grad_tolerance(dtype, scale)
                assert_close(a, as_f64(b), Tolerance(2 * tol.rtol, 2 * tol.atol), what + " vs kernel")

    assert_each_case(range(len(cases)), check)


def _assert_jit_specials(spec, attrs, backend, u, g, jit, kernel):
    if backend == "lowering":
        keep, tols = np.ones(JIT_SPECIALS.shape, bool), [Tolerance(rtol=4 * EPS[tf.float32], atol=1e-30)] * 2
    else:  # another formula, as accurate as the values tests ask
        keep = np.isfinite(JIT_SPECIALS)
        tols = [spec.grad_tolerance(tf.float32, 2 * as_f64(t)) for t in (u, u * g)]
    for name, a, b, tol in zip(("d_gradients", "d_v"), jit, kernel, tols):
        assert_close(as_f64(a)[keep], as_f64(b)[keep], tol, f"{spec.name}{attrs} {backend} {name} at {JIT_SPECIALS}",
                     check_zero_sign=backend == "lowering")


def _entry_fusions(fn, *args) -> list[str]:
    """The fusion instructions of the compiled (optimized) HLO's entry computation."""
    hlo = tf.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)(stage="optimized_hlo")
    entry = hlo[hlo.index("\nENTRY"):]
    return [line for line in entry.splitlines() if " fusion(" in line]


@pytest.mark.parametrize("spec", spec_params())
def test_jit_one_fusion_per_output(spec):
    """Each op's lowering isolates its math: XLA compiles the forward, the grad op
    and each needed grad-grad output to one loop each, with no temporary array
    between them (a shared exponential would otherwise be kept in memory), also
    when they all run on the same x (first order, and second order through nested
    tapes). Mish's f'' uses e^-|x| in three places, which XLA's CPU fusion keeps in
    up to two temporaries: a limit of that heuristic, allowed here. The counts are upper
    bounds: XLA versions differ in whether an output that is a constant (LeakyRelu's
    f'' = 0) gets a loop (2.21 yes, 2.20 no) and in how many of Mish's temporaries they
    keep (2.21 two, 2.20 one); neither adds an array between the ops."""
    attrs = dict(spec.attr_variants[0])
    x = tf.constant(sample((1024,), seed=64), tf.float32)
    if not TF_CAN_BUILD_LOWERINGS:  # none built (TF 2.19's wheel): jit runs the composites
        graph = tf.function(lambda x: spec.forward(x, **attrs), jit_compile=True
                            ).get_concrete_function(x).graph.as_graph_def()
        types = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
        assert not [t for t in types if t.startswith("TfOps>")], types
        return

    def first_order(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = spec.forward(x, **attrs)
        return y, tape.gradient(y, x)

    def second_order(x):
        with tf.GradientTape() as outer:
            outer.watch(x)
            y, dy = first_order(x)
        return y, dy, outer.gradient(dy, x)

    op = lambda u, g, v: spec.grad_grad_op(u, g, v, **attrs)  # noqa: E731
    d2_temporaries = 2 if spec.name == "Mish" else 0
    def loops(fn, *args) -> int:
        n = len(_entry_fusions(fn, *args))
        assert n >= 1, "no loop at all: the op was not compiled"
        return n

    assert loops(lambda x: spec.forward(x, **attrs), x) == 1
    assert loops(lambda g, v: spec.grad_op(g, v, **attrs), x, x) == 1
    assert loops(first_order, x) == 2
    assert loops(lambda u, g, v: op(u, g, v)[1], x, x, x) <= 1 + d2_temporaries
    assert loops(op, x, x, x) <= 2 + d2_temporaries
    assert loops(second_order, x) <= 3 + d2_temporaries


# ---------------------------------------------------- second and third order ----


@pytest.mark.parametrize("mode", mode_params())
@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_nested_tapes_every_dtype_and_tails(spec, attrs, dtype, mode):
    """d2/dx2 (u * dy/dx) through nested tapes: u g f''(x) from the fused op, in every
    dtype and into the tails, against float64 f''(x)."""
    _, g, x, _ = _inputs(spec, attrs, dtype, seed=65)

    def second(x, g):
        return tape_derivatives(lambda t: spec.forward(t, **attrs), x, g)[2]

    d2x = in_mode(second, mode)(tf.constant(x), tf.constant(g))
    assert d2x.dtype == dtype
    x64, g64 = as_f64(x), as_f64(g)
    if spec.grad_takes_outputs:
        # Elu: d/dx of g f'(y(x)) = g (df'/dy) f'(x), in terms of the op's own outputs y.
        y = as_f64(spec.forward(x, **attrs))
        want = g64 * spec.second_in_v(y, attrs) * spec.ref_grad(np.ones_like(y), y, **round_attrs(attrs))
    else:
        want = g64 * spec.second_in_v(x64, attrs)
    tol = spec.grad_tolerance(dtype, g)
    # Elu's chain multiplies two rounded values: a second rounding.
    tol = Tolerance(2 * tol.rtol, tol.atol) if spec.grad_takes_outputs else tol
    assert_close(d2x, want, tol, f"{spec.name}{attrs} {DTYPE_IDS[dtype]} {mode} d2y/dx2")


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_hessians_into_the_tails(spec, attrs):
    x0 = np.concatenate([TAILS[:6], -TAILS[:6]])
    if spec.name == "Mish":
        x0 = np.concatenate([x0, MISH_TAILS])
    h = tf.function(lambda x: tf.hessians(tf.reduce_sum(spec.forward(x, **attrs)), x)[0])(tf.constant(x0))
    if spec.grad_takes_outputs:
        y = as_f64(spec.forward(tf.constant(x0), **attrs))
        want = spec.second_in_v(y, attrs) * spec.ref_grad(np.ones_like(x0), y, **round_attrs(attrs))
    else:
        want = spec.second_in_v(x0, attrs)
    assert_close(tf.linalg.diag_part(h), want, Tolerance(rtol=1e-11, atol=1e-300), f"{spec.name} Hessian")
    assert_close(h - tf.linalg.diag(tf.linalg.diag_part(h)), np.zeros((x0.size, x0.size)),
                  Tolerance(0.0, 0.0), "off-diagonal")


def _away_from_kinks(spec, shape, seed):
    return sample(shape, seed, spec.kinks, 0.1, lo=-1.0, hi=0.5)


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_third_order_compute_gradient(spec, attrs):
    """The Jacobian of the second derivative (third order, through the grad-grad op's
    registered gradient) against central differences."""

    def second_derivative(x):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = spec.forward(x, **attrs)
            dy = inner.gradient(y, x)
        return outer.gradient(dy, x)

    x = _away_from_kinks(spec, (2, 4), seed=66)
    theoretical, numerical = tf.test.compute_gradient(second_derivative, [x])
    err = float(np.max(np.abs(theoretical[0] - numerical[0])))
    assert err < MAX_NUMERIC_ERROR, f"{spec.name}{attrs} third order: {err}"


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_grad_grad_op_compute_gradient(spec, attrs):
    """The op's gradient in all three inputs, for each output and for both: the three
    outputs side by side in one traced function (one Jacobian; each output's rows get
    upstream gradients only from that output)."""
    u = sample((2, 3), seed=67, lo=-1, hi=0.3)
    g = sample((2, 3), seed=68, lo=-1, hi=0.3)
    v = _away_from_kinks(spec, (2, 3), seed=69)  # as v, also Elu's (off its kink at y = 0)
    picks = {"d_gradients": lambda r: r[0], "d_v": lambda r: r[1], "both": lambda r: r[0] * 0.5 + r[1] * 2.0}

    @tf.function
    def outputs(u, g, v):
        r = spec.grad_grad_op(u, g, v, **attrs)
        return tf.stack([pick(r) for pick in picks.values()])

    theoretical, numerical = tf.test.compute_gradient(outputs, [u, g, v])
    for name, t, n in zip("ugv", theoretical, numerical):
        err = np.abs(t - n).reshape(len(picks), -1, t.shape[-1]).max(axis=(1, 2))  # per output
        for pick, e in zip(picks, err):
            assert e < MAX_NUMERIC_ERROR, f"{spec.grad_grad_op_type}{attrs}: d {pick} / d {name}: {e}"


@pytest.mark.parametrize("spec,attrs", spec_attr_params())
def test_compat_v1_compute_gradient_error(spec, attrs):
    """Both outputs stacked: one Jacobian, whose error is the larger of theirs."""
    u0 = sample((2, 3), seed=70, lo=-1, hi=0.3)
    g0 = sample((2, 3), seed=71, lo=-1, hi=0.3)
    v0 = _away_from_kinks(spec, (2, 3), seed=72)
    with tf.Graph().as_default():
        u, g, v = tf.constant(u0), tf.constant(g0), tf.constant(v0)
        out = tf.stack(spec.grad_grad_op(u, g, v, **attrs))
        with tf.compat.v1.Session():
            err = tf.compat.v1.test.compute_gradient_error(
                [u, g, v], [u0.shape] * 3, out, (2,) + u0.shape, x_init_value=[u0, g0, v0])
            assert err < MAX_NUMERIC_ERROR, f"{spec.grad_grad_op_type}{attrs}: {err}"
