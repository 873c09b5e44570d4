"""One worker of a MultiWorkerMirroredStrategy cluster: a short model.fit with tf_ops layers.

Usage: TF_CONFIG=... multi_worker_fit.py OUT_NPZ

Run once per worker (test_distribute.py starts two on 127.0.0.1). Writes the
trained weights (`w0`, `w1`, ...) and the per-epoch losses (`loss`).

Keras 3.15's `model.fit` does not run under MultiWorkerMirroredStrategy as it is
(keras-team/keras#20585, tensorflow/tensorflow#72388); two small work-arounds,
both confined to this script, make it run:
- its first-batch "symbolic build" reduces the (x, y) tuple with
  `strategy.reduce`, which MultiWorkerMirroredStrategy rejects for a tuple: the
  model is built and compiled in the scope, then fit runs inside the scope with
  the model's own strategy unset, so Keras takes the scope's strategy and skips
  that step;
- each step's logs are reduced with `strategy.reduce("MEAN", axis=0)`, which
  needs an axis: `train_step` gives the scalar logs one.
"""

from __future__ import annotations

import sys

import keras
import numpy as np
import tensorflow as tf

import tf_ops

EPOCHS, BATCH = 2, 32


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 8)).astype("float32")
    y = (np.sin(x[:, :1]) + 0.5 * x[:, 1:2] ** 2).astype("float32")
    return x, y


def layers() -> list:
    keras.utils.set_random_seed(1)  # same initial weights on every worker
    return [
        keras.Input((8,)),
        keras.layers.Dense(16), tf_ops.layers.GELU(),
        keras.layers.Dense(16), tf_ops.layers.Mish(),
        keras.layers.Dense(16), tf_ops.layers.ELU(0.5),
        keras.layers.Dense(16, activation=tf_ops.swish),
        keras.layers.Dense(1),
    ]


def dataset() -> tf.data.Dataset:
    x, y = data()
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)  # global batches


class LogsWithAxis(keras.Sequential):
    """Gives each step's scalar logs an axis for Keras's multi-worker reduction."""

    def train_step(self, data):
        return {key: tf.reshape(value, [1]) for key, value in super().train_step(data).items()}


def main(out: str) -> int:
    # Created before any TF op runs: the strategy sets up the cluster's devices.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = LogsWithAxis(layers())
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", jit_compile=False)
        model.optimizer.build(model.trainable_variables)
    assert type(model.layers[0].kernel.value).__name__ == "MirroredVariable"
    model._distribute_strategy = None  # see the module docstring
    with strategy.scope():
        history = model.fit(dataset(), epochs=EPOCHS, shuffle=False, verbose=0)
    loss = np.array([np.ravel(v)[0] for v in history.history["loss"]])
    weights = {f"w{i}": w for i, w in enumerate(model.get_weights())}
    np.savez(out, loss=loss, replicas=strategy.num_replicas_in_sync, **weights)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
