"""tf_ops.layers.BatchNormalization(synchronized=True) under a MirroredStrategy over two
logical CPUs against one device with the whole batch: writes the JSON result to argv[1].
Run by tests/test_batch_norm_layer.py in its own process (logical devices must be set
before TensorFlow initialises)."""

import json
import sys

import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import numpy as np  # noqa: E402

import tf_ops  # noqa: E402

cpus = tf.config.list_logical_devices("CPU")
strategy = tf.distribute.MirroredStrategy([cpus[0].name, cpus[1].name])
x = np.random.default_rng(0).normal(3, 2, (8, 5)).astype("float32")
with strategy.scope():
    layer = tf_ops.layers.BatchNormalization(synchronized=True, momentum=0.0, activation="swish")
    layer.build((None, 5))


@tf.function
def run(batch):
    return layer(batch, training=True)


for batch in strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(x).batch(8)):
    result = strategy.run(run, args=(batch,))
got = np.concatenate([np.asarray(t) for t in strategy.experimental_local_results(result)])
single = tf_ops.layers.BatchNormalization(momentum=0.0, activation="swish")
want = single(x, training=True)
json.dump({"replicas": strategy.num_replicas_in_sync,
           "max_y_difference": float(np.max(np.abs(got - np.asarray(want)))),
           "max_mean_difference": float(np.max(np.abs(layer.moving_mean.numpy() - single.moving_mean.numpy()))),
           "moving_mean": single.moving_mean.numpy().tolist()},
          open(sys.argv[1], "w"))
