"""model.fit with tf_ops layers under MirroredStrategy over two logical CPUs, and on one device.

Usage: mirrored_fit.py OUT_JSON

Splitting the CPU into logical devices must happen before TensorFlow initialises
its devices, hence a script of its own. Writes the losses of both runs, the
largest weight difference after training, and where the per-replica outputs of
a tf_ops layer were computed.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402

import tf_ops  # noqa: E402

EPOCHS, BATCH = 3, 32


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (np.sin(x[:, :1]) + 0.5 * x[:, 1:2] ** 2).astype("float32")
    return x, y


def build_model() -> keras.Model:
    keras.utils.set_random_seed(1)  # same initial weights in both runs
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16), tf_ops.layers.LeakyReLU(0.1),
            keras.layers.Dense(16), tf_ops.layers.ELU(0.5),
            keras.layers.Dense(16), tf_ops.layers.GELU(),
            keras.layers.Dense(16), tf_ops.layers.Swish(1.5),
            keras.layers.Dense(16, activation=tf_ops.mish),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", jit_compile=False)
    return model


def fit(model: keras.Model) -> list[float]:
    x, y = data()
    history = model.fit(x, y, epochs=EPOCHS, batch_size=BATCH, shuffle=False, verbose=0)
    return history.history["loss"]


def main(out: str) -> int:
    single = build_model()
    initial = single.get_weights()
    single_loss = fit(single)

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        mirrored = build_model()
    mirrored_loss = fit(mirrored)

    # Each replica runs the op on its own device.
    layer = tf_ops.layers.GELU()
    inputs = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.fill([2, 3], float(ctx.replica_id_in_sync_group))
    )
    outputs = strategy.experimental_local_results(strategy.run(layer, args=(inputs,)))

    result = {
        "replicas": strategy.num_replicas_in_sync,
        "mirrored_variables": type(mirrored.layers[0].kernel.value).__name__,
        "single_loss": single_loss,
        "mirrored_loss": mirrored_loss,
        "max_weight_difference": max(
            float(np.max(np.abs(a - b))) for a, b in zip(single.get_weights(), mirrored.get_weights())
        ),
        "weights_moved": float(np.max(np.abs(initial[0] - single.get_weights()[0]))),
        "replica_devices": [t.device for t in outputs],
        "replica_values": [t.numpy().tolist() for t in outputs],
    }
    with open(out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
