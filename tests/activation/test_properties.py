"""Property tests (hypothesis): every op and grad op against its float64 reference
on random shapes (0-D to 8-D, empty and odd sizes, now and then a long vector
that TensorFlow's thread pool splits), random values (subnormals, +-0, +-inf,
NaN, huge and tiny magnitudes, the engine's thresholds), every dtype and random
attribute values (any finite float32 the op accepts).

Each hypothesis example is a batch of `CASES_PER_EXAMPLE` independent cases, so
hypothesis's own overhead is paid once per batch; every case runs the forward
op and the grad op. Each test asserts that at least `MIN_CASES_PER_OP` cases ran
for both of its ops. The examples are fixed by the "tf_ops" hypothesis profile
(tests/conftest.py): the same cases on every run, and a failure reproduces.

What "right" means, per element (the tolerance model, shared with the
references and tolerances of op_specs.py):
- NaN exactly where the reference is NaN; infinities exactly where it is
  infinite; a finite reference beyond the dtype's range may come out as the
  infinity it rounds to.
- Otherwise |actual - expected| <= bound, where bound adds up the op's dtype
  tolerance (`OpSpec.tolerance`: one rounding to the dtype plus a few ulps of
  the compute type) and three effects the float64 reference does not have:
  * conditioning: the kernel computes in float (double for float64), and a few
    ulps of error inside it act like a relative perturbation of the input, which
    some functions amplify (gelu's far left tail, swish's e^z for z << 0): allow
    COND_ULPS compute ulps times the reference's sensitivity |x f'(x)|, measured
    by finite differences of the reference itself;
  * cancellation in a grad op's f'(v) near its zero crossings, absolute and
    proportional to |g| (`OpSpec.grad_abs_ulps`);
  * underflow: a factor of the result (the logistic in swish, f'(v) in a grad
    op) may underflow in the compute type and take the result to 0: allow
    |x| (|g| for grad ops) times UNDERFLOW of the compute type. For the same
    reason an infinite g times an f'(v) that underflows gives NaN (inf * 0), as
    in TensorFlow's own grad kernels.
- TensorFlow runs CPU kernels with denormals flushed to zero (FTZ/DAZ; its own
  kernels see subnormals the same way, see the last tests here): inputs and
  attributes that are subnormal in the compute type may act as +-0, so an
  element may instead match the reference on flushed inputs.
"""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import tf_ops
from op_specs import COMPUTE_EPS, DTYPE_IDS, DTYPES, SPECS, OpSpec, round_attrs, spec_params

MIN_CASES_PER_OP = 2000
CASES_PER_EXAMPLE = 8
EXAMPLES_PER_OP = MIN_CASES_PER_OP // CASES_PER_EXAMPLE

COND_ULPS = 8.0
UNDERFLOW = {np.float32: 2.0**-100, np.float64: 2.0**-1000}
_H = 2.0**-20  # relative step of the finite differences

# ---------------------------------------------------------------------------
# Strategies.
# ---------------------------------------------------------------------------

# Where the math changes regime: kinks and zero crossings of f', the cut-offs
# and clamps of the engine (Mish's 20, exp's overflow / underflow bounds in
# float and double), Phi's underflow, the dtype limits.
THRESHOLDS = (
    0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 0.5, -0.5,
    -0.7518, -1.2785, 20.0, -20.0, 20.5, -13.0, -38.0, 88.7, -88.7, 88.8, -88.8, 104.0, -104.0,
    709.0, -745.0, 65504.0, -65504.0, 3.4e38, -3.4e38, 1e300, -1e300,
    2.0**-126, -(2.0**-126), 2.0**-149, 2.0**-1022, 5e-324, 6e-8, -6e-8,
)  # fmt: skip

_WIDTH = {tf.half: 16, tf.bfloat16: 32, tf.float32: 32, tf.float64: 64}


def _pool(dtype: tf.DType) -> list[float]:
    """Values worth trying in every dtype: the thresholds and the dtype's own
    extremes (largest finite, smallest normal, smallest subnormal, 1 +- eps)."""
    if dtype == tf.bfloat16:
        info = dict(max=float(tf.bfloat16.max), tiny=2.0**-126, sub=2.0**-133, eps=2.0**-7)
    else:
        f = np.finfo(dtype.as_numpy_dtype)
        info = dict(max=float(f.max), tiny=float(f.smallest_normal), sub=float(f.smallest_subnormal), eps=float(f.eps))
    extremes = [
        info["max"], info["tiny"], info["sub"], info["tiny"] - info["sub"], 1 + info["eps"], 1 - info["eps"] / 2
    ]  # fmt: skip
    return list(THRESHOLDS) + extremes + [-v for v in extremes]


_POOLS = {dtype: _pool(dtype) for dtype in DTYPES}


@st.composite
def _attrs(draw, spec: OpSpec) -> dict:
    attrs = {}
    for key, default in spec.attr_variants[0].items():
        known = sorted({v[key] for v in spec.attr_variants})
        if isinstance(default, bool):
            attrs[key] = draw(st.booleans())
            continue
        lo = spec.attr_min.get(key)  # the op's limit besides finiteness (test_errors checks that)
        extremes = [0.0, -0.0, 1e-40, -1e-40, 3.4e38, -3.4e38, 1e30, -1e30]
        extremes = [v for v in extremes if lo is None or v >= lo]
        attrs[key] = draw(
            st.one_of(
                st.sampled_from(known + extremes),
                st.floats(width=32, allow_nan=False, allow_infinity=False, min_value=lo),
            )
        )
    return attrs


# Largest side per dimension for each rank (the product is capped below).
_MAX_SIDE = {1: 257, 2: 33, 3: 9, 4: 5, 5: 4, 6: 3, 7: 3, 8: 3}
_MAX_ELEMENTS = 1024


@st.composite
def _shapes(draw) -> tuple[int, ...]:
    if draw(st.integers(0, 24)) == 24:
        # A long vector, split over threads by TF's pool (around 10^4 elements).
        return (draw(st.integers(1000, 40000)),)
    rank = draw(st.integers(0, 8))
    dims, size = [], 1
    for _ in range(rank):
        side = draw(st.integers(0, _MAX_SIDE[rank]))
        if size * side > _MAX_ELEMENTS:
            side = 1
        dims.append(side)
        size *= side
    return tuple(dims)


@dataclasses.dataclass
class Case:
    dtype: tf.DType
    attrs: dict
    shape: tuple[int, ...]
    lead: tuple[float, float, float]  # x[0], g[0], v[0]; the rest is seeded
    seed: int = 0

    def __repr__(self) -> str:  # what hypothesis prints for a failing example
        return (
            f"Case({DTYPE_IDS[self.dtype]}, attrs={self.attrs}, shape={self.shape}, "
            f"lead={self.lead}, seed={self.seed})"
        )


# Hypothesis draws the dtype, attributes, shape and the first element of each
# input of a case (any float of the dtype's width, or a pooled extreme); the
# other elements come from a generator seeded by the example, since drawing
# each through hypothesis would cost ~0.1 ms.
@st.composite
def _cases(draw, spec: OpSpec) -> Case:
    dtype = draw(st.sampled_from(DTYPES))
    attrs = draw(_attrs(spec))
    shape = draw(_shapes())
    pool = st.sampled_from(_POOLS[dtype])
    lead = (draw(st.floats(width=_WIDTH[dtype])), draw(pool), draw(pool))
    return Case(dtype, attrs, shape, lead)


@st.composite
def _batches(draw, spec: OpSpec) -> list[Case]:
    cases = draw(st.lists(_cases(spec), min_size=CASES_PER_EXAMPLE, max_size=CASES_PER_EXAMPLE))
    seed = draw(st.integers(0, 2**32 - 1))
    return [dataclasses.replace(c, seed=seed + i) for i, c in enumerate(cases)]


# ---------------------------------------------------------------------------
# Inputs.
# ---------------------------------------------------------------------------


def _compute_type(dtype: tf.DType):
    return np.float64 if dtype == tf.float64 else np.float32


def _bulk_values(rng: np.random.Generator, n: int, dtype: tf.DType) -> np.ndarray:
    """n float64 values: a mixture of ordinary magnitudes, the whole range of the
    dtype, thresholds and subnormals of the compute type, with random signs."""
    info = np.finfo(_compute_type(dtype)) if dtype != tf.half else np.finfo(np.float16)
    kind = rng.integers(0, 10, n)
    ordinary = 10.0 ** rng.uniform(-4, 2, n)
    wide = 2.0 ** rng.uniform(np.log2(float(info.smallest_normal)), np.log2(float(info.max)), n)
    subnormal = rng.uniform(0.0, 1.0, n) * float(info.smallest_normal)
    threshold = np.asarray(THRESHOLDS)[rng.integers(0, len(THRESHOLDS), n)]
    mag = np.select([kind < 6, kind < 8, kind < 9], [ordinary, wide, subnormal], threshold)
    return np.where(rng.random(n) < 0.5, -mag, mag)


def _to_dtype(values: np.ndarray, dtype: tf.DType) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(values, np.float64).astype(dtype.as_numpy_dtype)


def _inputs(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x, g, v in the case's dtype: the drawn lead value first, then bulk values."""
    rng = np.random.default_rng(case.seed)
    n = math.prod(case.shape)
    arrays = []
    for lead in case.lead:
        values = _bulk_values(rng, n, case.dtype)
        values[:1] = lead
        arrays.append(_to_dtype(values, case.dtype).reshape(case.shape))
    return tuple(arrays)


# ---------------------------------------------------------------------------
# Expected values and the per-element check.
# ---------------------------------------------------------------------------


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _is_subnormal(a: np.ndarray, compute) -> np.ndarray:
    a = np.abs(_f64(a))
    return (a > 0) & (a < float(np.finfo(compute).smallest_normal))


def _flush(a: np.ndarray, compute) -> np.ndarray:
    a = _f64(a)
    return np.where(_is_subnormal(a, compute), np.copysign(0.0, a), a)


def _flush_attrs(attrs: dict) -> dict:
    """Float attrs are float32 and reach the kernel through float32 (DAZ applies)."""
    return {
        k: math.copysign(0.0, v) if isinstance(v, float) and 0 < abs(v) < 2.0**-126 else v
        for k, v in attrs.items()
    }


def _sensitivity(fn, a: np.ndarray) -> np.ndarray:
    """max |fn(a (1 +- h)) - fn(a)| / h: how much a relative perturbation of the
    input moves fn, from the reference itself (0 where not finite)."""
    base = fn(a)
    out = np.zeros_like(base)
    for step in (1.0 + _H, 1.0 - _H):
        with np.errstate(over="ignore"):
            d = np.abs(fn(a * step) - base) / _H
        out = np.maximum(out, np.where(np.isfinite(d), d, 0.0))
    return out


@dataclasses.dataclass
class Expectation:
    value: np.ndarray  # float64 reference
    bound: np.ndarray  # allowed |actual - value| for finite values
    nan_ok: np.ndarray  # True where NaN is also acceptable


def _forward_expectation(spec: OpSpec, attrs: dict, x: np.ndarray, dtype: tf.DType) -> Expectation:
    compute = _compute_type(dtype)

    def ref(a):
        e = spec.ref(a, **attrs)
        for inf, limit in spec.ref_limits(**attrs).items():
            e = np.where(a == inf, limit, e)
        return e

    value = ref(x)
    tol = spec.tolerance(dtype)
    bound = (
        tol.rtol * np.abs(value)
        + tol.atol
        + COND_ULPS * COMPUTE_EPS[dtype] * _sensitivity(ref, x)
        + UNDERFLOW[compute] * np.where(np.isfinite(x), np.abs(x), 0.0)
    )
    return Expectation(value, bound, np.zeros(value.shape, bool))


def _grad_expectation(
    spec: OpSpec, attrs: dict, g: np.ndarray, v: np.ndarray, dtype: tf.DType
) -> Expectation:
    compute = _compute_type(dtype)
    value = spec.ref_grad(g, v, **attrs)
    tol = spec.tolerance(dtype)
    abs_g = np.where(np.isfinite(g), np.abs(g), 0.0)
    derivative = np.abs(spec.ref_grad(np.ones_like(v), v, **attrs))
    bound = (
        tol.rtol * np.abs(value)
        + tol.atol
        + COND_ULPS * COMPUTE_EPS[dtype] * _sensitivity(lambda a: spec.ref_grad(g, a, **attrs), v)
        + (spec.grad_abs_ulps * COMPUTE_EPS[dtype] + UNDERFLOW[compute]) * abs_g
    )
    nan_ok = np.isinf(g) & (derivative < UNDERFLOW[compute])
    return Expectation(value, bound, nan_ok)


def _ok(actual: np.ndarray, e: Expectation, dtype: tf.DType) -> np.ndarray:
    """Elementwise: is actual acceptable? Finite expectations are compared after
    clipping both sides to the dtype's range, so that a value that overflows the
    dtype may come out as the infinity of its sign."""
    a, v = _f64(actual), e.value
    big = float(dtype.max)
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.abs(np.clip(a, -big, big) - np.clip(v, -big, big)) <= e.bound
    return np.where(
        np.isnan(a),
        np.isnan(v) | e.nan_ok,
        ~np.isnan(v) & np.where(np.isinf(v), a == v, close),
    )


def _check(what: str, actual: np.ndarray, main: Expectation, flushed: Expectation | None, dtype, inputs):
    ok = _ok(actual, main, dtype)
    if flushed is not None:
        ok |= _ok(actual, flushed, dtype)
    if ok.all():
        return
    bad = np.argwhere(~ok.reshape(-1))[:, 0]
    i = bad[0]
    shown = ", ".join(f"{name}={_f64(a).reshape(-1)[i]!r}" for name, a in inputs.items())
    raise AssertionError(
        f"{what}: {bad.size}/{ok.size} elements wrong; first at flat index {i}: {shown}: "
        f"got {_f64(actual).reshape(-1)[i]!r}, expected {main.value.reshape(-1)[i]!r} "
        f"+- {main.bound.reshape(-1)[i]:.3g}"
    )


# ---------------------------------------------------------------------------
# One case and the tests.
# ---------------------------------------------------------------------------

_counts: collections.Counter = collections.Counter()


def _run_case(spec: OpSpec, case: Case) -> None:
    dtype, attrs, shape = case.dtype, case.attrs, case.shape
    x, g, v = _inputs(case)
    what = f"{spec.op_type}{attrs} {DTYPE_IDS[dtype]} shape={shape}"
    ra = round_attrs(attrs)
    compute = _compute_type(dtype)
    subnormal_in = any(_is_subnormal(a, compute).any() for a in (x, g, v)) or _flush_attrs(ra) != ra

    y = spec.forward(tf.constant(x), **attrs)
    assert y.dtype == dtype and tuple(y.shape) == shape, f"{what}: got {y.dtype} {y.shape}"
    with np.errstate(all="ignore"):
        main = _forward_expectation(spec, ra, _f64(x), dtype)
        flushed = _forward_expectation(spec, _flush_attrs(ra), _flush(x, compute), dtype) if subnormal_in else None
    _check(what, y.numpy(), main, flushed, dtype, {"x": x})
    _counts[spec.op_type] += 1

    dx = spec.grad_op(tf.constant(g), tf.constant(v), **attrs)
    assert dx.dtype == dtype and tuple(dx.shape) == shape, f"grad {what}: got {dx.dtype} {dx.shape}"
    with np.errstate(all="ignore"):
        main = _grad_expectation(spec, ra, _f64(g), _f64(v), dtype)
        flushed = (
            _grad_expectation(spec, _flush_attrs(ra), _flush(g, compute), _flush(v, compute), dtype)
            if subnormal_in
            else None
        )
    _check("grad " + what, dx.numpy(), main, flushed, dtype, {"g": g, "v": v})
    _counts[spec.grad_op_type] += 1


@pytest.mark.parametrize("spec", spec_params())
def test_ops_match_reference_on_random_input(spec):
    before = {t: _counts[t] for t in (spec.op_type, spec.grad_op_type)}

    @settings(max_examples=EXAMPLES_PER_OP)
    @given(_batches(spec))
    def check(cases):
        for case in cases:
            _run_case(spec, case)

    check()
    for op_type, n in before.items():
        ran = _counts[op_type] - n
        assert ran >= MIN_CASES_PER_OP, f"{op_type}: only {ran} cases ran"
        print(f"{op_type}: {ran} cases")


def test_subnormal_inputs_read_as_tensorflow_reads_them():
    """Subnormal features pick the same branch as in TF's own LeakyReluGrad
    (where TF flushes denormals, both see +-0 and take the alpha branch)."""
    x = tf.constant([1e-40, -1e-40, 1.0], tf.float32)
    ours = tf_ops.leaky_relu_grad(tf.ones([3]), x, alpha=0.5)
    theirs = tf.raw_ops.LeakyReluGrad(gradients=tf.ones([3]), features=x, alpha=0.5)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_tolerance_model_rejects_wrong_values():
    """The bounds above must still catch a wrong kernel: perturb correct outputs
    by one part in 1000 (float32) and by one half-ulp-of-1 absolute at zero."""
    spec = next(s for s in SPECS if s.name == "Gelu")
    x = np.linspace(-6, 6, 101).astype(np.float32)
    with np.errstate(all="ignore"):
        e = _forward_expectation(spec, {"approximate": False}, _f64(x), tf.float32)
    good = spec.forward(tf.constant(x)).numpy()
    assert _ok(good, e, tf.float32).all()
    assert not _ok(good * np.float32(1.001), e, tf.float32)[np.abs(good) > 1e-3].any()
    assert not _ok(np.float32(np.nan) * good, e, tf.float32).any()
