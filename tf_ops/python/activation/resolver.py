"""Which activation a batch-norm op fuses: a name, a tf_ops function, a Keras
activation, or None, resolved once to the ops' ``activation`` attribute and the
activation's own attributes (``alpha``, ``beta``, ``approximate``).

Accepted: ``None``, ``"linear"``, ``"identity"``; every tf_ops activation by its
function name (``"swish"``), its serialised name (``"tf_ops>swish"``) or the function
itself (``tf_ops.swish``); and the Keras activations that are the same functions:
``"relu"`` (``leaky_relu`` with ``alpha=0``), ``"silu"`` (``swish``), ``"hard_silu"``
(``hard_swish``), ``"gelu"``, ``"elu"``, ``"celu"``, ``"mish"``, ``"sigmoid"``,
``"leaky_relu"`` and their ``keras.activations`` functions.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import keras

from tf_ops.python.activation import functions as activations
from tf_ops.python.activation.table import ACTIVATIONS, Activation
from tf_ops.python.core import op_info

_BY_FUNCTION = {entry.function: entry for entry in ACTIVATIONS}
# Keras's names for the same functions, with the attributes that make them so.
_KERAS_NAMES: dict[str, tuple[str, dict]] = {
    "relu": ("leaky_relu", {"alpha": 0.0}),
    "silu": ("swish", {}),
    "hard_silu": ("hard_swish", {}),
}
_IDENTITY_NAMES = ("linear", "identity")
# The ops' attribute names for the activations' attributes.
ACTIVATION_ATTRS = ("alpha", "beta", "approximate")
_OP_DEFAULTS = {"alpha": 0.2, "beta": 1.0, "approximate": False}


@dataclasses.dataclass(frozen=True)
class ActivationSpec:
    """A resolved activation: `entry` None is the identity; `attrs` its attributes."""

    entry: Activation | None
    attrs: tuple = ()

    @property
    def name(self) -> str:
        return "linear" if self.entry is None else self.entry.function

    @property
    def op_attrs(self) -> dict:
        """The ops' attributes: ``activation`` and all three activation attributes."""
        result = dict(_OP_DEFAULTS)
        result.update(dict(self.attrs))
        result["activation"] = "Identity" if self.entry is None else self.entry.op
        return result

    def apply(self, x):
        """The activation alone (tf_ops's op): for the layer's unfused paths."""
        if self.entry is None:
            return x
        return activations.FUNCTIONS[self.entry.function](x, **dict(self.attrs))

    def config(self) -> Any:
        """What the layer's config stores: the name, or name and attributes."""
        if not self.attrs:
            return self.name
        return {"name": self.name, "attrs": dict(self.attrs)}


def _keras_function_name(fn: Callable) -> str | None:
    """The name `fn` has in ``keras.activations``, among the names this module
    resolves (the table's functions, Keras's names for them, the identity's)."""
    for name in (*_BY_FUNCTION, *_KERAS_NAMES, *_IDENTITY_NAMES):
        if getattr(keras.activations, name, None) is fn:
            return name
    return None


def resolve(activation: Any = None, **attrs) -> ActivationSpec:
    """The ActivationSpec of `activation` with attributes `attrs` (ValueError for an
    unknown activation or attribute).

    Example:
      >>> resolve("relu").op_attrs["alpha"], resolve(tf_ops.swish).name
      (0.0, 'swish')
    """
    if isinstance(activation, ActivationSpec):
        return activation
    if isinstance(activation, dict):
        return resolve(activation["name"], **{**activation.get("attrs", {}), **attrs})
    base: dict = {}
    if isinstance(activation, functools.partial):
        attrs = {**activation.keywords, **attrs}
        activation = activation.func
    if callable(activation):
        by_object = {fn: name for name, fn in activations.FUNCTIONS.items()}
        name = by_object.get(activation) or _keras_function_name(activation)
        if name is None:
            raise ValueError(
                f"activation {activation!r} cannot be fused into batch normalization: pass "
                f"a tf_ops activation ({', '.join(sorted(_BY_FUNCTION))}), its name, or None")
        activation = name
    if activation is None or (isinstance(activation, str) and activation.lower() in _IDENTITY_NAMES):
        if attrs:
            raise ValueError(f"the identity activation takes no attributes, got {sorted(attrs)}")
        return ActivationSpec(None)
    if not isinstance(activation, str):
        raise ValueError(f"activation must be a name, a function or None, got {activation!r}")
    name = activation.lower().removeprefix("tf_ops>")
    if name in _KERAS_NAMES:
        name, base = _KERAS_NAMES[name]
    entry = _BY_FUNCTION.get(name)
    if entry is None:
        raise ValueError(
            f"unknown activation {activation!r} for batch normalization: expected None, "
            f"'linear', 'relu', 'silu', 'hard_silu' or one of {sorted(_BY_FUNCTION)}")
    allowed = {a.name: a for a in op_info.attrs(op_info.NAMESPACE + entry.op)}
    merged = {a.name: a.default for a in allowed.values()}
    merged.update(base)
    for key, value in attrs.items():
        if key == "negative_slope" and "alpha" in allowed:  # Keras's LeakyReLU name
            key = "alpha"
        if key not in allowed:
            raise ValueError(
                f"activation {entry.function!r} has no attribute {key!r} "
                f"(its attributes: {sorted(allowed) or 'none'})")
        merged[key] = allowed[key].type(value)
    return ActivationSpec(entry, tuple(sorted(merged.items())))
