"""The public functions of every activation, made from its table entry
(``activation_table.py``) and its registered ops.

For an activation ``Gelu`` (ops ``TfOps>Gelu``, ``TfOps>GeluGrad``,
``TfOps>GeluGradGrad``) this makes ``gelu(features, approximate=False, name=None)``,
``gelu_grad(gradients, features, ...)`` and ``gelu_grad_grad(upstream, gradients,
features, ...)``: argument names, attributes and defaults come from the ops' C++
registration, the docs from the op and the entry. They take half, bfloat16, float32
and float64 tensors of any shape and run on CPU and, when built with CUDA, GPU.
Gradients of every order are registered in ``gradients.py``.

Each function builds its ``TfOps>`` op, except in two cases where it builds the op's
composite of TensorFlow built-in ops (``composites.py``):
- under `tf_ops.portable()`, so that an exported model runs without the library;
- while XLA traces it and the library has no XLA lowering for the op (a library built
  with ``-DTF_OPS_XLA=OFF``, or by Bazel).
Before building a composite, the op's own C++ checks run on it (`check`): the same
errors for bad attributes and mismatched shapes either way.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import tensorflow as tf
from tensorflow.python.framework import kernels

from tf_ops.python import composites, op_info
from tf_ops.python.activation_table import ACTIVATIONS, Activation
from tf_ops.python.library import load_library
from tf_ops.python.portable import is_portable

TensorLike = tf.types.experimental.TensorLike

_ops = load_library()

# Op names without the namespace, for every op of every activation.
OP_NAMES: tuple[str, ...] = tuple(a.op + family for a in ACTIVATIONS for family in op_info.FAMILIES)


def _has_xla_kernel(op: str) -> bool:
    """Asked of TF's kernel registry: the truth whatever built the library."""
    registered = kernels.get_registered_kernels_for_op(op_info.NAMESPACE + op).kernel
    return any(k.device_type == "XLA_CPU_JIT" for k in registered)


# Op names ("Gelu", "GeluGrad", ...) that XLA can compile.
XLA_LOWERED: frozenset[str] = frozenset(op for op in OP_NAMES if _has_xla_kernel(op))


@functools.lru_cache(maxsize=None)
def _check_static(op: str, attrs: tuple, shapes: tuple, dtype: tf.DType) -> None:
    with tf.Graph().as_default():
        placeholders = [tf.compat.v1.placeholder(dtype, shape) for shape in shapes]
        getattr(_ops, "tf_ops_" + op_info.snake_case(op))(*placeholders, **dict(attrs))


def check(op: str, inputs: tuple, attrs: dict) -> None:
    """Runs ``TfOps>{op}``'s C++ checks (its shape function: attribute values, input
    shapes that must agree) on inputs of these static shapes and these attributes,
    without running anything: raises ValueError (TypeError for a wrong attribute type)
    with the op's own message.

    Example:
      >>> check("Elu", (tf.zeros([2]),), {"alpha": -1.0})  # doctest: +SKIP
      ValueError: ... TfOps>Elu: attribute 'alpha' must be >= 0, got -1 ...
    """
    shapes = tuple(tuple(tf.TensorShape(t.shape).as_list()) if t.shape.rank is not None else None
                   for t in inputs)
    _check_static(op, tuple(sorted(attrs.items())), shapes, inputs[0].dtype)


def _xla_without_lowering(op: str) -> bool:
    """Whether XLA is tracing this call and cannot compile ``TfOps>{op}``."""
    return op not in XLA_LOWERED and tf.__internal__.get_enclosing_xla_context() is not None


# The composite of each op family.
_COMPOSITES = {"": composites.forward, "Grad": composites.grad_op, "GradGrad": composites.grad_grad}


def _make(entry: Activation, family: str) -> Callable[..., Any]:
    """The public function of ``TfOps>{entry.op}{family}``, with the op's input and
    attribute names and defaults as its signature."""
    op = entry.op + family
    op_type = op_info.NAMESPACE + op
    name = op_info.snake_case(op)
    op_fn = getattr(_ops, "tf_ops_" + name)
    composite = _COMPOSITES[family]

    def call(inputs: tuple, attrs: dict, name: str | None):
        if is_portable() or _xla_without_lowering(op):
            with tf.name_scope(name or op):
                tensors = [tf.convert_to_tensor(inputs[0])]
                tensors += [tf.convert_to_tensor(t, tensors[0].dtype) for t in inputs[1:]]
                check(op, tuple(tensors), attrs)
                return composite(entry, *tensors, **attrs)
        return op_fn(*inputs, name=name, **attrs)

    # A real signature (for help(), IDEs, positional attributes), as dataclasses makes
    # its __init__: generated source calling `call`.
    args = op_info.inputs(op_type)
    attrs = op_info.attrs(op_type)
    params = [*args, *(f"{a.name}={a.default!r}" for a in attrs), "name=None"]
    source = (
        f"def {name}({', '.join(params)}):\n"
        f"    return _call(({', '.join(args)},), {{{', '.join(f'{a.name!r}: {a.name}' for a in attrs)}}}, name)\n"
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
