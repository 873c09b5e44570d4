"""Gradients of the rotary embedding ops (``functions.py``), of any order.

The rotation is linear in x, and its backward (the rotation by the opposite angles)
is linear in dy, each the other's transpose: ``TfOps>RotaryEmbedding``'s gradient is
``TfOps>RotaryEmbeddingGrad`` of the upstream, and the grad op's gradient is
``TfOps>RotaryEmbedding`` of its upstream, with the same positions and attributes.
Every order runs the two fused ops. Positions get no gradient (they are indices).

Registered once per process (`core.op_support.register_gradient`).
"""

from __future__ import annotations

from tf_ops.python.core import op_info
from tf_ops.python.core.op_support import op_attrs, op_fn, op_inputs, register_gradient


def _other(other_op: str):
    def grad(op, upstream):
        positions = op_inputs(op).positions
        return [op_fn(other_op)(upstream, positions, **op_attrs(op)), None]

    return grad


for _op, _other_op in (("RotaryEmbedding", "RotaryEmbeddingGrad"),
                       ("RotaryEmbeddingGrad", "RotaryEmbedding")):
    register_gradient(op_info.NAMESPACE + _op, _other(_other_op))
