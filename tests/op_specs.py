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
import keras
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


def builtin_tolerance(
    dtype: tf.DType, atol_eps: float, ulps: float = 2.0, floor: float = 0.0
) -> Tolerance:
    """Tolerance against TensorFlow's own kernels, which round more than once in
    half/bfloat16 (they cast alpha to T and compute each Eigen op in T): allow two
    ulps relative, plus `atol_eps` ulps-at-1 absolute (TF's Elu is exp(x) - 1,
    whose absolute error is ~1 ulp of 1.0, i.e. large relative to small results)."""
    return Tolerance(
        rtol=max(ulps * EPS[dtype], floor), atol=max(atol_eps * EPS[dtype], ATOL[dtype], floor)
    )


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
    # The smallest value a float attribute may take, where the op restricts it beyond
    # finiteness (activation_attrs.h): smaller values are rejected.
    attr_min: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # TF's own kernels, when they compute the same thing for these attrs (else None).
    builtin_forward: Callable[[Attrs], Callable | None] = lambda attrs: None
    builtin_grad: Callable[[Attrs], Callable | None] = lambda attrs: None
    builtin_atol_eps: float = 0.0  # see builtin_tolerance()
    builtin_ulps: float = 2.0  # TF's composites round at every step: see builtin_tolerance()
    builtin_floor: float = 0.0  # least rtol and atol vs TF (TF's float64 gelu is ~1e-8)
    compute_ulps: float = 8.0  # see tolerance()
    # Grad ops whose derivative crosses zero (swish' at z = -1.28, ...) sum terms of
    # opposite sign, so their error is absolute: up to this many compute-type ulps
    # of max|gradients| (see grad_tolerance()).
    grad_abs_ulps: float = 0.0
    # tf_ops grad-grad op: grad_grad_op(u, g, v, **attrs) -> (u f'(v), u g f''(v)).
    grad_grad_op: Callable[..., tuple] | None = None
    # float64 d f'(v) / dv from v, accurate over the whole range; None: ref_second
    # (v is x). Elu's is in terms of its outputs; Mish's ref_second cancels for x > 15.
    ref_second_v: Callable[..., np.ndarray] | None = None

    @property
    def op_type(self) -> str:
        return f"TfOps>{self.name}"

    @property
    def grad_op_type(self) -> str:
        return f"TfOps>{self.name}Grad"

    def grad_input(self, x64: np.ndarray, attrs: Attrs) -> np.ndarray:
        """What the grad op receives as v for features x (float64)."""
        return self.ref(x64, **round_attrs(attrs)) if self.grad_takes_outputs else x64

    @property
    def grad_grad_op_type(self) -> str:
        return f"TfOps>{self.name}GradGrad"

    def second_in_v(self, v64: np.ndarray, attrs: Attrs) -> np.ndarray:
        """float64 d f'(v) / dv at what the grad op receives as v, attrs as the kernel sees them."""
        fn = self.ref_second_v or self.ref_second
        return fn(v64, **round_attrs(attrs))

    def tolerance(self, dtype: tf.DType) -> Tolerance:
        return tolerance(dtype, self.compute_ulps)

    def grad_tolerance(self, dtype: tf.DType, gradients: Any) -> Tolerance:
        """`tolerance()` plus the absolute error of a cancelling sum, scaled by the
        largest finite incoming gradient."""
        tol = self.tolerance(dtype)
        g = np.abs(as_f64(gradients))
        g_max = float(g[np.isfinite(g)].max(initial=0.0))
        cancel = self.grad_abs_ulps * COMPUTE_EPS[dtype] * g_max
        return Tolerance(rtol=tol.rtol, atol=max(tol.atol, cancel))


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


def _elu_ref_second_v(y, alpha=1.0):
    """d/dy of Elu's f' in terms of y (1 where y > 0, else y + alpha): 0 or 1."""
    with np.errstate(invalid="ignore"):
        return np.where(np.asarray(y, np.float64) > 0, 0.0, 1.0)


def _elu_limits(alpha=1.0):
    return {math.inf: math.inf, -math.inf: -alpha}


# --- Shared float64 helpers for the smooth activations ----------------------


def _sigmoid(z):
    """Logistic function, accurate in both tails (no 1 - s cancellation needed:
    use _sigmoid(-z) for 1 - s)."""
    z = np.asarray(z, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(-np.abs(z))
        return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _times(x, w):
    """x * w with inf * 0 = (signed) 0: the limit the activations take."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    with np.errstate(invalid="ignore"):
        return np.where((w == 0) & np.isinf(x), np.copysign(0.0, x) * np.copysign(1.0, w), x * w)


_erfc = np.vectorize(math.erfc, otypes=[np.float64])
FLT_MIN = float(np.finfo(np.float32).tiny)  # the smallest normal float32
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


def _tape_grad(fn):
    """(g, v) -> g * fn'(v) through a tape: TF's gradient of a TF function."""

    def grad(g, v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = fn(v)
        return tape.gradient(y, v, output_gradients=g)

    return grad


# --- Gelu -------------------------------------------------------------------


def _gelu_z(x):
    """z = 2u, with 0.5 (1 + tanh u) = sigmoid(z)."""
    return 2.0 * _SQRT_2_OVER_PI * (x + _GELU_A * x**3)


def _gelu_ref(x, approximate=False):
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if approximate:
            return _times(x, _sigmoid(_gelu_z(x)))
        return _times(x, 0.5 * _erfc(-x / math.sqrt(2.0)))


def _gelu_ref_grad(g, x, approximate=False):
    g = np.asarray(g, np.float64)
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if approximate:
            z = _gelu_z(x)
            dz = 2.0 * _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_A * x**2)
            return g * (_sigmoid(z) + _times(x * dz, _sigmoid(z) * _sigmoid(-z)))
        phi = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        return g * (0.5 * _erfc(-x / math.sqrt(2.0)) + _times(x, phi))


def _gelu_ref_second(x, approximate=False):
    x = np.asarray(x, np.float64)
    if approximate:
        z = _gelu_z(x)
        dz = 2.0 * _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_A * x**2)
        d2z = 12.0 * _SQRT_2_OVER_PI * _GELU_A * x
        s, sm = _sigmoid(z), _sigmoid(-z)
        return s * sm * (2.0 * dz + x * (sm - s) * dz * dz + x * d2z)
    return np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi) * (2.0 - x * x)


def _tf_gelu_grad(approximate):
    def grad(g, v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = tf.nn.gelu(v, approximate=approximate)
        return tape.gradient(y, v, output_gradients=g)

    return grad


# --- Swish ------------------------------------------------------------------


def _swish_ref(x, beta=1.0):
    x = np.asarray(x, np.float64)
    return _times(x, _sigmoid(_times(x, beta)))


def _swish_ref_grad(g, x, beta=1.0):
    g = np.asarray(g, np.float64)
    z = _times(np.asarray(x, np.float64), beta)
    s, sm = _sigmoid(z), _sigmoid(-z)
    return g * (s + _times(z, s * sm))


def _swish_ref_second(x, beta=1.0):
    z = beta * np.asarray(x, np.float64)
    s, sm = _sigmoid(z), _sigmoid(-z)
    return beta * s * sm * (2.0 + z * (sm - s))


def _swish_limits(beta=1.0):
    if beta == 0:
        return {math.inf: math.inf, -math.inf: -math.inf}
    if beta > 0:
        return {math.inf: math.inf, -math.inf: -0.0}
    return {math.inf: 0.0, -math.inf: -math.inf}


def _tf_silu_grad(beta):
    def grad(g, v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = tf.nn.silu(v, beta=beta)
        return tape.gradient(y, v, output_gradients=g)

    return grad


# --- Mish -------------------------------------------------------------------


def _mish_parts(x):
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore"):  # NaN inputs stay NaN
        t = np.tanh(np.logaddexp(0.0, x))  # tanh(softplus x), softplus without overflow
    return x, t, _sigmoid(x)


def _mish_ref(x):
    x, t, _ = _mish_parts(x)
    return _times(x, t)


def _mish_ref_grad(g, x):
    x, t, s = _mish_parts(x)
    return np.asarray(g, np.float64) * (t + _times(x, (1.0 - t * t) * s))


def _mish_ref_second(x):
    x, t, s = _mish_parts(x)
    d = (1.0 - t * t) * s
    return 2.0 * d + x * d * (1.0 - s - 2.0 * t * s)


def _mish_ref_second_accurate(x):
    """f'' = 2 D + x D (1 - s - 2 t s), D = (1 - t^2) s, with 1 - t^2 = 1 / cosh^2(softplus x):
    no cancellation for large x, where f'' ~ -8 x e^-2x (1 - t*t cancels from x ~ 15 in float64)."""
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        sp = np.logaddexp(0.0, x)
        one_minus_t2 = 1.0 / np.cosh(sp) ** 2
        t = np.tanh(sp)
        s, sm = _sigmoid(x), _sigmoid(-x)
        d = one_minus_t2 * s
        return 2.0 * d + _times(x, d * (sm - 2.0 * t * s))


def _tf_mish(x):
    """The composite users write: x * tanh(softplus(x))."""
    return x * tf.tanh(tf.math.softplus(x))


def _tf_mish_grad(g, v):
    with tf.GradientTape() as tape:
        tape.watch(v)
        y = _tf_mish(v)
    return tape.gradient(y, v, output_gradients=g)


# --- HardSwish --------------------------------------------------------------


def _hard_swish_ref(x):
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore"):
        relu6 = np.where(np.isnan(x), np.nan, np.clip(x + 3.0, 0.0, 6.0))
    return _times(x, relu6 / 6.0)


def _hard_swish_ref_grad(g, x):
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore"):
        slope = np.where(x <= -3.0, 0.0, np.where(x >= 3.0, 1.0, (2.0 * x + 3.0) / 6.0))
    return np.asarray(g, np.float64) * slope


def _hard_swish_ref_second(x):
    x = np.asarray(x, np.float64)
    return np.where((x > -3.0) & (x < 3.0), 1.0 / 3.0, 0.0)


def _tf_hard_swish(x):
    """The composite users write (keras.activations.hard_swish): x * relu6(x + 3) / 6."""
    return x * tf.nn.relu6(x + 3.0) / 6.0


def _tf_hard_swish_grad(g, v):
    with tf.GradientTape() as tape:
        tape.watch(v)
        y = _tf_hard_swish(v)
    return tape.gradient(y, v, output_gradients=g)


# --- Celu -------------------------------------------------------------------


def _celu_ref(x, alpha=1.0):
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        t = x / alpha  # alpha * expm1(t) is x where t is tiny, also where t underflows
        return np.where(x > 0, x, np.where(np.abs(t) < 1e-30, x, alpha * np.expm1(t)))


def _celu_ref_grad(g, x, alpha=1.0):
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(g, np.float64) * np.where(x > 0, 1.0, np.exp(np.minimum(x, 0) / alpha))


def _celu_ref_second(x, alpha=1.0):
    x = np.asarray(x, np.float64)
    return np.where(x > 0, 0.0, np.exp(np.minimum(x, 0) / alpha) / alpha)


# --- Sigmoid ----------------------------------------------------------------


def _sigmoid_ref(x):
    return _sigmoid(x)


def _sigmoid_ref_grad(g, x):
    return np.asarray(g, np.float64) * _sigmoid(x) * _sigmoid(-np.asarray(x, np.float64))


def _sigmoid_ref_second(x):
    s, sm = _sigmoid(x), _sigmoid(-np.asarray(x, np.float64))
    return s * sm * (sm - s)


# --- Relu6 ------------------------------------------------------------------


def _relu6_ref(x):
    return np.clip(np.asarray(x, np.float64), 0.0, 6.0)


def _relu6_ref_grad(g, x):
    x = np.asarray(x, np.float64)
    return np.asarray(g, np.float64) * ((x > 0) & (x < 6))


def _relu6_ref_second(x):
    return np.zeros_like(np.asarray(x, np.float64))


# --- HardSigmoid ------------------------------------------------------------


def _hard_sigmoid_sum(x):
    """x + 3 rounded as the op and Keras round it (in float32 below float64)."""
    x = np.asarray(x)
    compute = np.float64 if x.dtype == np.float64 else np.float32
    return (x.astype(compute) + compute(3.0)).astype(np.float64)


def _hard_sigmoid_ref(x):
    x = np.asarray(x, np.float64)
    return np.clip(x + 3.0, 0.0, 6.0) / 6.0


def _hard_sigmoid_ref_grad(g, x):
    r = _hard_sigmoid_sum(x)
    return np.asarray(g, np.float64) * ((r > 0) & (r < 6)) / 6.0


def _hard_sigmoid_ref_second(x):
    return np.zeros_like(np.asarray(x, np.float64))


# --- Tanh -------------------------------------------------------------------


def _tanh_ref(x):
    return np.tanh(np.asarray(x, np.float64))


def _tanh_ref_grad(g, x):
    with np.errstate(over="ignore"):
        c = np.cosh(np.asarray(x, np.float64))  # 1 / cosh^2: no cancellation in the tails
        return np.asarray(g, np.float64) / (c * c)


def _tanh_ref_second(x):
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore"):
        c = np.cosh(x)
        return -2.0 * np.tanh(x) / (c * c)


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
        grad_grad_op=tf_ops.leaky_relu_grad_grad,
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
        grad_grad_op=tf_ops.elu_grad_grad,
        grad_takes_outputs=True,
        ref=_elu_ref,
        ref_grad=_elu_ref_grad,
        ref_second=_elu_ref_second,
        ref_second_v=_elu_ref_second_v,
        attr_variants=({"alpha": 1.0}, {"alpha": 0.2}, {"alpha": 0.0}, {"alpha": 1.5}),
        ref_limits=_elu_limits,
        kinks=(0.0,),
        invalid_attrs=(({"alpha": -0.3}, r"alpha.*>= 0"),) + _NON_FINITE,
        attr_min={"alpha": 0.0},
        builtin_forward=lambda attrs: tf.nn.elu if attrs["alpha"] == 1.0 else None,
        builtin_grad=lambda attrs: (
            (lambda g, v: tf.raw_ops.EluGrad(gradients=g, outputs=v)) if attrs["alpha"] == 1.0 else None
        ),
        builtin_atol_eps=2.0,
    ),
    OpSpec(
        name="Gelu",
        forward=tf_ops.gelu,
        grad_op=tf_ops.gelu_grad,
        grad_grad_op=tf_ops.gelu_grad_grad,
        grad_takes_outputs=False,
        ref=_gelu_ref,
        ref_grad=_gelu_ref_grad,
        ref_second=_gelu_ref_second,
        attr_variants=({"approximate": False}, {"approximate": True}),
        ref_limits=lambda approximate=False: {math.inf: math.inf, -math.inf: -0.0},
        builtin_forward=lambda attrs: (lambda x: tf.nn.gelu(x, approximate=attrs["approximate"])),
        builtin_grad=lambda attrs: _tf_gelu_grad(attrs["approximate"]),
        # TF's tanh form computes 1 + tanh(u), which cancels to 0 for x < -4 in
        # float (ours stays accurate there), and its float64 gelu is only accurate
        # to ~5e-8 (seen against the float64 reference).
        builtin_atol_eps=32.0,
        builtin_floor=1e-7,
        # Phi(x) in the far left tail is ill-conditioned: an ulp in -x/sqrt(2) moves
        # it by ~x^2 ulps (|x| <= 10 here), so allow that much float rounding.
        compute_ulps=512.0,
        grad_abs_ulps=64.0,
    ),
    OpSpec(
        name="Swish",
        forward=tf_ops.swish,
        grad_op=tf_ops.swish_grad,
        grad_grad_op=tf_ops.swish_grad_grad,
        grad_takes_outputs=False,
        ref=_swish_ref,
        ref_grad=_swish_ref_grad,
        ref_second=_swish_ref_second,
        attr_variants=({"beta": 1.0}, {"beta": 0.5}, {"beta": 2.0}, {"beta": 0.0}, {"beta": -1.0}),
        ref_limits=_swish_limits,
        invalid_attrs=(({"beta": math.nan}, "beta"), ({"beta": math.inf}, "beta"), ({"beta": -math.inf}, "beta")),
        builtin_forward=lambda attrs: (lambda x: tf.nn.silu(x, beta=attrs["beta"])),
        builtin_grad=lambda attrs: _tf_silu_grad(attrs["beta"]),
        builtin_atol_eps=4.0,
        compute_ulps=64.0,
        grad_abs_ulps=64.0,
    ),
    OpSpec(
        name="Mish",
        forward=tf_ops.mish,
        grad_op=tf_ops.mish_grad,
        grad_grad_op=tf_ops.mish_grad_grad,
        grad_takes_outputs=False,
        ref=_mish_ref,
        ref_grad=_mish_ref_grad,
        ref_second=_mish_ref_second,
        ref_second_v=_mish_ref_second_accurate,
        attr_variants=({},),
        ref_limits=lambda: {math.inf: math.inf, -math.inf: -0.0},
        builtin_forward=lambda attrs: _tf_mish,
        builtin_grad=lambda attrs: _tf_mish_grad,
        builtin_atol_eps=4.0,
        builtin_ulps=64.0,  # TF's composite gradient loses ~30 ulps (seen, float32 and float64)
        compute_ulps=32.0,
        grad_abs_ulps=64.0,
    ),
    OpSpec(
        name="HardSwish",
        forward=tf_ops.hard_swish,
        grad_op=tf_ops.hard_swish_grad,
        grad_grad_op=tf_ops.hard_swish_grad_grad,
        grad_takes_outputs=False,
        ref=_hard_swish_ref,
        ref_grad=_hard_swish_ref_grad,
        ref_second=_hard_swish_ref_second,
        attr_variants=({},),
        ref_limits=lambda: {math.inf: math.inf, -math.inf: -0.0},
        kinks=(-3.0, 3.0),
        builtin_forward=lambda attrs: _tf_hard_swish,
        builtin_grad=lambda attrs: _tf_hard_swish_grad,
        builtin_atol_eps=2.0,
        # f' = (2x + 3) / 6 crosses zero at x = -1.5: the sum's rounding is absolute.
        grad_abs_ulps=8.0,
    ),
    OpSpec(
        name="Celu",
        forward=tf_ops.celu,
        grad_op=tf_ops.celu_grad,
        grad_grad_op=tf_ops.celu_grad_grad,
        grad_takes_outputs=False,
        ref=_celu_ref,
        ref_grad=_celu_ref_grad,
        ref_second=_celu_ref_second,
        attr_variants=({"alpha": 1.0}, {"alpha": 0.5}, {"alpha": 3.0}),
        ref_limits=lambda alpha=1.0: {math.inf: math.inf, -math.inf: -alpha},
        kinks=(0.0,),  # f' is continuous there, f'' is not
        invalid_attrs=(({"alpha": 0.0}, r"alpha.*> 0"), ({"alpha": -1.0}, r"alpha.*> 0"),
                       ({"alpha": 1e-40}, r"alpha.*normal")) + _NON_FINITE,
        attr_min={"alpha": FLT_MIN},  # a positive normal float: x / alpha stays meaningful
        builtin_forward=lambda attrs: (lambda x: keras.activations.celu(x, alpha=attrs["alpha"])),
        builtin_grad=lambda attrs: _tape_grad(lambda x: keras.activations.celu(x, alpha=attrs["alpha"])),
        builtin_atol_eps=2.0,
        # An ulp of x / alpha moves e^(x / alpha) by |x / alpha| ulps (|x| <= 10 here).
        compute_ulps=32.0,
    ),
    OpSpec(
        name="Sigmoid",
        forward=tf_ops.sigmoid,
        grad_op=tf_ops.sigmoid_grad,
        grad_grad_op=tf_ops.sigmoid_grad_grad,
        grad_takes_outputs=False,
        ref=_sigmoid_ref,
        ref_grad=_sigmoid_ref_grad,
        ref_second=_sigmoid_ref_second,
        attr_variants=({},),
        ref_limits=lambda: {math.inf: 1.0, -math.inf: 0.0},
        builtin_forward=lambda attrs: tf.sigmoid,
        builtin_grad=lambda attrs: _tape_grad(tf.sigmoid),
        builtin_atol_eps=1.0,
        # e^-x loses |x| ulps to an ulp of x (|x| <= 10 here).
        compute_ulps=16.0,
        # f'' = s (1 - s) (1 - 2s) crosses zero at x = 0, where 1 - 2s = (1 - s) - s
        # cancels: its rounding is absolute (as HardSwish's f').
        grad_abs_ulps=4.0,
    ),
    OpSpec(
        name="Relu6",
        forward=tf_ops.relu6,
        grad_op=tf_ops.relu6_grad,
        grad_grad_op=tf_ops.relu6_grad_grad,
        grad_takes_outputs=False,
        ref=_relu6_ref,
        ref_grad=_relu6_ref_grad,
        ref_second=_relu6_ref_second,
        attr_variants=({},),
        ref_limits=lambda: {math.inf: 6.0, -math.inf: 0.0},
        kinks=(0.0, 6.0),
        builtin_forward=lambda attrs: tf.nn.relu6,
        builtin_grad=lambda attrs: (lambda g, v: tf.raw_ops.Relu6Grad(gradients=g, features=v)),
    ),
    OpSpec(
        name="HardSigmoid",
        forward=tf_ops.hard_sigmoid,
        grad_op=tf_ops.hard_sigmoid_grad,
        grad_grad_op=tf_ops.hard_sigmoid_grad_grad,
        grad_takes_outputs=False,
        ref=_hard_sigmoid_ref,
        ref_grad=_hard_sigmoid_ref_grad,
        ref_second=_hard_sigmoid_ref_second,
        attr_variants=({},),
        ref_limits=lambda: {math.inf: 1.0, -math.inf: 0.0},
        kinks=(-3.0, 3.0),
        builtin_forward=lambda attrs: (lambda x: tf.nn.relu6(x + 3.0) / 6.0),
        builtin_grad=lambda attrs: (
            lambda g, v: tf.raw_ops.Relu6Grad(gradients=g / 6.0, features=v + 3.0)),
    ),
    OpSpec(
        name="Tanh",
        forward=tf_ops.tanh,
        grad_op=tf_ops.tanh_grad,
        grad_grad_op=tf_ops.tanh_grad_grad,
        grad_takes_outputs=False,
        ref=_tanh_ref,
        ref_grad=_tanh_ref_grad,
        ref_second=_tanh_ref_second,
        attr_variants=({},),
        ref_limits=lambda: {math.inf: 1.0, -math.inf: -1.0},
        builtin_forward=lambda attrs: tf.tanh,
        # No builtin_grad: TensorFlow's gradient, TanhGrad of its outputs, is 0 where
        # float32 tanh rounds to +-1 (|x| > ~7.9), while sech^2 x is still ~1e-6 there:
        # the float64 reference holds the grad op instead.
        builtin_atol_eps=1.0,
        # e^(-2x) loses 2|x| ulps to an ulp of x (|x| <= 10 here).
        compute_ulps=32.0,
        # f'' = -2 tanh(x) sech^2(x) crosses zero at x = 0, where the composite's
        # autodiff (s' = s (1 - s)) cancels: its rounding is absolute (as Sigmoid's).
        grad_abs_ulps=4.0,
    ),
)

# ---------------------------------------------------------------------------
# Parametrization helpers.
# ---------------------------------------------------------------------------


def function_name(spec: OpSpec) -> str:
    """The public Python function of the spec's op: ``HardSwish`` -> ``hard_swish``."""
    return tf_ops.python.core.op_info.snake_case(spec.name)


def layer_class(spec: OpSpec) -> type:
    """The Keras layer (tf_ops.layers) computing the spec's op."""
    return next(c for c in tf_ops.layers.LAYERS.values() if c.ENTRY.op == spec.name)


def make_layer(spec: OpSpec, attrs: Attrs):
    """The spec's layer with these op attributes, passed under the layer's argument names."""
    cls = layer_class(spec)
    to_arg = {op_attr: arg for arg, op_attr in cls.ENTRY.layer_args.items()}
    return cls(**{to_arg.get(k, k): v for k, v in attrs.items()})


def non_default_attrs(spec: OpSpec) -> dict:
    """An attribute variant other than the defaults (the first), where the op has one."""
    return dict(spec.attr_variants[1] if len(spec.attr_variants) > 1 else spec.attr_variants[0])


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
