"""Gradients of the rotary embedding ops (``functions.py``), of any order.

The rotation is linear in x, and its backward (the rotation by the opposite angles)
is linear in dy, each the other's transpose: ``TfOps>RotaryEmbedding``'s gradient is
``TfOps>RotaryEmbeddingGrad`` of the upstream, and the grad op's gradient is
``TfOps>RotaryEmbedding`` of its upstream, with the same positions and attributes.
Every order runs the two fused ops. Positions get no gradient (they are indices).

Registered once per process, as the other families' gradients.
"""

from __future__ import annotations

from tensorflow.python.framework import ops

from tf_ops.python.core import op_info
from tf_ops.python.rotary import functions as rotary

# Every attribute but the dtypes (U follows the positions input).
_ATTRS = tuple(a.name for a in op_info.op_def("TfOps>RotaryEmbedding").attr
               if a.name not in ("T", "U"))


def _other(other_op: str):
    def grad(op, upstream):
        attrs = {name: op.get_attr(name) for name in _ATTRS}
        attrs["rope_type"] = attrs["rope_type"].decode()
        return [rotary.op_fn(other_op)(upstream, op.inputs[1], **attrs), None]

    return grad


for _op, _other_op in (("RotaryEmbedding", "RotaryEmbeddingGrad"),
                       ("RotaryEmbeddingGrad", "RotaryEmbedding")):
    try:
        ops.gradient_registry.lookup(op_info.NAMESPACE + _op)
    except LookupError:
        ops.RegisterGradient(op_info.NAMESPACE + _op)(_other(_other_op))
