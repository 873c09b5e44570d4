"""Keras's Adam (and AdamW, which inherits its update) as one fused loop per variable.

Keras 3's ``Adam.update_step`` on TensorFlow is about ten element-wise kernels per
variable (the difference, the scale and the assign of each moment, the square root,
the division, the assign of the variable), each a full pass over tensors the size of
the weights: on the transformers of the model benchmark, a tenth of the train step.
Patched, each variable's update is Keras's own ``update_step``, compiled by XLA: XLA
fuses it into one loop that reads the gradient, the moments and the variable once and
writes each once. The arithmetic is Keras's, operation for operation (on 20M
parameters: the same weights bit for bit after a step, in 0.36x the time).

The compiled update takes the variable and its slots as arguments, so variables of one
shape and dtype share one program: a model compiles as many as it has distinct weight
shapes, not one per variable (MobileNetV3Small: hundreds of variables).

TensorFlow's own fused kernel, ``ResourceApplyAdam``, was the first choice and is not
used: it computes ``1 - beta_2`` in float32 from the rounded ``beta_2`` (0.999 ->
0.00100005, Keras's 0.001), so its second moment drifts 5e-5 relative from Keras's
at every step, which the tests' loss curves show.

A sparse (``IndexedSlices``) gradient, an embedding's, is compiled with Keras's
update as well, the slices and their indices as they are. Everything around the update
(gradient clipping, weight decay, loss scaling, the iteration count, EMA) stays
Keras's; under ``jit_compile`` on the CPU the family steps aside
(`xla_cpu.py`), the step being one XLA program already.
"""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

ADAM_UPDATE_STEP = "keras.src.optimizers.adam:Adam.update_step"

_COMPILED = "_tf_ops_compiled_update"  # the optimizer's attribute that keeps the program


class _OneVariable:
    """The optimizer as Keras's ``update_step`` sees it, holding one variable's slots.

    ``update_step`` finds a variable's moments by the variable's identity, which a
    traced argument does not keep; this view answers index 0 with the slots passed in
    and forwards everything else (``iterations``, ``beta_1``, ``assign_add``, ...) to
    the optimizer.
    """

    def __init__(self, optimizer: Any, slots: dict[str, tf.Variable]) -> None:
        self._optimizer = optimizer
        for name, slot in slots.items():
            setattr(self, name, [slot])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._optimizer, name)

    def _get_variable_index(self, variable: Any) -> int:
        return 0


def _slots(optimizer: Any, variable: Any) -> dict[str, tf.Variable]:
    index = optimizer._get_variable_index(variable)
    names = ["_momentums", "_velocities"] + (["_velocity_hats"] if optimizer.amsgrad else [])
    return {name: getattr(optimizer, name)[index].value for name in names}


def make_adam_update_step(original: Callable) -> Callable:
    def update_step(self, gradient, variable, learning_rate):
        try:
            slots = _slots(self, variable)
        except AttributeError:
            # A Keras whose Adam keeps its slots under other names: its own update.
            return original(self, gradient, variable, learning_rate)
        update = self.__dict__.get(_COMPILED)
        if update is None:
            # One tf.function per optimizer; its traces, and XLA's programs, are per
            # (shape, dtype) of the arguments, the variable and its slots among them.
            def compiled(gradient, variable, slots, learning_rate):
                original(_OneVariable(self, slots), gradient, variable, learning_rate)

            update = tf.function(compiled, jit_compile=True, autograph=False)
            self.__dict__[_COMPILED] = update
        if not isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        # A sparse gradient (an embedding's) goes in as it is: Keras squares its slices
        # before it sums duplicate indices (a row looked up twice), a dense one would
        # square the sum.
        update(gradient, variable, slots, tf.convert_to_tensor(learning_rate))
    return update_step
