"""Every activation's Python, one entry each: what Python adds to the C++ op.

The C++ library states each activation's math, attributes (names, types, defaults and
checks) and one-line description (``tf_ops/cc/activation/activation_math.h``); Python reads those
from the registered op (``op_def_registry``). An entry here adds only what C++ cannot
know:

- the Keras layer's name and argument names (Keras says ``negative_slope`` where the
  op says ``alpha``), and the prose and examples of the docstrings;
- the op's **portable composite**: f(x) and f'(v) written with TensorFlow built-in ops
  (``core/portable_math.py``), used under `tf_ops.portable()` (SavedModel without the
  library, TFLite, ONNX) and inside XLA when the library has no XLA lowerings. It is
  the only second statement of the math, justified because it must run without the
  library; the tests hold it to the same float64 references as the kernels.

From this table ``functions.py`` makes the public functions (``tf_ops.gelu``,
``gelu_grad``, ``gelu_grad_grad``), ``tf_ops.python.activation.gradients`` registers every gradient,
``layers.py`` makes the Keras layers, and the benchmark takes its cases.
Composites take tensors in the compute type (float32, or float64) and attributes as
the kernel sees them (float attributes rounded to float32).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Mapping

import tensorflow as tf

from tf_ops.python.core import op_info
from tf_ops.python.core import portable_math as pm
from tf_ops.python.core.portable import is_portable

Composite = Callable[..., tf.Tensor]


@dataclasses.dataclass(frozen=True)
class TensorFlowEquivalent:
    """What TensorFlow offers for the same function, as a user would write it: what the
    benchmark times tf_ops against.

    Attributes:
      label: how the benchmark names it.
      forward: f(x, **attrs) with TensorFlow ops (a built-in op where TF has one).
      grad: g * f'(v) with TensorFlow ops: TF's own grad op where it has one, else the
        derivative as a composite (what TF's backward computes, without re-running the
        forward).
    """

    label: str
    forward: Composite
    grad: Composite


@dataclasses.dataclass(frozen=True)
class Activation:
    """One activation's Python: names, docs, Keras mapping and portable composite.

    Attributes:
      op: the op name without the namespace: ``"Gelu"`` is ``TfOps>Gelu``, whose grad
        op is ``TfOps>GeluGrad`` and grad-grad op ``TfOps>GeluGradGrad``. The Python
        function is its snake case (``gelu``, ``gelu_grad``, ``gelu_grad_grad``).
      title: how the docstrings name it ("GELU").
      notes: the forward function's docstring after the formula.
      example: the forward function's doctest.
      grad_example: the grad op function's doctest.
      forward: portable composite f(x, **attrs).
      derivative: portable composite f'(v, **attrs), v being what the grad op takes
        (features, or outputs for Elu); higher orders are TF's autodiff of it.
      layer: the Keras layer class name in `tf_ops.layers`.
      layer_notes, layer_example: the layer's docstring.
      layer_args: Keras argument name for an op attribute where they differ.
      layer_aliases: further accepted argument names (Keras 2's), to a layer argument.
      tensorflow: what TensorFlow offers for the same function (the benchmark's
        reference).
      bench: the benchmark's cases: name -> attributes (default: the function's name
        with the default attributes).
      slope_from_output: for an activation whose grad op takes the features, whether
        f'(z) is exactly f' at f(z) for these attributes (ReLU's: f(z) > 0 where z > 0):
        the add ops' gradient then reads the output, as TensorFlow's ReluGrad does, and
        keeps neither addend (``fused/gradients.py``). None: never.
    """

    op: str
    title: str
    notes: str
    example: str
    grad_example: str
    forward: Composite
    derivative: Composite
    layer: str
    layer_notes: str
    layer_example: str
    layer_args: Mapping[str, str] = dataclasses.field(default_factory=dict)
    layer_aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tensorflow: TensorFlowEquivalent | None = None
    bench: Mapping[str, Mapping] | None = None
    slope_from_output: Callable[..., bool] | None = None

    def __post_init__(self):
        # f(NaN) is NaN wherever the composite runs, whatever clamps it has: under
        # tf_ops.portable() (TFLite's built-in MINIMUM/MAXIMUM drop NaN) and inside XLA
        # where the library has no lowerings (XLA's clamp, tf.nn.relu6's, drops it too):
        # stated once here.
        raw = self.forward

        def forward(x, **attrs):
            return pm.keep_nan(x, raw(x, **attrs))

        object.__setattr__(self, "forward", forward)

    def bench_cases(self) -> dict[str, Mapping]:
        """The benchmark's cases of this activation: name -> attributes."""
        return dict(self.bench) if self.bench is not None else {self.function: {}}

    @property
    def function(self) -> str:
        """The Python name: snake case of `op` (``HardSwish`` -> ``hard_swish``)."""
        return op_info.snake_case(self.op)


@tf.custom_gradient
def _ones(x: tf.Tensor):
    """Ones like x whose derivative is zeros (not None): a piecewise-constant f' still
    has a second derivative, as `tf.hessians` needs."""
    return tf.ones_like(x), lambda u: tf.zeros_like(x)


# Forward composites are what exports hold: built from portable_math, whose forms convert
# to TFLite builtins and ONNX. Derivative composites are the gradients' (SavedModel and
# XLA only) and TensorFlow differentiates them for higher orders: they use the TF ops
# with robust gradients (tf.sigmoid, tf.math.erfc) where the portable forms' autodiff
# overflows or loses a term (|x| at 0).

# --- LeakyRelu -------------------------------------------------------------------------


def _leaky_relu(x, alpha=0.2):
    # Each branch on x clamped to its side, so the branch not taken is finite (tf2onnx
    # makes the select a multiply-add); NaN fails x > 0 and min(NaN, 0) is NaN. With
    # alpha = 0 the branch is x * 0 on x clamped to the finite range (keeping the sign of
    # a zero): clamping to [-L, 0] instead, some XLA versions (TF 2.19's) turn -0 into +0.
    if alpha == 0:
        negative = pm.vanishing_product(x, 0.0, at="both")
    else:
        negative = alpha * tf.minimum(x, 0.0)
    return tf.where(x > 0, tf.maximum(x, 0.0), negative)


def _leaky_relu_derivative(x, alpha=0.2):
    return tf.where(x > 0, _ones(x), alpha * _ones(x))


# --- Elu -------------------------------------------------------------------------------


def _elu(x, alpha=1.0):
    # NaN fails x <= 0 and takes max(x, 0), which is NaN (TFLite's exp(NaN) is 0).
    negative = alpha * pm.expm1_nonpositive(tf.minimum(x, 0.0))
    return tf.where(x <= 0, negative, tf.maximum(x, 0.0))


def _elu_derivative(y, alpha=1.0):
    # From the outputs: 1 where y > 0, else y + alpha. XLA folds y + 0 into y, keeping
    # the -0 of every negative input with alpha = 0 where IEEE gives +0: y + y*y is +0
    # there, with the derivative 1 of y + 0.
    plus_alpha = y + alpha if alpha != 0 else tf.where(tf.equal(y, 0), y + y * y, y)
    return tf.where(y > 0, tf.ones_like(y), plus_alpha)


# --- Gelu ------------------------------------------------------------------------------

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_TANH_COEFF = 0.044715


def _gelu_phi(x):
    """Phi(x) = erfc(-x / sqrt 2) / 2: accurate for negative x, unlike (1 + erf) / 2."""
    return 0.5 * pm.erfc(-_INV_SQRT_2 * x)


def _gelu_z(x):
    """z = 2u, with (1 + tanh u) / 2 = logistic(z) (no cancellation for negative x)."""
    return 2.0 * _SQRT_2_OVER_PI * (x + _TANH_COEFF * x * x * x)


def _gelu(x, approximate=False):
    weight = pm.logistic(_gelu_z(x)) if approximate else _gelu_phi(x)
    return pm.vanishing_product(x, weight)


def _gelu_derivative(x, approximate=False):
    if approximate:  # s + x s (1 - s) z', z' = 2 sqrt(2/pi) (1 + 3 a x^2)
        z = _gelu_z(x)
        s, sm = tf.sigmoid(z), tf.sigmoid(-z)
        dz = 2.0 * _SQRT_2_OVER_PI * (1.0 + 3.0 * _TANH_COEFF * x * x)
        return s + pm.vanishing_product(x * dz, s * sm, at="both")
    phi = _INV_SQRT_2PI * tf.exp(-0.5 * x * x)  # Phi(x) + x phi(x)
    return 0.5 * tf.math.erfc(-_INV_SQRT_2 * x) + pm.vanishing_product(x, phi, at="both")


# --- Swish -----------------------------------------------------------------------------


def _swish(x, beta=1.0):
    # logistic(beta x) vanishes at -inf for beta > 0, at +inf for beta < 0.
    if beta == 0:
        return 0.5 * x
    return pm.vanishing_product(x, pm.logistic(beta * x), at="-inf" if beta > 0 else "+inf")


def _swish_derivative(x, beta=1.0):
    z = pm.vanishing_product(x, beta, at="both")  # s (1 + z (1 - s)), z = beta x
    s, sm = tf.sigmoid(z), tf.sigmoid(-z)
    return s + pm.vanishing_product(z, s * sm, at="both")


# --- Mish ------------------------------------------------------------------------------

_MISH_CUTOFF = 20.0  # beyond it tanh(softplus x) is 1 to double precision


def _mish_parts(x):
    """On x clamped to the cut-off (no overflow): t = tanh(softplus x) =
    n (n + 2) / (n (n + 2) + 2) with n = e^x, 1 - t^2 without cancellation, sigmoid(x)."""
    n = tf.exp(tf.minimum(x, _MISH_CUTOFF))
    num = n * (n + 2.0)
    d = num + 2.0
    return num / d, 4.0 * (num + 1.0) / (d * d), n / (1.0 + n)


def _mish(x):
    t, _, _ = _mish_parts(x)
    below = pm.vanishing_product(tf.minimum(x, _MISH_CUTOFF), t)
    return tf.where(x > _MISH_CUTOFF, tf.maximum(x, _MISH_CUTOFF), below)


def _mish_derivative(x):
    # t + x (1 - t^2) sigmoid(x) below the cut-off, 1 above.
    t, one_minus_t2, s = _mish_parts(x)
    below = t + pm.vanishing_product(tf.minimum(x, _MISH_CUTOFF), one_minus_t2 * s)
    return tf.where(x > _MISH_CUTOFF, _ones(x), below)


# --- HardSwish -------------------------------------------------------------------------


def _hard_swish(x):
    return pm.vanishing_product(x, tf.nn.relu6(x + 3.0) * (1.0 / 6.0))


def _hard_swish_derivative(x):
    # 0 for x <= -3, (2x + 3) / 6 inside, 1 for x >= 3 (TF's autodiff of the formula at
    # the kinks); NaN takes `inside`, which is NaN.
    inside = (2.0 * x + 3.0) * (1.0 / 6.0)
    return tf.where(x <= -3.0, tf.zeros_like(x), tf.where(x >= 3.0, tf.ones_like(x), inside))


# --- Celu ------------------------------------------------------------------------------


def _celu(x, alpha=1.0):
    negative = tf.minimum(x, 0.0)
    t = negative / alpha  # as the kernel: x itself where t is tiny (or flushed to 0)
    # Each branch finite where it is not taken (tf2onnx makes the select a multiply-add).
    # Clamped on both sides, not max(min(x, 0), -c): XLA fuses that into clamp(-c, x, 0),
    # which gives +0 at x = -0 in TF 2.19's XLA.
    tiny = tf.clip_by_value(x, -1e-30 * alpha, 1e-30 * alpha)
    negative = tf.where(tf.abs(t) < 1e-30, tiny, alpha * pm.expm1_nonpositive(t))
    return tf.where(x <= 0, negative, tf.maximum(x, 0.0))  # NaN: max(NaN, 0)


def _celu_derivative(x, alpha=1.0):
    return tf.where(x > 0, tf.ones_like(x), tf.exp(tf.minimum(x, 0.0) / alpha))


# --- Sigmoid ---------------------------------------------------------------------------


def _sigmoid(x):
    return pm.logistic(x)


def _sigmoid_derivative(x):
    return tf.sigmoid(x) * tf.sigmoid(-x)  # s (1 - s), no cancellation in either tail


# --- Relu6 -----------------------------------------------------------------------------


def _relu6(x):
    if is_portable():
        return tf.nn.relu6(x)  # TFLite's RELU6 and ONNX's Clip; NaN is kept by __post_init__
    # Inside XLA without the lowerings: XLA's relu6 (a clamp) makes -0 a +0, where the
    # kernel's clamp keeps x on [0, 6], -0 included.
    return tf.where(x < 0, tf.zeros_like(x), tf.minimum(x, 6.0))


def _relu6_derivative(x):
    inside = tf.logical_and(x > 0, x < 6)
    return tf.where(inside, _ones(x), 0.0 * _ones(x))


# --- HardSigmoid -----------------------------------------------------------------------


def _hard_sigmoid(x):
    return tf.nn.relu6(x + 3.0) / 6.0  # as Keras's TensorFlow backend; TFLite and ONNX ops


def _hard_sigmoid_derivative(x):
    # 1/6 where 0 < x + 3 < 6 with the sum rounded as Keras's (TensorFlow's Relu6Grad).
    r = x + 3.0
    inside = tf.logical_and(r > 0, r < 6)
    return tf.where(inside, _ones(x) / 6.0, 0.0 * _ones(x))


# --- Tanh ------------------------------------------------------------------------------


def _tanh(x):
    return tf.tanh(x)  # a builtin in every runtime


def _tanh_derivative(x):
    # sech^2 x = 4 s (1 - s), s = sigmoid(2x): no cancellation in the tails, and
    # tf.sigmoid's gradient for the higher orders (as Sigmoid's).
    return 4.0 * tf.sigmoid(2.0 * x) * tf.sigmoid(-2.0 * x)


# --- What TensorFlow offers (the benchmark's references) ---------------------------------


def _tf_gelu_grad(g, x, approximate=False):
    if approximate:
        u = _SQRT_2_OVER_PI * (x + _TANH_COEFF * x * x * x)
        t = tf.tanh(u)
        du = _SQRT_2_OVER_PI * (1.0 + 3.0 * _TANH_COEFF * x * x)
        return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)
    phi = 0.5 * (1.0 + tf.math.erf(x * _INV_SQRT_2))
    return g * (phi + x * _INV_SQRT_2PI * tf.exp(-0.5 * x * x))


def _tf_silu_grad(g, x, beta=1.0):
    s = tf.sigmoid(beta * x)
    return g * (s * (1.0 + beta * x * (1.0 - s)))


def _tf_mish_grad(g, x):
    t = tf.tanh(tf.math.softplus(x))
    return g * (t + x * (1.0 - t * t) * tf.sigmoid(x))


def _tf_hard_swish_grad(g, x):
    inside = tf.cast((x > -3.0) & (x < 3.0), x.dtype)
    return g * (tf.nn.relu6(x + 3.0) / 6.0 + x * inside / 6.0)


# --- The table -------------------------------------------------------------------------

ACTIVATIONS: tuple[Activation, ...] = (
    Activation(
        op="LeakyRelu",
        title="Leaky ReLU",
        notes="Matches `tf.nn.leaky_relu` (a select, so alpha > 1 and alpha < 0 behave as "
        "the formula says). `alpha` must be finite.",
        example=">>> tf_ops.leaky_relu([-2.0, 0.0, 3.0], alpha=0.1).numpy()\n"
        "array([-0.2,  0. ,  3. ], dtype=float32)",
        grad_example=">>> tf_ops.leaky_relu_grad([1.0, 1.0], [-2.0, 3.0], alpha=0.1).numpy()\n"
        "array([0.1, 1. ], dtype=float32)",
        forward=_leaky_relu,
        derivative=_leaky_relu_derivative,
        # With alpha >= 0, f(z) > 0 exactly where z > 0 (alpha z underflowing gives 0).
        slope_from_output=lambda alpha: alpha >= 0,
        layer="LeakyReLU",
        layer_notes="Drop-in for `keras.layers.LeakyReLU`, but the default slope is 0.2 (as "
        "`tf.nn.leaky_relu`; Keras's layer has 0.3): pass the slope explicitly when "
        "replacing a Keras layer that relied on its default. The slope may be any finite "
        "number. Keras 2's argument name ``alpha=`` is accepted too.",
        layer_example=">>> layer = tf_ops.layers.LeakyReLU(negative_slope=0.1)\n"
        '>>> layer(np.array([-2.0, 3.0], "float32")).numpy()\n'
        "array([-0.2,  3. ], dtype=float32)",
        layer_args={"negative_slope": "alpha"},
        layer_aliases={"alpha": "negative_slope"},
        tensorflow=TensorFlowEquivalent(
            "built-in",
            lambda x, alpha=0.2: tf.nn.leaky_relu(x, alpha=alpha),
            lambda g, v, alpha=0.2: tf.raw_ops.LeakyReluGrad(gradients=g, features=v, alpha=alpha),
        ),
    ),
    Activation(
        op="Elu",
        title="ELU",
        notes="With alpha = 1 it matches `tf.nn.elu`. `alpha` must be finite and >= 0 (the "
        "gradient is computed from the outputs, which a negative alpha makes ambiguous).",
        example=">>> tf_ops.elu([-1.0, 2.0]).numpy()\n"
        "array([-0.63212055,  2.        ], dtype=float32)",
        grad_example=">>> y = tf_ops.elu([-1.0, 2.0])\n"
        ">>> tf_ops.elu_grad([1.0, 1.0], y).numpy()\n"
        "array([0.36787945, 1.        ], dtype=float32)",
        forward=_elu,
        derivative=_elu_derivative,
        layer="ELU",
        layer_notes="Drop-in for `keras.layers.ELU`; unlike it, `alpha` is saved in the "
        "config.",
        layer_example='>>> tf_ops.layers.ELU(alpha=0.5)(np.array([-1.0, 2.0], "float32")).numpy()'
        ".round(4)\narray([-0.3161,  2.    ], dtype=float32)",
        tensorflow=TensorFlowEquivalent(
            "built-in",  # alpha = 1 only; the benchmark runs the default
            lambda x, alpha=1.0: tf.nn.elu(x),
            lambda g, v, alpha=1.0: tf.raw_ops.EluGrad(gradients=g, outputs=v),
        ),
    ),
    Activation(
        op="Gelu",
        title="GELU",
        notes="Matches `tf.nn.gelu(features, approximate)` in one fused kernel (TF runs 5 "
        "kernels, 8 for the tanh form). ``gelu(-inf) = 0``.",
        example=">>> tf_ops.gelu([-1.0, 0.0, 1.0]).numpy()\n"
        "array([-0.15865526,  0.        ,  0.8413447 ], dtype=float32)",
        grad_example=">>> tf_ops.gelu_grad([1.0], [0.0]).numpy()\narray([0.5], dtype=float32)",
        forward=_gelu,
        derivative=_gelu_derivative,
        layer="GELU",
        layer_notes="Same values as ``keras.activations.gelu(x, approximate)``.",
        layer_example='>>> tf_ops.layers.GELU()(np.array([-1.0, 1.0], "float32")).numpy()'
        ".round(4)\narray([-0.1587,  0.8413], dtype=float32)",
        tensorflow=TensorFlowEquivalent(
            "built-in (composite grad)",
            lambda x, approximate=False: tf.nn.gelu(x, approximate=approximate),
            _tf_gelu_grad,
        ),
        bench={"gelu": {}, "gelu_tanh": {"approximate": True}},
    ),
    Activation(
        op="Swish",
        title="Swish",
        notes="beta = 1 is SiLU (`tf.nn.silu`). `beta` may be any finite value (0 gives "
        "``features / 2``).",
        example=">>> tf_ops.swish([-1.0, 0.0, 2.0]).numpy().round(6)\n"
        "array([-0.268941,  0.      ,  1.761594], dtype=float32)",
        grad_example=">>> tf_ops.swish_grad([1.0], [0.0]).numpy()\narray([0.5], dtype=float32)",
        forward=_swish,
        derivative=_swish_derivative,
        layer="Swish",
        layer_notes="With the default ``beta=1.0`` it computes ``keras.activations.silu`` "
        "(Keras's ``swish``). `beta` is a fixed, finite number.",
        layer_example='>>> tf_ops.layers.Swish(beta=2.0)(np.array([-1.0, 1.0], "float32"))'
        ".numpy().round(4)\narray([-0.1192,  0.8808], dtype=float32)",
        tensorflow=TensorFlowEquivalent(
            "tf.nn.silu (composite grad)", lambda x, beta=1.0: tf.nn.silu(x, beta=beta), _tf_silu_grad
        ),
    ),
    Activation(
        op="Mish",
        title="Mish",
        notes="Fused: one kernel, no overflow for large inputs.",
        example=">>> tf_ops.mish([-1.0, 0.0, 1.0]).numpy().round(6)\n"
        "array([-0.303401,  0.      ,  0.865098], dtype=float32)",
        grad_example=">>> tf_ops.mish_grad([1.0], [0.0]).numpy()\narray([0.6], dtype=float32)",
        forward=_mish,
        derivative=_mish_derivative,
        layer="Mish",
        layer_notes="As ``keras.activations.mish``.",
        layer_example='>>> tf_ops.layers.Mish()(np.array([-1.0, 1.0], "float32")).numpy()'
        ".round(4)\narray([-0.3034,  0.8651], dtype=float32)",
        tensorflow=TensorFlowEquivalent(
            "composite", lambda x: x * tf.tanh(tf.math.softplus(x)), _tf_mish_grad
        ),
    ),
    Activation(
        op="HardSwish",
        title="HardSwish (MobileNetV3)",
        notes="As ``keras.activations.hard_swish``, in one kernel instead of four.",
        example=">>> tf_ops.hard_swish([-4.0, -1.0, 0.0, 1.0, 4.0]).numpy()\n"
        "array([-0.        , -0.33333334,  0.        ,  0.6666667 ,  4.        ],\n"
        "      dtype=float32)",
        grad_example=">>> tf_ops.hard_swish_grad([1.0, 1.0, 1.0], [-4.0, 0.0, 4.0]).numpy()\n"
        "array([0. , 0.5, 1. ], dtype=float32)",
        forward=_hard_swish,
        derivative=_hard_swish_derivative,
        layer="HardSwish",
        layer_notes="As ``keras.activations.hard_swish``.",
        layer_example='>>> tf_ops.layers.HardSwish()(np.array([-1.0, 1.0], "float32")).numpy()'
        ".round(4)\narray([-0.3333,  0.6667], dtype=float32)",
        tensorflow=TensorFlowEquivalent(
            "composite (keras.activations.hard_swish)",
            lambda x: x * tf.nn.relu6(x + 3.0) / 6.0,
            _tf_hard_swish_grad,
        ),
    ),
    Activation(
        op="Celu",
        title="CELU (continuously differentiable ELU)",
        notes="Barron (2017); PyTorch's `nn.CELU`, JAX's `jax.nn.celu`, as "
        "``keras.activations.celu`` in one kernel instead of four. Unlike `elu` with "
        "alpha != 1, its derivative is continuous at 0. `alpha` must be > 0 and a normal float (>= 1.2e-38).",
        example=">>> tf_ops.celu([-1.0, 2.0], alpha=0.5).numpy().round(6)\n"
        "array([-0.432332,  2.      ], dtype=float32)",
        grad_example=">>> tf_ops.celu_grad([1.0, 1.0], [-1.0, 2.0], alpha=0.5).numpy().round(6)\n"
        "array([0.135335, 1.      ], dtype=float32)",
        forward=_celu,
        derivative=_celu_derivative,
        layer="CELU",
        layer_notes="As ``keras.activations.celu(x, alpha)`` (Keras has no CELU layer).",
        layer_example='>>> tf_ops.layers.CELU(alpha=2.0)(np.array([-1.0, 1.0], "float32")).numpy()'
        ".round(4)\narray([-0.7869,  1.    ], dtype=float32)",
        tensorflow=TensorFlowEquivalent(
            "composite (keras.activations.celu)",
            lambda x, alpha=1.0: tf.maximum(x, 0.0) + alpha * tf.math.expm1(tf.minimum(x, 0.0) / alpha),
            lambda g, v, alpha=1.0: g * tf.where(v > 0, tf.ones_like(v), tf.exp(tf.minimum(v, 0.0) / alpha)),
        ),
    ),
    Activation(
        op="Sigmoid",
        title="Sigmoid",
        notes="As `tf.sigmoid`; the gate of the original GLU (`tf_ops.glu`). Its grad op "
        "takes the features (TensorFlow's SigmoidGrad takes the outputs).",
        example=">>> tf_ops.sigmoid([-1.0, 0.0, 2.0]).numpy().round(6)\n"
        "array([0.268941, 0.5     , 0.880797], dtype=float32)",
        grad_example=">>> tf_ops.sigmoid_grad([1.0], [0.0]).numpy()\narray([0.25], dtype=float32)",
        forward=_sigmoid,
        derivative=_sigmoid_derivative,
        layer="Sigmoid",
        layer_notes="As ``keras.activations.sigmoid`` (Keras has no Sigmoid layer).",
        layer_example='>>> tf_ops.layers.Sigmoid()(np.array([0.0, 2.0], "float32")).numpy()'
        ".round(4)\narray([0.5   , 0.8808], dtype=float32)",
        tensorflow=TensorFlowEquivalent(
            "built-in",
            lambda x: tf.sigmoid(x),
            # TensorFlow's backward takes the saved outputs: SigmoidGrad(y, dy).
            lambda g, v: tf.raw_ops.SigmoidGrad(y=tf.sigmoid(v), dy=g),
        ),
    ),
    Activation(
        op="Relu6",
        title="ReLU6",
        notes="As `tf.nn.relu6` and ``keras.activations.relu6``, what Keras's "
        "``ReLU(max_value=6)`` runs (MobileNet's activation). Its gradient passes where "
        "0 < x < 6, as TensorFlow's.",
        example=">>> tf_ops.relu6([-1.0, 3.0, 8.0]).numpy()\n"
        "array([0., 3., 6.], dtype=float32)",
        grad_example=">>> tf_ops.relu6_grad([1.0, 1.0, 1.0], [-1.0, 3.0, 8.0]).numpy()\n"
        "array([0., 1., 0.], dtype=float32)",
        forward=_relu6,
        derivative=_relu6_derivative,
        # 0 < f(z) < 6 exactly where 0 < z < 6.
        slope_from_output=lambda: True,
        layer="ReLU6",
        layer_notes="As ``keras.layers.ReLU(max_value=6.0)``.",
        layer_example='>>> tf_ops.layers.ReLU6()(np.array([-1.0, 7.0], "float32")).numpy()'
        "\narray([0., 6.], dtype=float32)",
        tensorflow=TensorFlowEquivalent(
            "built-in",
            lambda x: tf.nn.relu6(x),
            lambda g, v: tf.raw_ops.Relu6Grad(gradients=g, features=v),
        ),
    ),
    Activation(
        op="HardSigmoid",
        title="hard sigmoid",
        notes="As ``keras.activations.hard_sigmoid`` (``relu6(x + 3) / 6``), in one kernel "
        "instead of three; keras-hub's MobileNet runs it in its squeeze-and-excite blocks. "
        "Its gradient is 1/6 where 0 < x + 3 < 6, as TensorFlow's.",
        example=">>> tf_ops.hard_sigmoid([-4.0, 0.0, 1.5, 4.0]).numpy()\n"
        "array([0.  , 0.5 , 0.75, 1.  ], dtype=float32)",
        grad_example=">>> tf_ops.hard_sigmoid_grad([6.0, 6.0, 6.0], [-4.0, 0.0, 4.0]).numpy()\n"
        "array([0., 1., 0.], dtype=float32)",
        forward=_hard_sigmoid,
        derivative=_hard_sigmoid_derivative,
        layer="HardSigmoid",
        layer_notes="As ``keras.layers.Activation(\"hard_sigmoid\")``.",
        layer_example='>>> tf_ops.layers.HardSigmoid()(np.array([-4.0, 1.5], "float32")).numpy()'
        "\narray([0.  , 0.75], dtype=float32)",
        tensorflow=TensorFlowEquivalent(
            "composite (keras.activations.hard_sigmoid)",
            lambda x: tf.nn.relu6(x + 3.0) / 6.0,
            lambda g, v: tf.raw_ops.Relu6Grad(gradients=g / 6.0, features=v + 3.0),
        ),
    ),
    Activation(
        op="Tanh",
        title="Tanh",
        notes="As `tf.tanh` and ``keras.activations.tanh``: the pooler activation of "
        "BERT-style encoders, fused with the Dense bias before it. Its grad op takes the "
        "features (TensorFlow's TanhGrad takes the outputs, whose 1 - y^2 has no digits "
        "left in the tails).",
        example=">>> tf_ops.tanh([-1.0, 0.0, 2.0]).numpy().round(6)\n"
        "array([-0.761594,  0.      ,  0.964028], dtype=float32)",
        grad_example=">>> tf_ops.tanh_grad([1.0, 1.0], [0.0, 1.0]).numpy().round(6)\n"
        "array([1.      , 0.419974], dtype=float32)",
        forward=_tanh,
        derivative=_tanh_derivative,
        layer="Tanh",
        layer_notes="As ``keras.activations.tanh`` (Keras has no Tanh layer).",
        layer_example='>>> tf_ops.layers.Tanh()(np.array([0.0, 1.0], "float32")).numpy()'
        ".round(4)\narray([0.    , 0.7616], dtype=float32)",
        tensorflow=TensorFlowEquivalent(
            "built-in",
            lambda x: tf.tanh(x),
            # TensorFlow's backward takes the saved outputs: TanhGrad(y, dy).
            lambda g, v: tf.raw_ops.TanhGrad(y=tf.tanh(v), dy=g),
        ),
    ),
)

BY_OP: dict[str, Activation] = {a.op: a for a in ACTIVATIONS}
