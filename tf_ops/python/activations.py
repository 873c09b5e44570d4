"""Python wrappers of the fused activation ops, their grad ops and the grad ops'
gradients (grad-grad ops).

Each wrapper calls the op of the same name in the compiled library
(``TfOps>LeakyRelu`` ...). The ops accept half, bfloat16, float32 and float64
tensors of any shape and run on CPU and, when built with CUDA, GPU. Gradients
of every order are registered in ``gradients.py``.

Inside XLA (``jit_compile=True``) the ops compile through the library's XLA
lowerings. A library built without them (``-DTF_OPS_XLA=OFF``) cannot be compiled
by XLA, so there, and only while traced in an XLA context, the wrappers build the
equivalent TensorFlow composites of ``composites.py`` instead.
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf
from tensorflow.python.framework import kernels

from tf_ops.python import composites
from tf_ops.python.library import load_library

TensorLike = tf.types.experimental.TensorLike

_ops = load_library()


def _xla_lowered_op_types() -> frozenset[str]:
    """The ops that have an XLA kernel, asked of TF's kernel registry: the truth
    whatever built the library (CMake with or without XLA, Bazel)."""
    ops = [name + suffix for name in composites.ACTIVATION_NAMES for suffix in ("", "Grad", "GradGrad")]
    return frozenset(
        op
        for op in ops
        if any(k.device_type == "XLA_CPU_JIT" for k in kernels.get_registered_kernels_for_op(f"TfOps>{op}").kernel)
    )


# Op names without the namespace ("Gelu", "GeluGrad", "GeluGradGrad") that XLA can compile.
XLA_LOWERED: frozenset[str] = _xla_lowered_op_types()


def _run(op: str, op_fn: Callable[..., tf.Tensor], *inputs, name: str | None, **attrs) -> tf.Tensor:
    """Calls the generated op function, or the composite when XLA is tracing and
    the op has no lowering."""
    if op not in XLA_LOWERED and tf.__internal__.get_enclosing_xla_context() is not None:
        with tf.name_scope(name or op):
            if op.endswith("GradGrad"):
                return composites.grad_grad_op(op[: -len("GradGrad")], *inputs, **attrs)
            if op.endswith("Grad"):
                return composites.grad_op(op[: -len("Grad")], *inputs, **attrs)
            return composites.forward(op, *inputs, **attrs)
    return op_fn(*inputs, name=name, **attrs)


def leaky_relu(features: TensorLike, alpha: float = 0.2, name: str | None = None) -> tf.Tensor:
    """Leaky ReLU: ``features if features > 0 else alpha * features``.

    Matches `tf.nn.leaky_relu` (a select, so alpha > 1 and alpha < 0 behave as
    the formula says). `alpha` must be finite.

    Example:
      >>> tf_ops.leaky_relu([-2.0, 0.0, 3.0], alpha=0.1).numpy()
      array([-0.2,  0. ,  3. ], dtype=float32)
    """
    return _run("LeakyRelu", _ops.tf_ops_leaky_relu, features, alpha=alpha, name=name)


def leaky_relu_grad(
    gradients: TensorLike, features: TensorLike, alpha: float = 0.2, name: str | None = None
) -> tf.Tensor:
    """Gradient of `leaky_relu`: ``gradients if features > 0 else alpha * gradients``.

    `gradients` and `features` must have the same shape and dtype.

    Example:
      >>> tf_ops.leaky_relu_grad([1.0, 1.0], [-2.0, 3.0], alpha=0.1).numpy()
      array([0.1, 1. ], dtype=float32)
    """
    return _run("LeakyReluGrad", _ops.tf_ops_leaky_relu_grad, gradients, features, alpha=alpha, name=name)


def leaky_relu_grad_grad(
    upstream: TensorLike, gradients: TensorLike, features: TensorLike, alpha: float = 0.2, name: str | None = None
) -> tuple[tf.Tensor, tf.Tensor]:
    """Gradient of `leaky_relu_grad` with respect to its inputs, for the upstream
    gradient `upstream`: ``d_gradients = upstream * (1 if features > 0 else alpha)`` and
    ``d_features = upstream * gradients * 0`` (f' is piecewise constant: zero, or NaN where
    an input is infinite or NaN). All three inputs must have one shape and dtype.

    Example:
      >>> d_g, d_x = tf_ops.leaky_relu_grad_grad([2.0, 2.0], [1.0, 1.0], [-1.0, 3.0], alpha=0.1)
      >>> d_g.numpy(), d_x.numpy()
      (array([0.2, 2. ], dtype=float32), array([0., 0.], dtype=float32))
    """
    return tuple(
        _run("LeakyReluGradGrad", _ops.tf_ops_leaky_relu_grad_grad, upstream, gradients, features, alpha=alpha,
             name=name)
    )


def elu(features: TensorLike, alpha: float = 1.0, name: str | None = None) -> tf.Tensor:
    """ELU: ``features if features > 0 else alpha * (exp(features) - 1)``.

    With alpha = 1 it matches `tf.nn.elu`. `alpha` must be finite and >= 0 (the
    gradient is computed from the outputs, which a negative alpha makes ambiguous).

    Example:
      >>> tf_ops.elu([-1.0, 2.0]).numpy()
      array([-0.63212055,  2.        ], dtype=float32)
    """
    return _run("Elu", _ops.tf_ops_elu, features, alpha=alpha, name=name)


def elu_grad(
    gradients: TensorLike, outputs: TensorLike, alpha: float = 1.0, name: str | None = None
) -> tf.Tensor:
    """Gradient of `elu` from its *outputs*: ``gradients if outputs > 0 else
    gradients * (outputs + alpha)``.

    With alpha = 1 this is `tf.raw_ops.EluGrad` (and CANN's EluGrad).

    Example:
      >>> y = tf_ops.elu([-1.0, 2.0])
      >>> tf_ops.elu_grad([1.0, 1.0], y).numpy()
      array([0.36787945, 1.        ], dtype=float32)
    """
    return _run("EluGrad", _ops.tf_ops_elu_grad, gradients, outputs, alpha=alpha, name=name)


def elu_grad_grad(
    upstream: TensorLike, gradients: TensorLike, outputs: TensorLike, alpha: float = 1.0, name: str | None = None
) -> tuple[tf.Tensor, tf.Tensor]:
    """Gradient of `elu_grad` with respect to its inputs, for the upstream gradient
    `upstream`, from the *outputs* y: ``d_gradients = upstream * (1 if y > 0 else y + alpha)``
    and ``d_outputs = upstream * gradients * (0 if y > 0 else 1)``, in one pass.

    Example:
      >>> y = tf_ops.elu([-1.0, 2.0])
      >>> d_g, d_y = tf_ops.elu_grad_grad([1.0, 1.0], [3.0, 3.0], y)
      >>> d_g.numpy(), d_y.numpy()
      (array([0.36787945, 1.        ], dtype=float32), array([3., 0.], dtype=float32))
    """
    return tuple(
        _run("EluGradGrad", _ops.tf_ops_elu_grad_grad, upstream, gradients, outputs, alpha=alpha, name=name)
    )


def gelu(features: TensorLike, approximate: bool = False, name: str | None = None) -> tf.Tensor:
    """GELU: ``features * Phi(features)``, or its tanh approximation.

    Matches `tf.nn.gelu(features, approximate)` in one fused kernel (TF runs 5
    kernels, 8 for the tanh form). ``gelu(-inf) = 0``.

    Example:
      >>> tf_ops.gelu([-1.0, 0.0, 1.0]).numpy()
      array([-0.15865526,  0.        ,  0.8413447 ], dtype=float32)
    """
    return _run("Gelu", _ops.tf_ops_gelu, features, approximate=approximate, name=name)


def gelu_grad(
    gradients: TensorLike,
    features: TensorLike,
    approximate: bool = False,
    name: str | None = None,
) -> tf.Tensor:
    """Gradient of `gelu`: ``gradients * gelu'(features)``.

    Example:
      >>> tf_ops.gelu_grad([1.0], [0.0]).numpy()
      array([0.5], dtype=float32)
    """
    return _run("GeluGrad", _ops.tf_ops_gelu_grad, gradients, features, approximate=approximate, name=name)


def gelu_grad_grad(
    upstream: TensorLike,
    gradients: TensorLike,
    features: TensorLike,
    approximate: bool = False,
    name: str | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Gradient of `gelu_grad` with respect to its inputs, for the upstream gradient
    `upstream`: ``(upstream * gelu'(features), upstream * gradients * gelu''(features))``
    in one pass (``gelu''(x) = phi(x) (2 - x**2)`` for the exact form).

    Example:
      >>> d_g, d_x = tf_ops.gelu_grad_grad([1.0], [1.0], [0.0])
      >>> d_g.numpy(), d_x.numpy()
      (array([0.5], dtype=float32), array([0.7978846], dtype=float32))
    """
    return tuple(
        _run("GeluGradGrad", _ops.tf_ops_gelu_grad_grad, upstream, gradients, features, approximate=approximate,
             name=name)
    )


def swish(features: TensorLike, beta: float = 1.0, name: str | None = None) -> tf.Tensor:
    """Swish: ``features * sigmoid(beta * features)``; beta = 1 is SiLU (`tf.nn.silu`).

    `beta` may be any finite value (0 gives ``features / 2``).

    Example:
      >>> tf_ops.swish([-1.0, 0.0, 2.0]).numpy()
      array([-0.26894143,  0.        ,  1.7615942 ], dtype=float32)
    """
    return _run("Swish", _ops.tf_ops_swish, features, beta=beta, name=name)


def swish_grad(
    gradients: TensorLike, features: TensorLike, beta: float = 1.0, name: str | None = None
) -> tf.Tensor:
    """Gradient of `swish`: ``gradients * s * (1 + beta * features * (1 - s))``,
    ``s = sigmoid(beta * features)``.

    Example:
      >>> tf_ops.swish_grad([1.0], [0.0]).numpy()
      array([0.5], dtype=float32)
    """
    return _run("SwishGrad", _ops.tf_ops_swish_grad, gradients, features, beta=beta, name=name)


def swish_grad_grad(
    upstream: TensorLike, gradients: TensorLike, features: TensorLike, beta: float = 1.0, name: str | None = None
) -> tuple[tf.Tensor, tf.Tensor]:
    """Gradient of `swish_grad` with respect to its inputs, for the upstream gradient
    `upstream`: ``(upstream * swish'(features), upstream * gradients * swish''(features))``
    in one pass, ``swish'' = beta * s * (1 - s) * (2 + z * (1 - 2 * s))``, ``z = beta * features``,
    ``s = sigmoid(z)``.

    Example:
      >>> d_g, d_x = tf_ops.swish_grad_grad([1.0], [1.0], [0.0])
      >>> d_g.numpy(), d_x.numpy()
      (array([0.5], dtype=float32), array([0.5], dtype=float32))
    """
    return tuple(
        _run("SwishGradGrad", _ops.tf_ops_swish_grad_grad, upstream, gradients, features, beta=beta, name=name)
    )


def mish(features: TensorLike, name: str | None = None) -> tf.Tensor:
    """Mish: ``features * tanh(softplus(features))``, fused (no overflow for large inputs).

    Example:
      >>> tf_ops.mish([-1.0, 0.0, 1.0]).numpy()
      array([-0.30340144,  0.        ,  0.86509836], dtype=float32)
    """
    return _run("Mish", _ops.tf_ops_mish, features, name=name)


def mish_grad(gradients: TensorLike, features: TensorLike, name: str | None = None) -> tf.Tensor:
    """Gradient of `mish`: ``gradients * (t + features * (1 - t**2) * sigmoid(features))``,
    ``t = tanh(softplus(features))``.

    Example:
      >>> tf_ops.mish_grad([1.0], [0.0]).numpy()
      array([0.6], dtype=float32)
    """
    return _run("MishGrad", _ops.tf_ops_mish_grad, gradients, features, name=name)


def mish_grad_grad(
    upstream: TensorLike, gradients: TensorLike, features: TensorLike, name: str | None = None
) -> tuple[tf.Tensor, tf.Tensor]:
    """Gradient of `mish_grad` with respect to its inputs, for the upstream gradient
    `upstream`: ``(upstream * mish'(features), upstream * gradients * mish''(features))``
    in one pass, accurate in both tails (``mish''(8) = -6.3e-6``).

    Example:
      >>> d_g, d_x = tf_ops.mish_grad_grad([1.0], [1.0], [0.0])
      >>> d_g.numpy(), d_x.numpy()
      (array([0.6], dtype=float32), array([0.64], dtype=float32))
    """
    return tuple(_run("MishGradGrad", _ops.tf_ops_mish_grad_grad, upstream, gradients, features, name=name))


def hard_swish(features: TensorLike, name: str | None = None) -> tf.Tensor:
    """HardSwish (MobileNetV3): ``features * relu6(features + 3) / 6``.

    As ``keras.activations.hard_swish``, in one kernel instead of four.

    Example:
      >>> tf_ops.hard_swish([-4.0, -1.0, 0.0, 1.0, 4.0]).numpy()
      array([-0.        , -0.33333334,  0.        ,  0.6666667 ,  4.        ],
            dtype=float32)
    """
    return _run("HardSwish", _ops.tf_ops_hard_swish, features, name=name)


def hard_swish_grad(
    gradients: TensorLike, features: TensorLike, name: str | None = None
) -> tf.Tensor:
    """Gradient of `hard_swish`: ``gradients`` times 0 for features <= -3,
    ``(2 * features + 3) / 6`` inside, 1 for features >= 3.

    Example:
      >>> tf_ops.hard_swish_grad([1.0, 1.0, 1.0], [-4.0, 0.0, 4.0]).numpy()
      array([0. , 0.5, 1. ], dtype=float32)
    """
    return _run("HardSwishGrad", _ops.tf_ops_hard_swish_grad, gradients, features, name=name)


def hard_swish_grad_grad(
    upstream: TensorLike, gradients: TensorLike, features: TensorLike, name: str | None = None
) -> tuple[tf.Tensor, tf.Tensor]:
    """Gradient of `hard_swish_grad` with respect to its inputs, for the upstream
    gradient `upstream`: ``(upstream * hard_swish'(features), upstream * gradients / 3)``
    strictly inside (-3, 3), where ``hard_swish''`` is 1/3; outside it is 0.

    Example:
      >>> d_g, d_x = tf_ops.hard_swish_grad_grad([1.0, 1.0], [3.0, 3.0], [0.0, 4.0])
      >>> d_g.numpy(), d_x.numpy()
      (array([0.5, 1. ], dtype=float32), array([1., 0.], dtype=float32))
    """
    return tuple(
        _run("HardSwishGradGrad", _ops.tf_ops_hard_swish_grad_grad, upstream, gradients, features, name=name)
    )
