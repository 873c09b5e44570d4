"""Whether an output's incoming gradient is the zeros a ``tf.GradientTape`` made up.

For an op with several outputs of which only some were used, the tape passes zeros of
the full shape as the gradient of the others (TensorFlow passes None only for a
hard-coded list of its own ops, ``SparseSoftmaxCrossEntropyWithLogits`` among them).
A gradient function whose term for such an output is costly (the cross-entropy's
dlogits output: a second-order term over the whole [rows, classes] tensor) skips it
when this says the gradient is those zeros.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def _static_zero(t: tf.Tensor) -> bool:
    value = tf.get_static_value(t)
    return value is not None and not np.any(value)


def made_up_zeros(grad: tf.Tensor | None) -> bool:
    """True where `grad` is None or zeros by construction: in a graph, a ``Fill``,
    ``ZerosLike`` or constant of zeros; eagerly, a tensor with no non-zero element.

    Example:
      >>> made_up_zeros(tf.zeros([3, 4]))
      True
    """
    if grad is None:
        return True
    if isinstance(grad, tf.Tensor) and hasattr(grad, "graph") and not tf.executing_eagerly():
        op = grad.op
        if op.type == "ZerosLike":
            return True
        if op.type == "Fill":
            return _static_zero(op.inputs[1])
        if op.type == "Const":
            return _static_zero(grad)
        return False
    return not bool(tf.reduce_any(tf.not_equal(grad, 0)))
