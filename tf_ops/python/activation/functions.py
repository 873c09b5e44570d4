"""The public functions of every activation, made from its table entry
(``table.py``) and its registered ops.

For an activation ``Gelu`` (ops ``TfOps>Gelu``, ``TfOps>GeluGrad``,
``TfOps>GeluGradGrad``) this makes ``gelu(features, approximate=False, name=None)``,
``gelu_grad(gradients, features, ...)`` and ``gelu_grad_grad(upstream, gradients,
features, ...)``: argument names, attributes and defaults come from the ops' C++
registration, the docs from the op and the entry. They take half, bfloat16, float32
and float64 tensors of any shape and run on CPU and, when built with CUDA, GPU.
Gradients of every order are registered in ``tf_ops/python/activation/gradients.py``; with
``bias=b`` the forward function runs the fused op ``TfOps>Bias{Act}``
(``tf_ops/python/fused/functions.py``).

Each function builds its ``TfOps>`` op, except in two cases where it builds the op's
composite of TensorFlow built-in ops (``composites.py``; when and the checks:
``tf_ops/python/core/composite.py``):
- under `tf_ops.portable()`, so that an exported model runs without the library;
- while XLA traces it and the library has no XLA lowering for the op (a library built
  with ``-DTF_OPS_XLA=OFF``, or by Bazel).
Before building a composite, the op's own C++ checks run on it (`check`): the same
errors for bad attributes and mismatched shapes either way.
"""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

from tf_ops.python.activation import composites
from tf_ops.python.activation.table import ACTIVATIONS, Activation
from tf_ops.python.core import op_info
from tf_ops.python.core.composite import use_composite, xla_lowered
from tf_ops.python.core.op_support import check, op_fn
from tf_ops.python.fused.functions import bias_activation

TensorLike = tf.types.experimental.TensorLike

# Op names without the namespace, for every op of every activation.
OP_NAMES: tuple[str, ...] = tuple(a.op + family for a in ACTIVATIONS for family in op_info.FAMILIES)

# Op names ("Gelu", "GeluGrad", ...) that XLA can compile.
XLA_LOWERED: frozenset[str] = xla_lowered(OP_NAMES)


# The composite of each op family.
_COMPOSITES = {"": composites.forward, "Grad": composites.grad_op, "GradGrad": composites.grad_grad}


def _make(entry: Activation, family: str) -> Callable[..., Any]:
    """The public function of ``TfOps>{entry.op}{family}``, with the op's input and
    attribute names and defaults as its signature."""
    op = entry.op + family
    op_type = op_info.NAMESPACE + op
    name = op_info.snake_case(op)
    run_op = op_fn(op)
    composite = _COMPOSITES[family]

    def call(inputs: tuple, attrs: dict, name: str | None, bias=None, data_format="NHWC"):
        if bias is not None:  # the fused TfOps>Bias{op} (fused/functions.py)
            return bias_activation(entry, inputs[0], bias, attrs, data_format, name)
        if data_format not in ("NHWC", "NCHW"):
            raise ValueError(f"data_format must be 'NHWC' or 'NCHW', got {data_format!r}")
        if use_composite(op, XLA_LOWERED):
            with tf.name_scope(name or op):
                tensors = [tf.convert_to_tensor(inputs[0])]
                tensors += [tf.convert_to_tensor(t, tensors[0].dtype) for t in inputs[1:]]
                check(op, tuple(tensors), attrs)
                return composite(entry, *tensors, **attrs)
        return run_op(*inputs, name=name, **attrs)

    # A real signature (for help(), IDEs, positional attributes), as dataclasses makes
    # its __init__: generated source calling `call`.
    args = op_info.inputs(op_type)
    attrs = op_info.attrs(op_type)
    params = [*args, *(f"{a.name}={a.default!r}" for a in attrs), "name=None"]
    extra = ""
    if family == "":  # the bias + activation form: keyword-only
        params += ["*", "bias=None", "data_format='NHWC'"]
        extra = ", bias, data_format"
    source = (
        f"def {name}({', '.join(params)}):\n"
        f"    return _call(({', '.join(args)},), {{{', '.join(f'{a.name!r}: {a.name}' for a in attrs)}}}, name{extra})\n"
    )
    namespace = {"_call": call}
    exec(source, namespace)  # noqa: S102  (source built above from the op's registration)
    fn = namespace[name]
    fn.__module__ = "tf_ops"
    fn.__qualname__ = name
    fn.__annotations__ = {
        **{a: "TensorLike" for a in args},
        **{a.name: a.type for a in attrs},
        "name": "str | None",
        **({"bias": "TensorLike | None", "data_format": "str"} if family == "" else {}),
        "return": "tuple[tf.Tensor, tf.Tensor]" if family == "GradGrad" else "tf.Tensor",
    }
    fn.__doc__ = _docstring(entry, family)
    return fn


def _docstring(entry: Activation, family: str) -> str:
    fn = entry.function
    op_type = op_info.NAMESPACE + entry.op + family
    inputs = op_info.inputs(op_type)
    formula = op_info.summary(op_type)
    if family == "":
        head, body, example = f"{entry.title}: ``{formula}``", entry.notes, entry.example
        body += (
            f"\n\nWith ``bias=b`` (keyword only) it computes ``{fn}(features + b)`` in "
            f"one fused op (``TfOps>Bias{entry.op}``, whose gradient gives the bias "
            "gradient in the same pass): `b` is 1-D, one element per channel, the last "
            "axis, or axis 1 with ``data_format=\"NCHW\"``."
        )
    elif family == "Grad":
        head = f"Gradient of `{fn}` (the op ``{op_type}``): ``{formula}``"
        body = f"`{inputs[0]}` and `{inputs[1]}` must have the same shape and dtype."
        example = entry.grad_example
    else:
        v = inputs[2]
        head = f"Gradient of `{fn}_grad` (the op ``{op_type}``), in one pass."
        body = (
            f"For ``{fn}_grad(gradients, {v}) = gradients * f'({v})`` and the incoming "
            f"gradient `upstream`, returns ``(upstream * f'({v}), upstream * gradients * "
            f"f''({v}))``: the gradients with respect to `gradients` and `{v}`. This is "
            "what nested tapes, `tf.hessians` and gradient penalties run."
        )
        example = (
            f">>> d_gradients, d_{v} = tf_ops.{fn}_grad_grad([1.0], [1.0], [0.5])\n"
            f">>> d_gradients.shape, d_{v}.dtype\n"
            "(TensorShape([1]), tf.float32)"
        )
    indented = "\n".join("  " + line for line in example.splitlines())
    return f"{head}\n\n{body}\n\n{op_info.args_doc(op_type)}\n\nExample:\n{indented}\n"


# name -> function, for every op of every activation: "gelu", "gelu_grad", ...
FUNCTIONS: dict[str, Callable[..., Any]] = {
    op_info.snake_case(entry.op + family): _make(entry, family)
    for entry in ACTIVATIONS
    for family in op_info.FAMILIES
}
globals().update(FUNCTIONS)
__all__ = sorted(FUNCTIONS)
