"""What Python reads from the registered ops instead of restating it: input names,
attributes with their types and defaults, and the one-line docs, all written once in
C++ (``REGISTER_OP``). Valid once the library is loaded (`load_library`).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.framework import op_def_registry

NAMESPACE = "TfOps>"
# The op families every activation has: "TfOps>Gelu", "TfOps>GeluGrad", ...
FAMILIES = ("", "Grad", "GradGrad")


@dataclasses.dataclass(frozen=True)
class Attr:
    """An op attribute other than the dtype ``T``."""

    name: str
    type: type  # float or bool
    default: float | bool  # floats: the shortest decimal of the stored float32


def op_def(op_type: str) -> op_def_pb2.OpDef:
    """The registered OpDef of ``op_type`` ("TfOps>Gelu"); KeyError if unknown."""
    found = op_def_registry.get(op_type)
    if found is None:
        raise KeyError(f"{op_type} is not registered: is the tf_ops library loaded?")
    return found


@functools.lru_cache(maxsize=None)
def attrs(op_type: str) -> tuple[Attr, ...]:
    """The attributes of ``op_type`` other than T, with Python types and defaults (float
    defaults as the float32 TensorFlow stores, widened exactly)."""
    result = []
    for a in op_def(op_type).attr:
        if a.name == "T":
            continue
        if a.type == "float":
            # The shortest decimal of the float32 TF stores: 0.2, not 0.20000000298...
            result.append(Attr(a.name, float, float(str(np.float32(a.default_value.f)))))
        elif a.type == "bool":
            result.append(Attr(a.name, bool, bool(a.default_value.b)))
        else:
            raise TypeError(f"{op_type}: attribute {a.name} of type {a.type} is not supported")
    return tuple(result)


@functools.lru_cache(maxsize=None)
def inputs(op_type: str) -> tuple[str, ...]:
    """The input names of ``op_type``, in order."""
    return tuple(a.name for a in op_def(op_type).input_arg)


def grad_takes_outputs(op: str) -> bool:
    """Whether ``TfOps>{op}Grad`` takes the forward op's outputs (Elu) rather than
    its features, as its second input's name says."""
    return inputs(f"{NAMESPACE}{op}Grad")[1] == "outputs"


def snake_case(op: str) -> str:
    """``"HardSwishGrad"`` -> ``"hard_swish_grad"``: the Python name TensorFlow gives an
    op's function, and tf_ops's own."""
    return "".join("_" + c.lower() if c.isupper() else c for c in op).lstrip("_")


def _generated_doc(op_type: str) -> str:
    # The Python registry strips op docs; the function TensorFlow generates for the op
    # keeps its .Doc() text and adds an Args section.
    from tf_ops.python.core.library import load_library  # noqa: PLC0415  (loaded by then)

    return getattr(load_library(), "tf_ops_" + snake_case(op_type[len(NAMESPACE):])).__doc__


def summary(op_type: str) -> str:
    """The op's description from its ``.Doc()`` in C++, e.g. ``"activations = features
    if features > 0 else alpha * features."``."""
    return " ".join(_generated_doc(op_type).split("\n\n", 1)[0].split())


def args_doc(op_type: str) -> str:
    """The Args and Returns sections TensorFlow writes for the op's function, from its
    registration (input dtypes, attribute types and defaults), unindented."""
    sections = _generated_doc(op_type).split("\n\n", 1)[1]
    lines = (line[2:] if line.startswith("  ") else line for line in sections.splitlines())
    return "\n".join(lines).strip()
