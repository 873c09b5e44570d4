"""Keras's Adam (and AdamW, which inherits its update) in one fused kernel per variable.

Keras 3's ``Adam.update_step`` on TensorFlow is about ten element-wise kernels per
variable (the difference, the scale and the assign of each moment, the square root,
the division, the assign of the variable), each a full pass over tensors the size of
the weights: on the transformers of the model benchmark, a tenth of the train step.
TensorFlow has the same update as one kernel, ``ResourceApplyAdam`` (CPU, GPU and XLA),
with Keras's arithmetic: ``alpha = lr sqrt(1 - beta_2^t) / (1 - beta_1^t)``,
``m += (g - m)(1 - beta_1)``, ``v += (g^2 - v)(1 - beta_2)``,
``w -= m alpha / (sqrt(v) + epsilon)``; it reads g, m, v and w once and writes m, v
and w once. Its ``1 - beta`` is computed in the variable's dtype (Keras's in Python's
float, then rounded): the two updates agree to that dtype's rounding.

Keras's own ``update_step`` runs for what the kernel does not take: ``amsgrad=True``,
a variable that is not a resource variable, a dtype other than float16, bfloat16,
float32 or float64. Everything around the update (gradient clipping, weight decay,
loss scaling, the iteration count, EMA) stays Keras's.
"""

from __future__ import annotations

from typing import Any, Callable

import keras
import tensorflow as tf

ADAM_UPDATE_STEP = "keras.src.optimizers.adam:Adam.update_step"
_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def _resource(variable: Any) -> tf.Variable | None:
    """The TensorFlow resource variable behind a Keras variable (or itself), or None."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    if isinstance(variable, tf.Variable) and hasattr(variable, "handle"):
        return variable
    return None


def adam_reason_left(optimizer: keras.optimizers.Optimizer) -> str | None:
    """Why `optimizer`'s updates run Keras's own code, or None."""
    return "amsgrad=True (the kernel has no v_hat)" if optimizer.amsgrad else None


def make_adam_update_step(original: Callable) -> Callable:
    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        target = _resource(variable)
        m = _resource(self._momentums[index])
        v = _resource(self._velocities[index])
        if (adam_reason_left(self) is not None or target is None or m is None or v is None
                or target.dtype not in _DTYPES):
            return original(self, gradient, variable, learning_rate)
        dtype = target.dtype
        step = tf.cast(self.iterations + 1, dtype)
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=target.handle, m=m.handle, v=v.handle,
            beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, dtype), beta1=beta_1, beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype))
    return update_step
