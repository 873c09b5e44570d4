"""What every op family's Python repeats, written once: the generated function of an op
(`op_fn`), registering a gradient once per process (`register_gradient`), an op's inputs
and attributes by the names its ``REGISTER_OP`` gives them (`op_inputs`, `op_attrs`),
and its C++ shape checks run on static shapes without running anything (`check`).

A family's ``functions.py`` calls `op_fn` and `check`; its ``gradients.py`` registers
with `register_gradient` and reads the op with `op_inputs` and `op_attrs`, so that no
file restates an input's position or an attribute list the op definition already holds.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import tensorflow as tf
from tensorflow.python.framework import ops

from tf_ops.python.core import op_info
from tf_ops.python.core.library import load_library

_ops = load_library()


def op_fn(op: str) -> Callable[..., Any]:
    """The function TensorFlow generates for ``TfOps>{op}`` (inputs positional,
    attributes by keyword).

    Example:
      >>> op_fn("RmsNorm")(tf.ones([2, 4]), tf.ones([4]))  # doctest: +SKIP
      RmsNorm(y=<tf.Tensor ...>, rstd=<tf.Tensor ...>)
    """
    return getattr(_ops, "tf_ops_" + op_info.snake_case(op))


def register_gradient(op_type: str, fn: Optional[Callable] = None) -> Callable:
    """Registers `fn` as ``op_type``'s gradient, unless the op has one already: importing
    or reloading a gradients module twice does not raise "Registering two gradient with
    name". Called with `fn`, registers it; without, returns a decorator.

    Example:
      >>> @register_gradient("TfOps>Softmax")  # doctest: +SKIP
      ... def _grad(op, dy): ...
    """

    def decorator(grad: Callable) -> Callable:
        try:
            ops.gradient_registry.lookup(op_type)
        except LookupError:
            ops.RegisterGradient(op_type)(grad)
        return grad

    return decorator if fn is None else decorator(fn)


class OpInputs:
    """An op's inputs by their names in its definition: ``op_inputs(op).gamma``."""

    def __init__(self, op: tf.Operation):
        self._names = op_info.inputs(op.type)
        self._tensors = tuple(op.inputs)

    def __getattr__(self, name: str) -> tf.Tensor:
        try:
            return self._tensors[self._names.index(name)]
        except ValueError:
            raise AttributeError(f"op has no input {name!r}; it has {self._names}") from None

    def __getitem__(self, name: str) -> tf.Tensor:
        return getattr(self, name)

    def index(self, name: str) -> int:
        """The input's position."""
        return self._names.index(name)


def op_inputs(op: tf.Operation) -> OpInputs:
    """``op``'s inputs by name (from its OpDef), e.g. ``op_inputs(op).gamma``.

    Example:
      >>> def _grad(op, dy):  # doctest: +SKIP
      ...     return rms_norm_grad(dy, op_inputs(op).x, op_inputs(op).gamma, ...)
    """
    return OpInputs(op)


def input_positions(op_type: str, names: tuple[str, ...]) -> tuple[int, ...]:
    """The positions of these inputs of ``op_type`` ("TfOps>BatchNormTrainingGrad").

    Example:
      >>> input_positions("TfOps>RmsNorm", ("gamma",))  # doctest: +SKIP
      (1,)
    """
    inputs = op_info.inputs(op_type)
    return tuple(inputs.index(name) for name in names)


def op_attrs(op: tf.Operation, of: Optional[str] = None) -> dict:
    """``op``'s attributes other than its dtypes, by name, strings decoded; those of
    op type `of` only when given (a fused op's activation attributes).

    Example:
      >>> op_attrs(op)  # doctest: +SKIP
      {'epsilon': 0.001}
    """
    definition = op_info.op_def(of or op.type)
    result = {}
    for a in definition.attr:
        if a.type == "type":
            continue
        value = op.get_attr(a.name)
        result[a.name] = value.decode() if isinstance(value, bytes) else value
    return result


@functools.lru_cache(maxsize=None)
def _check_static(op: str, attrs: tuple, specs: tuple) -> None:
    with tf.Graph().as_default():
        placeholders = [tf.compat.v1.placeholder(dtype, shape) for dtype, shape in specs]
        op_fn(op)(*placeholders, **dict(attrs))


def check(op: str, inputs: tuple, attrs: dict) -> None:
    """Runs ``TfOps>{op}``'s C++ checks (its shape function: attribute values, input
    shapes that must agree) on inputs of these static shapes and dtypes and these
    attributes, without running anything: raises ValueError (TypeError for a wrong
    attribute type) with the op's own message.

    Example:
      >>> check("Elu", (tf.zeros([2]),), {"alpha": -1.0})  # doctest: +SKIP
      ValueError: ... TfOps>Elu: attribute 'alpha' must be >= 0, got -1 ...
    """
    specs = tuple((t.dtype, tuple(tf.TensorShape(t.shape).as_list())
                   if t.shape.rank is not None else None) for t in inputs)
    _check_static(op, tuple(sorted(attrs.items())), specs)
