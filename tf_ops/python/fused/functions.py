"""Bias + activation and gated activations, for every activation in the table.

From each entry of ``tf_ops/python/activation/table.py`` and the ops' C++ registration
(``tf_ops/cc/fused/fused_op_defs.h``) this makes:

- the bias path of ``tf_ops.<act>(x, ..., bias=b, data_format="NHWC")``: the op
  ``TfOps>Bias{Act}``, y = f(x + b), b broadcast along the channel axis (the last, or
  axis 1 for ``"NCHW"``);
- ``tf_ops.bias_<act>_grad(gradients, features, bias, ...)``: its grad op, returning
  ``(backprops, bias_backprops)`` in one pass;
- `add_activation` (``tf_ops.add_activation(x, y, "relu")``): ``TfOps>Add{Act}``,
  y = f(x + a) for a residual sum and the activation after it (its gradient is the
  plain grad op's, at the output where that gives f' exactly, as ReLU's);
- `gated` (``tf_ops.gated(x, activation="swish")``): ``TfOps>Gated{Act}``,
  y = f(a) * b for [a, b] the halves of x's last axis, and its aliases `glu`, `geglu`,
  `swiglu`, `reglu`;
- ``tf_ops.gated_<act>_grad(gradients, features, ...)``: its grad op;
- ``tf_ops.gated(x, activation, bias=b)``: ``TfOps>BiasGated{Act}``, the gate of
  x + b (b along the last axis, before the split), and its grad op
  ``tf_ops.bias_gated_<act>_grad(gradients, features, bias, ...)``, returning
  ``(backprops, bias_backprops)`` in one pass;
- the gradients of all seven ops, of any order, are registered in ``gradients.py``.

As the plain functions do, each builds its op's composite of TensorFlow built-in ops
instead under `tf_ops.portable()` and inside XLA when the library has no lowering for
it, after running the op's own shape checks.
"""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf
from tf_ops.python.activation.table import ACTIVATIONS, Activation
from tf_ops.python.core import op_info
from tf_ops.python.core.composite import kernel_attrs, use_composite, xla_lowered
from tf_ops.python.core.op_support import check, op_fn

TensorLike = tf.types.experimental.TensorLike

DATA_FORMATS = ("NHWC", "NCHW")
# The fused op families of every activation: "TfOps>BiasGelu", "TfOps>BiasGeluGrad", ...
FAMILIES = (("Bias", ""), ("Bias", "Grad"), ("Add", ""), ("Gated", ""), ("Gated", "Grad"),
            ("BiasGated", ""), ("BiasGated", "Grad"))
OP_NAMES: tuple[str, ...] = tuple(
    prefix + a.op + suffix for a in ACTIVATIONS for prefix, suffix in FAMILIES
)
XLA_LOWERED: frozenset[str] = xla_lowered(OP_NAMES)

# `gated`'s activation names: every activation's function name.
GATES: dict[str, Activation] = {a.function: a for a in ACTIVATIONS}


def _use_composite(op: str) -> bool:
    return use_composite(op, XLA_LOWERED)


def _attrs_of(entry: Activation, attrs: dict) -> dict:
    """attrs checked against the activation's (a TypeError names an unknown one), with the
    op's defaults for those not given: the composites then use the kernels' values (a
    float default is the float32 the op stores, not the Python literal)."""
    known = {a.name: a.default for a in op_info.attrs(op_info.NAMESPACE + entry.op)}
    unknown = sorted(set(attrs) - set(known))
    if unknown:
        raise TypeError(
            f"{entry.function}: unexpected attribute(s) {unknown}; it takes {sorted(known)}"
        )
    return {**known, **attrs}


def _check_data_format(data_format: str) -> None:
    if data_format not in DATA_FORMATS:
        raise ValueError(f"data_format must be one of {DATA_FORMATS}, got {data_format!r}")


# --------------------------------------------------------------- composites ---


def _compute_dtype(dtype: tf.DType) -> tf.DType:
    return dtype if dtype in (tf.float32, tf.float64) else tf.float32


def bias_axes(x: tf.Tensor, data_format: str):
    """The channel-broadcast shape of the bias and the axes db sums over."""
    rank = tf.rank(x)
    if data_format == "NHWC":
        return None, tf.range(rank - 1)
    shape = tf.concat([[-1], tf.ones([rank - 2], tf.int32)], 0)
    return shape, tf.concat([[0], tf.range(2, rank)], 0)


def add_bias(x: tf.Tensor, b: tf.Tensor, data_format: str) -> tf.Tensor:
    shape, _ = bias_axes(x, data_format)
    return x + (b if shape is None else tf.reshape(b, shape))


def _bias_grad_composite(entry, g, x, b, data_format, attrs):
    """(g f'(x + b), its sum over all but the channel axis), computed in float32 or
    float64 and rounded once."""
    kattrs = kernel_attrs(attrs)
    compute = _compute_dtype(x.dtype)
    gc, xc, bc = (tf.cast(t, compute) for t in (g, x, b))
    z = add_bias(xc, bc, data_format)
    v = entry.forward(z, **kattrs) if op_info.grad_takes_outputs(entry.op) else z
    dx = gc * entry.derivative(v, **kattrs)
    acc = tf.float64 if compute == tf.float64 or x.dtype == tf.float32 else tf.float32
    db = tf.reduce_sum(tf.cast(dx, acc), axis=bias_axes(x, data_format)[1])
    return tf.cast(dx, x.dtype), tf.cast(db, x.dtype)


def _bias_composite(entry, x, b, data_format, attrs):
    kattrs = kernel_attrs(attrs)

    @tf.custom_gradient
    def bias_activation(x, b):
        compute = _compute_dtype(x.dtype)
        z = add_bias(tf.cast(x, compute), tf.cast(b, compute), data_format)
        y = tf.cast(entry.forward(z, **kattrs), x.dtype)

        def grad(dy):
            return _bias_grad_composite(entry, dy, x, b, data_format, attrs)

        return y, grad

    return bias_activation(x, b)


def output_gives_slope(entry: Activation, attrs: dict) -> bool:
    """Whether the grad op of `entry` gives f'(z) exactly when it takes y = f(z): where it
    takes the outputs anyway (Elu), or where the table says f' is a function of f (ReLU:
    `Activation.slope_from_output`). The add ops' gradient then keeps only y."""
    if op_info.grad_takes_outputs(entry.op):
        return True
    if entry.slope_from_output is None:
        return False
    names = [a.name for a in op_info.attrs(op_info.NAMESPACE + entry.op)]
    return bool(entry.slope_from_output(**{k: attrs[k] for k in names if k in attrs}))


def add_slope_input(entry: Activation, y, features, residual, attrs: dict):
    """What ``{act}_grad`` takes for ``TfOps>Add{Act}``: its output y where that gives
    f' (`output_gives_slope`), else the sum x + a formed again in the compute type (a
    half or bfloat16 sum is not rounded: the grad then runs in float32)."""
    if output_gives_slope(entry, attrs):
        return y
    compute = _compute_dtype(features.dtype)
    return tf.cast(features, compute) + tf.cast(residual, compute)


def _add_composite(entry, x, a, attrs):
    kattrs = kernel_attrs(attrs)

    @tf.custom_gradient
    def add_activation(x, a):
        compute = _compute_dtype(x.dtype)
        z = tf.cast(x, compute) + tf.cast(a, compute)
        f = entry.forward(z, **kattrs)
        y = tf.cast(f, x.dtype)

        def grad(dy):
            v = f if output_gives_slope(entry, attrs) else z
            dz = tf.cast(tf.cast(dy, compute) * entry.derivative(v, **kattrs), x.dtype)
            return dz, dz

        return y, grad

    return add_activation(x, a)


def halves(x: tf.Tensor):
    return tf.split(x, 2, axis=-1)


def _gated_grad_composite(entry, g, x, attrs):
    kattrs = kernel_attrs(attrs)
    compute = _compute_dtype(x.dtype)
    a, b = halves(tf.cast(x, compute))
    g = tf.cast(g, compute)
    f = entry.forward(a, **kattrs)
    v = f if op_info.grad_takes_outputs(entry.op) else a
    d = tf.concat([g * b * entry.derivative(v, **kattrs), g * f], axis=-1)
    return tf.cast(d, x.dtype)


def _gated_composite(entry, x, attrs):
    kattrs = kernel_attrs(attrs)

    @tf.custom_gradient
    def gated_activation(x):
        a, b = halves(tf.cast(x, _compute_dtype(x.dtype)))
        y = tf.cast(entry.forward(a, **kattrs) * b, x.dtype)
        return y, lambda dy: _gated_grad_composite(entry, dy, x, attrs)

    return gated_activation(x)


def _bias_gated_grad_composite(entry, g, x, b, attrs):
    """The gated grad composite at x + b (formed in the compute type), and its sum
    over every axis but the last, accumulated as the bias ops' (`_bias_grad_composite`)."""
    compute = _compute_dtype(x.dtype)
    z = tf.cast(x, compute) + tf.cast(b, compute)
    dz = _gated_grad_composite(entry, g, z, attrs)
    acc = tf.float64 if compute == tf.float64 or x.dtype == tf.float32 else tf.float32
    db = tf.reduce_sum(tf.cast(dz, acc), axis=bias_axes(x, "NHWC")[1])
    return tf.cast(dz, x.dtype), tf.cast(db, x.dtype)


def _bias_gated_composite(entry, x, b, attrs):
    kattrs = kernel_attrs(attrs)

    @tf.custom_gradient
    def bias_gated_activation(x, b):
        compute = _compute_dtype(x.dtype)
        z0, z1 = halves(tf.cast(x, compute) + tf.cast(b, compute))
        y = tf.cast(entry.forward(z0, **kattrs) * z1, x.dtype)
        return y, lambda dy: _bias_gated_grad_composite(entry, dy, x, b, attrs)

    return bias_gated_activation(x, b)


# ----------------------------------------------------------------- the calls ---


def _convert(inputs: tuple) -> list[tf.Tensor]:
    first = tf.convert_to_tensor(inputs[0])
    return [first] + [tf.convert_to_tensor(t, first.dtype) for t in inputs[1:]]


def bias_activation(entry: Activation, features, bias, attrs: dict, data_format: str,
                    name: str | None) -> tf.Tensor:
    """f(features + bias) with ``TfOps>Bias{op}``: what ``tf_ops.<act>(..., bias=)``
    runs."""
    _check_data_format(data_format)
    op = "Bias" + entry.op
    if _use_composite(op):
        with tf.name_scope(name or op):
            x, b = _convert((features, bias))
            check(op, (x, b), {**attrs, "data_format": data_format})
            return _bias_composite(entry, x, b, data_format, attrs)
    # Converted first: the op's wrapper would make NumPy inputs float32 otherwise.
    return op_fn(op)(*_convert((features, bias)), data_format=data_format, name=name, **attrs)


def _make_bias_grad(entry: Activation) -> Callable[..., Any]:
    op = f"Bias{entry.op}Grad"
    op_type = op_info.NAMESPACE + op
    fn_name = op_info.snake_case(op)

    def bias_grad(gradients, features, bias, data_format="NHWC", name=None, **attrs):
        _check_data_format(data_format)
        attrs = _attrs_of(entry, attrs)
        if _use_composite(op):
            with tf.name_scope(name or op):
                g, x, b = _convert((gradients, features, bias))
                check(op, (g, x, b), {**attrs, "data_format": data_format})
                return _bias_grad_composite(entry, g, x, b, data_format, attrs)
        return tuple(op_fn(op)(*_convert((gradients, features, bias)), data_format=data_format,
                                name=name, **attrs))

    bias_grad.__name__ = bias_grad.__qualname__ = fn_name
    bias_grad.__module__ = "tf_ops"
    bias_grad.__doc__ = (
        f"Gradient of ``tf_ops.{entry.function}(features, bias=bias)`` (the op "
        f"``{op_type}``), in one pass: {op_info.summary(op_type)}\n\n"
        f"Takes the activation's attributes as keywords "
        f"({', '.join(a.name for a in op_info.attrs(op_info.NAMESPACE + entry.op)) or 'none'}).\n\n"
        f"Returns:\n  ``(backprops, bias_backprops)``.\n\n"
        "Example:\n"
        f"  >>> dx, db = tf_ops.{fn_name}(tf.ones([2, 3]), tf.zeros([2, 3]), tf.zeros([3]))\n"
        "  >>> dx.shape, db.shape\n"
        "  (TensorShape([2, 3]), TensorShape([3]))\n"
    )
    return bias_grad


def add_activation_op(entry: Activation, features, residual, attrs: dict,
                      name: str | None) -> tf.Tensor:
    """f(features + residual) with ``TfOps>Add{op}``: what `add_activation` runs."""
    op = "Add" + entry.op
    if _use_composite(op):
        with tf.name_scope(name or op):
            x, a = _convert((features, residual))
            check(op, (x, a), attrs)
            return _add_composite(entry, x, a, attrs)
    return op_fn(op)(*_convert((features, residual)), name=name, **attrs)


def add_activation(features: TensorLike, residual: TensorLike, activation: Any = "relu",
                   name: str | None = None, **attrs) -> tf.Tensor:
    """An activation of a sum, ``f(features + residual)``, in one pass
    (``TfOps>Add{Act}``): a residual block's add and the ReLU after it (ResNet), without
    the sum in memory.

    Its gradient is the plain grad op's: at the output where that gives f' exactly
    (ReLU, leaky ReLU with alpha >= 0, ReLU6, ELU), so that, as TensorFlow's ``Relu``
    after an ``Add``, it keeps only the output for the backward pass; else at the sum,
    formed again from both addends.

    Args:
      features, residual: tensors of one shape (no broadcasting) and dtype: half,
        bfloat16, float32 or float64.
      activation: a tf_ops activation by name (``"relu"``, ``"swish"``, ...), its
        function, or a Keras activation that is one (what ``BatchNormalization``'s
        ``activation`` takes).
      name: op name.
      **attrs: the activation's attributes (``alpha=0.1`` for leaky_relu, ...).

    Returns:
      A tensor of the features' shape and dtype.

    Example:
      >>> tf_ops.add_activation([[-1.0, 2.0, 5.0]], [[0.5, 0.5, 3.0]], "relu6").numpy()
      array([[0. , 2.5, 6. ]], dtype=float32)
    """
    from tf_ops.python.activation.resolver import resolve  # it imports the functions

    spec = resolve(activation, **attrs)
    if spec.entry is None:
        raise ValueError(f"add_activation needs an activation, got {activation!r}")
    return add_activation_op(spec.entry, features, residual, dict(spec.attrs), name)


def gated_activation(entry: Activation, features, bias, attrs: dict,
                     name: str | None) -> tf.Tensor:
    """f(a) * b for [a, b] the halves of the last axis of the features (plus the bias,
    when not None), with ``TfOps>Gated{op}`` (``TfOps>BiasGated{op}``)."""
    op = ("Gated" if bias is None else "BiasGated") + entry.op
    inputs = (features,) if bias is None else (features, bias)
    if _use_composite(op):
        with tf.name_scope(name or op):
            tensors = _convert(inputs)
            check(op, tuple(tensors), attrs)
            if bias is None:
                return _gated_composite(entry, tensors[0], attrs)
            return _bias_gated_composite(entry, *tensors, attrs)
    return op_fn(op)(*_convert(inputs), name=name, **attrs)


def _make_gated_grad(entry: Activation) -> Callable[..., Any]:
    op = f"Gated{entry.op}Grad"
    op_type = op_info.NAMESPACE + op
    fn_name = op_info.snake_case(op)

    def gated_grad(gradients, features, name=None, **attrs):
        attrs = _attrs_of(entry, attrs)
        if _use_composite(op):
            with tf.name_scope(name or op):
                g, x = _convert((gradients, features))
                check(op, (g, x), attrs)
                return _gated_grad_composite(entry, g, x, attrs)
        return op_fn(op)(*_convert((gradients, features)), name=name, **attrs)

    gated_grad.__name__ = gated_grad.__qualname__ = fn_name
    gated_grad.__module__ = "tf_ops"
    gated_grad.__doc__ = (
        f"Gradient of ``tf_ops.gated(features, {entry.function!r})`` (the op "
        f"``{op_type}``), for both halves in one pass: {op_info.summary(op_type)}\n\n"
        "Example:\n"
        f"  >>> tf_ops.{fn_name}(tf.ones([2, 3]), tf.zeros([2, 6])).shape\n"
        "  TensorShape([2, 6])\n"
    )
    return gated_grad


def _make_bias_gated_grad(entry: Activation) -> Callable[..., Any]:
    op = f"BiasGated{entry.op}Grad"
    op_type = op_info.NAMESPACE + op
    fn_name = op_info.snake_case(op)

    def bias_gated_grad(gradients, features, bias, name=None, **attrs):
        attrs = _attrs_of(entry, attrs)
        if _use_composite(op):
            with tf.name_scope(name or op):
                g, x, b = _convert((gradients, features, bias))
                check(op, (g, x, b), attrs)
                return _bias_gated_grad_composite(entry, g, x, b, attrs)
        return tuple(op_fn(op)(*_convert((gradients, features, bias)), name=name, **attrs))

    bias_gated_grad.__name__ = bias_gated_grad.__qualname__ = fn_name
    bias_gated_grad.__module__ = "tf_ops"
    bias_gated_grad.__doc__ = (
        f"Gradient of ``tf_ops.gated(features, {entry.function!r}, bias=bias)`` (the op "
        f"``{op_type}``), in one pass: {op_info.summary(op_type)}\n\n"
        "Returns:\n  ``(backprops, bias_backprops)``.\n\n"
        "Example:\n"
        f"  >>> dx, db = tf_ops.{fn_name}(tf.ones([2, 3]), tf.zeros([2, 6]), tf.zeros([6]))\n"
        "  >>> dx.shape, db.shape\n"
        "  (TensorShape([2, 6]), TensorShape([6]))\n"
    )
    return bias_gated_grad


def gated(features: TensorLike, activation: str = "swish", bias: TensorLike | None = None,
          name: str | None = None, **attrs) -> tf.Tensor:
    """Gated activation (the GLU family): ``f(a) * b`` with ``[a, b] = split(features
    + bias, 2, axis=-1)``, in one fused pass forward and one backward, the bias and its
    gradient included (``TfOps>Gated{Act}``, or ``TfOps>BiasGated{Act}`` with a bias).

    Args:
      features: a half, bfloat16, float32 or float64 tensor whose last axis is even.
      activation: the name of any tf_ops activation (``"swish"``, ``"gelu"``,
        ``"sigmoid"``, ...).
      bias: optional 1-D bias added to the features' last axis before the split.
      name: op name.
      **attrs: the activation's attributes (``approximate=True`` for gelu, ...).

    Returns:
      A tensor of the features' shape with the last axis halved.

    Example:
      >>> tf_ops.gated([[1.0, 2.0]], "gelu").numpy().round(4)
      array([[1.6827]], dtype=float32)
    """
    if activation not in GATES:
        raise ValueError(f"activation must be one of {sorted(GATES)}, got {activation!r}")
    entry = GATES[activation]
    attrs = _attrs_of(entry, attrs)
    return gated_activation(entry, features, bias, attrs, name)


def _alias(fn_name: str, activation: str, defaults: dict, what: str) -> Callable[..., tf.Tensor]:
    def alias(features: TensorLike, bias: TensorLike | None = None, name: str | None = None,
              **attrs) -> tf.Tensor:
        return gated(features, activation, bias=bias, name=name, **{**defaults, **attrs})

    alias.__name__ = alias.__qualname__ = fn_name
    alias.__module__ = "tf_ops"
    alias.__doc__ = (
        f"{what}: ``{activation}(a) * b`` for ``[a, b]`` the halves of the last axis; "
        f"``tf_ops.gated(features, {activation!r}{''.join(f', {k}={v!r}' for k, v in defaults.items())})``.\n\n"
        "Example:\n"
        f"  >>> tf_ops.{fn_name}(tf.zeros([2, 8])).shape\n"
        "  TensorShape([2, 4])\n"
    )
    return alias


# Public functions: the grad ops' and the gated family's.
FUNCTIONS: dict[str, Callable[..., Any]] = {}
for _entry in ACTIVATIONS:
    FUNCTIONS[f"bias_{_entry.function}_grad"] = _make_bias_grad(_entry)
    FUNCTIONS[f"gated_{_entry.function}_grad"] = _make_gated_grad(_entry)
    FUNCTIONS[f"bias_gated_{_entry.function}_grad"] = _make_bias_gated_grad(_entry)
FUNCTIONS["gated"] = gated
FUNCTIONS["add_activation"] = add_activation
for _name, _act, _defaults, _what in (
    ("glu", "sigmoid", {}, "GLU (Dauphin et al. 2017)"),
    ("geglu", "gelu", {}, "GeGLU (Shazeer 2020; T5)"),
    ("swiglu", "swish", {}, "SwiGLU (Shazeer 2020; PaLM, LLaMA)"),
    ("reglu", "leaky_relu", {"alpha": 0.0}, "ReGLU (Shazeer 2020)"),
):
    if _act in GATES:
        FUNCTIONS[_name] = _alias(_name, _act, _defaults, _what)

__all__ = sorted(FUNCTIONS)
