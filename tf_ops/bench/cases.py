"""What the benchmark times: for each activation, tf_ops and what TF offers instead,
both taken from the activation's entry in ``tf_ops/python/activation/table.py``.

A `Case` gives three functions of tensors, each for tf_ops and for the TensorFlow
reference (the built-in op where TF has one, else the composite a user would write):

  forward(x)        -> y
  grad(g, v)        -> dx, the grad op alone (v: features, or outputs for elu)

Forward+backward through a tape, and the second derivative through nested tapes, are
built from `forward` for both sides. An activation's cases are its entry's
``bench_cases()`` (gelu has two: exact and tanh); nothing here is per activation.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Mapping

import tensorflow as tf

from tf_ops.python.activation import functions as activations
from tf_ops.python.core import op_info
from tf_ops.python.activation.table import ACTIVATIONS, Activation

Fn = Callable[..., tf.Tensor]


@dataclasses.dataclass(frozen=True)
class Case:
    """One activation with fixed attributes: tf_ops and TensorFlow's equivalent."""

    name: str
    ours: Fn  # x -> y
    ours_grad: Fn  # (g, v) -> dx
    theirs: Fn  # x -> y, TF built-in or composite
    theirs_grad: Fn  # (g, v) -> dx, TF built-in grad op or composite derivative
    grad_takes_outputs: bool = False
    theirs_label: str = "built-in"


def _case(entry: Activation, name: str, attrs: Mapping) -> Case:
    fn = activations.FUNCTIONS
    return Case(
        name,
        functools.partial(fn[entry.function], **attrs),
        functools.partial(fn[entry.function + "_grad"], **attrs),
        functools.partial(entry.tensorflow.forward, **attrs),
        functools.partial(entry.tensorflow.grad, **attrs),
        grad_takes_outputs=op_info.grad_takes_outputs(entry.op),
        theirs_label=entry.tensorflow.label,
    )


CASES: dict[str, Case] = {
    name: _case(entry, name, attrs)
    for entry in ACTIVATIONS
    for name, attrs in entry.bench_cases().items()
}


def forward_backward(forward: Fn) -> Fn:
    """(x, g) -> (y, dx): the forward op, then its gradient through a tape."""

    def run(x: tf.Tensor, g: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = forward(x)
        return y, tape.gradient(y, x, output_gradients=g)

    return run


def second_order(forward: Fn) -> Fn:
    """x -> (y, dy/dx, d2y/dx2): the forward op, then its first and second
    derivatives through nested tapes (upstream gradients of ones, as a tape gives)."""

    def run(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = forward(x)
            dy = inner.gradient(y, x)
        return y, dy, outer.gradient(dy, x)

    return run
