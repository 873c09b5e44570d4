"""Keras 3 layers for every activation, made from its table entry (``table.py``).

`LeakyReLU`, `ELU`, `GELU`, `Swish`, `Mish`, `HardSwish`, ...: drop-in replacements for
Keras's activation layers (same argument names: ``negative_slope``, ``alpha``), each
with the op's attributes as its arguments and their defaults, registered with Keras
under the package ``"tf_ops"`` so that models using them save to ``.keras`` and reload,
as long as `tf_ops` is imported before loading. The activation functions themselves
(`tf_ops.gelu`, ...) are registered too, so ``Dense(8, activation=tf_ops.gelu)`` saves.

They behave as Keras's own stateless layers: built when made (no weights), masks pass
through, the output has the input's shape and dtype. Choices:
- Arguments are checked when the layer is made: a wrong type is a `TypeError` naming
  the argument; a wrong value is the op's own check (its C++ shape function), raised as
  a `ValueError` naming the argument.
- Under a mixed precision policy Keras casts floating inputs to the layer's compute
  dtype (float16 or bfloat16) and the op computes in float32 inside and rounds once.
  Integer and boolean inputs are cast to the compute dtype, as `keras.layers.Dense` does.
- Under `tf_ops.portable()` they build TensorFlow built-in ops, like the functions.
- The layers need Keras's TensorFlow backend (the ops are TensorFlow ops).
"""

from __future__ import annotations

import numbers
import re
from typing import Any

import keras
import tensorflow as tf

from tf_ops.python.activation import functions as activations
from tf_ops.python.activation.table import ACTIVATIONS, Activation
from tf_ops.python.core import op_info

PACKAGE = "tf_ops"

# The public activation functions, registered under "tf_ops>gelu" etc. so that
# `Dense(..., activation=tf_ops.gelu)` serializes by name and reloads.
ACTIVATION_FUNCTIONS = tuple(activations.FUNCTIONS[entry.function] for entry in ACTIVATIONS)
for _fn in ACTIVATION_FUNCTIONS:
    keras.saving.register_keras_serializable(package=PACKAGE)(_fn)


def _typed(layer: str, arg: str, attr: op_info.Attr, value: Any) -> Any:
    """`value` as the attribute's Python type, or a TypeError naming the argument (a
    ValueError for None, in the words of Keras's own layers: "The negative_slope value
    of a Leaky ReLU layer cannot be None")."""
    if value is None:
        spaced = re.sub(r"(?<=[a-z])(?=[A-Z][a-z])", " ", layer)  # "Leaky ReLU"
        raise ValueError(f"{layer}: The {arg} value of a {spaced} layer cannot be None. "
                         f"Expected a {'bool' if attr.type is bool else 'real number'}.")
    if attr.type is bool:
        if isinstance(value, bool):
            return value
        expected = "True or False"
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    else:
        expected = "a real number"
    raise TypeError(
        f"{layer}: `{arg}` must be {expected}, got {value!r} of type {type(value).__name__}."
    )


class FusedActivation(keras.layers.Layer):
    """The behaviour every tf_ops activation layer shares; `ENTRY` says which op.

    Subclasses are made by `_layer_class`, one per table entry.
    """

    ENTRY: Activation

    def __init__(self, arguments: dict[str, Any], **kwargs: Any) -> None:
        """`arguments`: the layer's own arguments (Keras names) with their values."""
        entry = self.ENTRY
        for alias, argument in entry.layer_aliases.items():  # e.g. Keras 2's `alpha=`
            if alias in kwargs:
                arguments[argument] = kwargs.pop(alias)
        super().__init__(**kwargs)
        if keras.backend.backend() != "tensorflow":
            raise RuntimeError(
                f"{type(self).__name__} runs TensorFlow ops and needs Keras's TensorFlow "
                f"backend; the backend is {keras.backend.backend()!r} "
                "(set KERAS_BACKEND=tensorflow)."
            )
        self._attrs = {}
        for attr in op_info.attrs(op_info.NAMESPACE + entry.op):
            arg = _argument_name(entry, attr.name)
            value = _typed(type(self).__name__, arg, attr, arguments[arg])
            setattr(self, arg, value)
            self._attrs[attr.name] = value
        try:
            activations.check(entry.op, (tf.zeros([0]),), self._attrs)
        except ValueError as err:
            given = ", ".join(f"{a}={getattr(self, a)!r}" for a in arguments)
            raise ValueError(f"{type(self).__name__}({given}): {err}") from None
        self.supports_masking = True
        # Stateless: built now, as Keras's own activation layers are (unless a subclass
        # overrides build). Older Keras versions without this build on first call.
        build_at_init = getattr(self, "_build_at_init", None)
        if build_at_init is not None:
            build_at_init()

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        inputs = tf.convert_to_tensor(inputs)
        if not inputs.dtype.is_floating:
            inputs = tf.cast(inputs, self.compute_dtype)
        return activations.FUNCTIONS[self.ENTRY.function](inputs, **self._attrs)

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        entry = self.ENTRY
        names = [_argument_name(entry, a.name) for a in op_info.attrs(op_info.NAMESPACE + entry.op)]
        return {**super().get_config(), **{n: getattr(self, n) for n in names}}


def _argument_name(entry: Activation, attr: str) -> str:
    """The layer's argument for an op attribute (Keras's name where it differs)."""
    return {op_attr: arg for arg, op_attr in entry.layer_args.items()}.get(attr, attr)


def _layer_class(entry: Activation) -> type:
    """The Keras layer of `entry`, with the op's attributes as keyword arguments."""
    attrs = op_info.attrs(op_info.NAMESPACE + entry.op)
    args = [_argument_name(entry, a.name) for a in attrs]
    # A real signature (help(), IDEs, Keras's config checks): generated source.
    params = "".join(f"{arg}={a.default!r}, " for arg, a in zip(args, attrs))
    source = (
        f"def __init__(self, {params}**kwargs):\n"
        f"    FusedActivation.__init__(self, {{{', '.join(f'{a!r}: {a}' for a in args)}}}, **kwargs)\n"
    )
    namespace = {"FusedActivation": FusedActivation}
    exec(source, namespace)  # noqa: S102  (source built above from the op's registration)
    example = "\n".join("  " + line for line in entry.layer_example.splitlines())
    arguments = ", ".join(f"``{arg}={a.default!r}``" for arg, a in zip(args, attrs))
    doc = (
        f"{entry.title} layer: `tf_ops.{entry.function}` as a Keras layer.\n\n"
        f"{entry.layer_notes}\n\n"
        + (f"Arguments: {arguments} (the op's attributes).\n\n" if args else "")
        + f"Example:\n{example}\n"
    )
    cls = type(entry.layer, (FusedActivation,), {
        "ENTRY": entry, "__init__": namespace["__init__"], "__doc__": doc,
        "__module__": "tf_ops.layers", "__qualname__": entry.layer,
    })
    cls.__init__.__qualname__ = f"{entry.layer}.__init__"
    return keras.saving.register_keras_serializable(package=PACKAGE)(cls)


# name -> layer class, for every activation: "GELU", "LeakyReLU", ...
LAYERS: dict[str, type] = {entry.layer: _layer_class(entry) for entry in ACTIVATIONS}
globals().update(LAYERS)
__all__ = sorted(LAYERS)
