"""tf_ops.layers.BatchNormalization(synchronized=True) under a MirroredStrategy over two
logical CPUs against one device with the whole batch, and against Keras's own
synchronized layer on the same strategy: outputs, the gradients of x, gamma and beta
(gamma's and beta's summed over the replicas, as the optimizer sums them) and the
moving statistics after two training steps, channels-last and channels-first. Writes
the JSON result to argv[1]. Run by tests/batch_norm/test_batch_norm_layer.py in its own process
(logical devices must be set before TensorFlow initialises)."""

import json
import sys

import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

import tf_ops  # noqa: E402
from tf_ops.python.batch_norm import synchronized  # noqa: E402

# The fused path's traces (not Keras's own synchronized call).
fused_traces = []
_fused = synchronized.batch_norm_synchronized
synchronized.batch_norm_synchronized = lambda *a, **k: fused_traces.append(1) or _fused(*a, **k)

cpus = tf.config.list_logical_devices("CPU")
strategy = tf.distribute.MirroredStrategy([cpus[0].name, cpus[1].name])
REPLICAS = strategy.num_replicas_in_sync


def make(kind, axis, activation, center, synchronized):
    kwargs = dict(axis=axis, momentum=0.5, center=center, synchronized=synchronized,
                  gamma_initializer=keras.initializers.Constant(1.5),
                  moving_mean_initializer=keras.initializers.Constant(2.5))
    if kind == "tf_ops":
        return [tf_ops.layers.BatchNormalization(activation=activation, **kwargs)]
    return [keras.layers.BatchNormalization(**kwargs),
            keras.layers.Activation({"relu": "relu", "swish": "silu"}[activation])]


def step(layers, x, w):
    bn = layers[0]
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x
        for layer in layers:
            y = layer(y, training=True)
        loss = tf.reduce_sum(y * w)
    weights = [v for v in (bn.gamma, bn.beta) if v is not None]
    return [y] + tape.gradient(loss, [x] + weights)


def run_distributed(layers, x, w):
    half = x.shape[0] // REPLICAS

    def shard(t):
        return strategy.experimental_distribute_values_from_function(
            lambda ctx: t[ctx.replica_id_in_sync_group * half:
                          (ctx.replica_id_in_sync_group + 1) * half])

    xs, ws = shard(x), shard(w)
    fn = tf.function(lambda a, b: step(layers, a, b))
    for _ in range(2):  # two steps: the moving statistics move twice
        out = strategy.run(fn, args=(xs, ws))
    local = [strategy.experimental_local_results(t) for t in out]
    result = [np.concatenate([np.asarray(r) for r in local[0]]),
              np.concatenate([np.asarray(r) for r in local[1]])]
    result += [sum(np.asarray(r) for r in grads) for grads in local[2:]]  # summed
    return result


def run_single(layers, x, w):
    fn = tf.function(lambda a, b: step(layers, a, b))
    for _ in range(2):
        out = fn(x, w)
    return [np.asarray(t) for t in out]


def moving(layers):
    return [layers[0].moving_mean.numpy(), layers[0].moving_variance.numpy()]


def max_difference(a, b):
    return max(float(np.max(np.abs(np.asarray(p) - np.asarray(q)), initial=0.0))
               for p, q in zip(a, b))


cases = {}
rng = np.random.default_rng(0)
for name, shape, axis, activation, center in (("channels_last", (8, 5), -1, "swish", True),
                                               ("channels_first", (8, 3, 4, 2), 1, "relu", False)):
    x = tf.constant(rng.normal(3, 2, shape).astype("float32"))
    w = tf.constant(rng.normal(0, 1, shape).astype("float32"))
    with strategy.scope():
        ours = make("tf_ops", axis, activation, center, True)
        theirs = make("keras", axis, activation, center, True)
        for layer in ours + theirs:
            layer.build(shape)
    single = make("tf_ops", axis, activation, center, False)
    for layer in single:
        layer.build(shape)
    got = run_distributed(ours, x, w)
    keras_got = run_distributed(theirs, x, w)
    want = run_single(single, x, w)
    cases[name] = {
        "outputs": ["y", "dx", "dgamma"] + (["dbeta"] if center else []),
        "max_difference_vs_one_device": [max_difference([g], [e]) for g, e in zip(got, want)],
        "max_difference_vs_keras_synchronized": [
            max_difference([g], [e]) for g, e in zip(got, keras_got)],
        "max_moving_difference_vs_one_device": max_difference(moving(ours), moving(single)),
        "max_moving_difference_vs_keras": max_difference(moving(ours), moving(theirs)),
        "moving_mean": moving(single)[0].tolist(),
        "scale": float(max(np.max(np.abs(e)) for e in want)),
    }

json.dump({"replicas": REPLICAS, "fused_traces": len(fused_traces), "cases": cases},
          open(sys.argv[1], "w"))
