"""The table the test suite is generic over: one `OpSpec` per activation.

Adding an activation (GELU, Swish, Mish, ...) to the tests means adding an entry
to `SPECS`; the test modules iterate over the table and never name an op.

References are float64 NumPy formulas (see shared/activations-math.md), never
TensorFlow. They are evaluated on inputs *already rounded to the tested dtype*
and with float attributes rounded to float32 (TensorFlow stores `float` attrs
as float32), so the only error left to tolerate is the kernel's own: see
`tolerance()`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf

import tf_ops

Attrs = Mapping[str, Any]

# ---------------------------------------------------------------------------
# Dtypes and tolerances (the one place they are defined).
# ---------------------------------------------------------------------------

DTYPES = (tf.half, tf.bfloat16, tf.float32, tf.float64)
DTYPE_IDS = {tf.half: "half", tf.bfloat16: "bfloat16", tf.float32: "float32", tf.float64: "float64"}

# Machine epsilon (spacing of the dtype just above 1.0).
EPS = {
    tf.half: 2.0**-10,
    tf.bfloat16: 2.0**-7,
    tf.float32: 2.0**-23,
    tf.float64: 2.0**-52,
}
# Precision the kernels compute in: float for half/bfloat16/float32, double for double.
COMPUTE_EPS = {tf.half: 2.0**-23, tf.bfloat16: 2.0**-23, tf.float32: 2.0**-23, tf.float64: 2.0**-52}
# Absolute slack near zero. half: half a subnormal ulp (2^-24 spacing). bfloat16 and
# float32: below the smallest normal, where TF's flush-to-zero mode may act. float64:
# the smallest normal. None of the sampled data comes near these except exact zeros.
ATOL = {
    tf.half: 2.0**-25,
    tf.bfloat16: float(np.finfo(np.float32).tiny),
    tf.float32: float(np.finfo(np.float32).tiny),
    tf.float64: float(np.finfo(np.float64).tiny),
}


@dataclasses.dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


def tolerance(dtype: tf.DType, compute_ulps: float = 8.0) -> Tolerance:
    """Tolerance of a kernel that computes in float (double for double) and rounds
    ONCE to `dtype`, against the float64 reference on the same rounded inputs.

    Rounding once costs at most half an ulp of `dtype` (relative 0.5 * EPS); the
    computation in the compute type adds a few of its ulps (libm expm1f, erff, tanhf
    are within ~2 ulps; `compute_ulps` is generous). That is:
      half 4.9e-4, bfloat16 3.9e-3, float32 1.0e-6, float64 1.9e-15.
    A kernel that rounds twice (computes in half/bfloat16) or computes double in
    float exceeds these; `test_values.py::test_tolerance_rejects_double_rounding`
    checks that the half/bfloat16 bound is tight enough to notice.
    """
    return Tolerance(
        rtol=0.5 * EPS[dtype] + compute_ulps * COMPUTE_EPS[dtype],
        atol=ATOL[dtype],
    )


def builtin_tolerance(dtype: tf.DType, atol_eps: float) -> Tolerance:
    """Tolerance against TensorFlow's own kernels, which round more than once in
    half/bfloat16 (they cast alpha to T and compute each Eigen op in T): allow two
    ulps relative, plus `atol_eps` ulps-at-1 absolute (TF's Elu is exp(x) - 1,
    whose absolute error is ~1 ulp of 1.0, i.e. large relative to small results)."""
    return Tolerance(rtol=2.0 * EPS[dtype], atol=max(atol_eps * EPS[dtype], ATOL[dtype]))


def to_dtype(values: np.ndarray, dtype: tf.DType) -> np.ndarray:
    """Rounds float64 values to `dtype` and returns them as a NumPy array of it."""
    return tf.constant(values, dtype=tf.float64).numpy().astype(dtype.as_numpy_dtype)


def as_f64(values: Any) -> np.ndarray:
    """Any tensor/array (half, bfloat16, ...) as float64 NumPy."""
    if isinstance(values, tf.Tensor):
        values = tf.cast(values, tf.float64).numpy()
    return np.asarray(values, dtype=np.float64)


def round_attrs(attrs: Attrs) -> dict:
    """Float attrs as the kernel sees them: rounded to float32."""
    return {k: float(np.float32(v)) if isinstance(v, float) else v for k, v in attrs.items()}


# ---------------------------------------------------------------------------
# The spec.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """Everything the generic tests need to know about one activation."""

    name: str  # op name without the namespace: "LeakyRelu" -> "TfOps>LeakyRelu"
    forward: Callable[..., tf.Tensor]  # tf_ops forward: forward(x, **attrs)
    grad_op: Callable[..., tf.Tensor]  # tf_ops grad op: grad_op(g, v, **attrs)
    grad_takes_outputs: bool  # v is the forward's outputs (Elu) rather than its features
    ref: Callable[..., np.ndarray]  # float64 f(x, **attrs)
    ref_grad: Callable[..., np.ndarray]  # float64 g * f'(.) from (g, v, **attrs)
    ref_second: Callable[..., np.ndarray]  # float64 f''(x, **attrs), away from kinks
    attr_variants: Sequence[dict]  # attrs to test values and gradients with
    ref_limits: Callable[..., dict]  # {+inf: f(+inf), -inf: f(-inf)} as limits, per attrs
    kinks: Sequence[float] = ()  # where f' jumps, in x and in the grad op's v
    invalid_attrs: Sequence[tuple[dict, str]] = ()  # (attrs, regex the error must match)
    # TF's own kernels, when they compute the same thing for these attrs (else None).
    builtin_forward: Callable[[Attrs], Callable | None] = lambda attrs: None
    builtin_grad: Callable[[Attrs], Callable | None] = lambda attrs: None
    builtin_atol_eps: float = 0.0  # see builtin_tolerance()
    compute_ulps: float = 8.0  # see tolerance()

    @property
    def op_type(self) -> str:
        return f"TfOps>{self.name}"

    @property
    def grad_op_type(self) -> str:
        return f"TfOps>{self.name}Grad"

    def grad_input(self, x64: np.ndarray, attrs: Attrs) -> np.ndarray:
        """What the grad op receives as v for features x (float64)."""
        return self.ref(x64, **round_attrs(attrs)) if self.grad_takes_outputs else x64

    def tolerance(self, dtype: tf.DType) -> Tolerance:
        return tolerance(dtype, self.compute_ulps)


# --- LeakyRelu --------------------------------------------------------------


def _leaky_relu_ref(x, alpha=0.2):
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(x > 0, x, alpha * x)


def _leaky_relu_ref_grad(g, x, alpha=0.2):
    g = np.asarray(g, np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(np.asarray(x) > 0, g, alpha * g)


def _leaky_relu_limits(alpha=0.2):
    # lim_{x->-inf} alpha * x: -inf for alpha > 0, +inf for alpha < 0, and for
    # alpha == 0 the -0.0 that alpha * x gives for every finite x < 0 (never NaN).
    return {math.inf: math.inf, -math.inf: -math.inf * alpha if alpha != 0 else -0.0}


# --- Elu --------------------------------------------------------------------


def _elu_ref(x, alpha=1.0):
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(x > 0, x, alpha * np.expm1(x))


def _elu_ref_grad(g, y, alpha=1.0):
    g = np.asarray(g, np.float64)
    y = np.asarray(y, np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(y > 0, g, g * (y + alpha))


def _elu_ref_second(x, alpha=1.0):
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore"):
        return np.where(x > 0, 0.0, alpha * np.exp(x))


def _elu_limits(alpha=1.0):
    return {math.inf: math.inf, -math.inf: -alpha}


# ---------------------------------------------------------------------------
# The table.
# ---------------------------------------------------------------------------

_NON_FINITE = ({"alpha": math.nan}, "alpha"), ({"alpha": math.inf}, "alpha"), (
    {"alpha": -math.inf},
    "alpha",
)

SPECS: tuple[OpSpec, ...] = (
    OpSpec(
        name="LeakyRelu",
        forward=tf_ops.leaky_relu,
        grad_op=tf_ops.leaky_relu_grad,
        grad_takes_outputs=False,
        ref=_leaky_relu_ref,
        ref_grad=_leaky_relu_ref_grad,
        ref_second=lambda x, alpha=0.2: np.zeros_like(np.asarray(x, np.float64)),
        attr_variants=({"alpha": 0.2}, {"alpha": 0.0}, {"alpha": 1.0}, {"alpha": 1.5}, {"alpha": -0.3}),
        ref_limits=_leaky_relu_limits,
        kinks=(0.0,),
        invalid_attrs=_NON_FINITE,
        builtin_forward=lambda attrs: (lambda x: tf.nn.leaky_relu(x, alpha=attrs["alpha"])),
        builtin_grad=lambda attrs: (
            lambda g, v: tf.raw_ops.LeakyReluGrad(gradients=g, features=v, alpha=attrs["alpha"])
        ),
    ),
    OpSpec(
        name="Elu",
        forward=tf_ops.elu,
        grad_op=tf_ops.elu_grad,
        grad_takes_outputs=True,
        ref=_elu_ref,
        ref_grad=_elu_ref_grad,
        ref_second=_elu_ref_second,
        attr_variants=({"alpha": 1.0}, {"alpha": 0.2}, {"alpha": 0.0}, {"alpha": 1.5}),
        ref_limits=_elu_limits,
        kinks=(0.0,),
        invalid_attrs=(({"alpha": -0.3}, r"alpha.*>= 0"),) + _NON_FINITE,
        builtin_forward=lambda attrs: tf.nn.elu if attrs["alpha"] == 1.0 else None,
        builtin_grad=lambda attrs: (
            (lambda g, v: tf.raw_ops.EluGrad(gradients=g, outputs=v)) if attrs["alpha"] == 1.0 else None
        ),
        builtin_atol_eps=2.0,
    ),
)

# ---------------------------------------------------------------------------
# Parametrization helpers.
# ---------------------------------------------------------------------------


def attrs_id(attrs: Attrs) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(attrs.items())) or "default"


def spec_attr_params():
    """pytest params (spec, attrs) for every spec and attr variant."""
    import pytest

    return [
        pytest.param(spec, dict(attrs), id=f"{spec.name}-{attrs_id(attrs)}")
        for spec in SPECS
        for attrs in spec.attr_variants
    ]


def spec_params():
    import pytest

    return [pytest.param(spec, id=spec.name) for spec in SPECS]


def dtype_params(dtypes=DTYPES):
    import pytest

    return [pytest.param(dt, id=DTYPE_IDS[dt]) for dt in dtypes]


def sample(shape, seed: int, kinks: Sequence[float] = (), min_dist: float = 0.0, lo=-3.0, hi=1.0):
    """float64 values with random signs and log-uniform magnitudes 10**[lo, hi),
    kept at least `min_dist` away from every kink."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape, dtype=np.int64))
    mag = 10.0 ** rng.uniform(lo, hi, size)
    x = np.where(rng.random(size) < 0.5, -mag, mag)
    for k in kinks:
        near = np.abs(x - k) < min_dist
        x[near] = k + np.where(x[near] >= k, min_dist, -min_dist) * (1 + rng.random(int(near.sum())))
    return x.reshape(shape)
