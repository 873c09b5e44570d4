"""Benchmark of fused batch normalization + activation: one training step's forward and
backward (dx, dgamma, dbeta) of `tf_ops.layers.BatchNormalization(activation=...)`
against ``keras.layers.BatchNormalization`` followed by ``keras.layers.Activation``, at
EfficientNetB0's shapes with swish and a ResNet50 shape with ReLU (tf_ops: leaky_relu
with alpha=0), float32 and bfloat16 (mixed precision: the layers' compute dtype).

  python -m tf_ops.bench.batch_norm [--budget-s 4] [--dtypes float32 bfloat16]
                                    [--cases b0_112 ...] [--models] [--grid]

Candidates, timed in the same interleaved rounds (timing.py): tf_ops in ``tf.function``,
Keras in ``tf.function`` (its composite: moments, then batch_normalization, about ten
kernels forward and fifteen backward), Keras under ``jit_compile`` and tf_ops under
``jit_compile`` (the ops' XLA lowerings). The backward is the vector-Jacobian product
with a fixed upstream gradient (``output_gradients``), so that nothing but the layers is
timed. Ratios are the reference's time over tf_ops's (> 1: tf_ops is faster).

The floor: the time to move the bytes the fused passes must move, measured in the same
rounds as TensorFlow's own element-wise ``Neg`` of x (one read and one write of x's
size, on every core): training forward + backward reads x twice and writes y, then
reads x and dy twice and writes dx (four such copies); predict reads x and writes y
(one). ``floor`` is the copies' time over tf_ops's: 1.0 is memory speed.

``--grid``: swish over a grid of channels (32 to 672) and spatial sizes (14 to 112) at
batch 8, to see where the ratio falls off beyond the model shapes.

``--models``: a train step of EfficientNetB0 / MobileNetV3Small / ResNet50
(weights=None) with every BatchNormalization (+ the Activation after it) replaced by the
fused layer, vs stock.
"""

from __future__ import annotations

import argparse
import functools

import keras
import numpy as np
import tensorflow as tf

import tf_ops
from tf_ops.bench.timing import time_interleaved

# name -> (shape, tf_ops activation, Keras activation)
CASES = {
    "b0_112": ((8, 112, 112, 32), "swish", "swish"),
    "b0_56": ((8, 56, 56, 144), "swish", "swish"),
    "b0_14": ((8, 14, 14, 672), "swish", "swish"),
    "b0_28": ((8, 28, 28, 240), "swish", "swish"),  # EfficientNet's middle stages
    "r50_56": ((8, 56, 56, 256), "relu", "relu"),
}
# --grid: swish at batch 8 over these channels and spatial sizes, named c<C>_<HW>.
GRID_CHANNELS = (32, 64, 144, 240, 672)
GRID_SIZES = (14, 28, 56, 112)
GRID = {f"c{c}_{hw}": ((8, hw, hw, c), "swish", "swish")
        for c in GRID_CHANNELS for hw in GRID_SIZES}
_ALL_CASES = {**GRID, **CASES}


# The ops these cases time (tests/bench/test_bench.py: every forward op has a benchmark): the
# training step runs TfOps>BatchNormTraining and its grad, the predict pass
# TfOps>BatchNormInference.
BENCHED_OPS = frozenset({"batch_norm_training", "batch_norm_inference"})
PASSES = ("train", "predict")


def _step(layers_, x, w, mode="train"):
    """Forward and backward of the layers on x: y, dx, dgamma, dbeta with the upstream
    gradient w ("train"); or the forward with the moving statistics ("predict")."""
    bn = layers_[0]

    if mode == "predict":
        def predict():
            y = x
            for layer in layers_:
                y = layer(y, training=False)
            return y

        return predict

    def run():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = x
            for layer in layers_:
                y = layer(y, training=True)
        return [y] + tape.gradient(y, [x, bn.gamma, bn.beta], output_gradients=w)

    return run


# Copies of x's size each pass moves (see the module docstring).
_FLOOR_COPIES = {"train": 4, "predict": 1}


def bench_layers(cases, dtypes, budget_s: float) -> list[dict]:
    rows = []
    for dtype in dtypes:
        policy = "float32" if dtype == "float32" else "mixed_bfloat16"
        tf_dtype = tf.float32 if dtype == "float32" else tf.bfloat16
        for name in cases:
            shape, ours_act, keras_act = _ALL_CASES[name]
            x = tf.cast(tf.random.normal(shape), tf_dtype)
            w = tf.cast(tf.random.normal(shape), tf_dtype)
            ours = [tf_ops.layers.BatchNormalization(activation=ours_act, dtype=policy)]
            keras_layers = [keras.layers.BatchNormalization(dtype=policy),
                            keras.layers.Activation(keras_act, dtype=policy)]
            for layer in ours + keras_layers:
                layer.build(shape)
            for mode in PASSES:
                candidates = {
                    "tf_ops": tf.function(_step(ours, x, w, mode)),
                    "keras": tf.function(_step(keras_layers, x, w, mode)),
                    "keras_xla": tf.function(_step(keras_layers, x, w, mode), jit_compile=True),
                    "tf_ops_xla": tf.function(_step(ours, x, w, mode), jit_compile=True),
                    "copy": tf.function(lambda: tf.math.negative(x)),
                }
                t = {k: v.median for k, v in time_interleaved(candidates, 5, 40, budget_s).items()}
                row = {"case": name, "pass": mode, "shape": list(shape), "activation": keras_act,
                       "dtype": dtype, "tf_ops_ms": t["tf_ops"] * 1e3,
                       "vs_keras_graph": t["keras"] / t["tf_ops"],
                       "vs_keras_xla": t["keras_xla"] / t["tf_ops"],
                       "xla_vs_keras_xla": t["keras_xla"] / t["tf_ops_xla"],
                       "floor": _FLOOR_COPIES[mode] * t["copy"] / t["tf_ops"]}
                rows.append(row)
                print(f"{name:<8} {mode:<8} {str(shape):<20} {keras_act:<6} {dtype:<9} tf_ops "
                      f"{row['tf_ops_ms']:8.2f} ms   vs Keras graph {row['vs_keras_graph']:5.2f}x"
                      f"   vs Keras XLA {row['vs_keras_xla']:5.2f}x"
                      f"   XLA vs XLA {row['xla_vs_keras_xla']:5.2f}x"
                      f"   floor {row['floor']:4.2f}", flush=True)
    return rows


def replace_batch_norm(model: keras.Model) -> keras.Model:
    """A copy of a functional model with each BatchNormalization, and the Activation
    right after it (when its only consumer), replaced by one fused tf_ops layer with
    the same weights."""
    fused_activation = {}
    skip = set()
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            consumers = [n.operation for n in layer._outbound_nodes]
            if len(consumers) == 1 and isinstance(consumers[0], keras.layers.Activation):
                act = consumers[0].get_config()["activation"]
                if act in ("swish", "silu", "relu", "hard_swish", "hard_silu", "sigmoid", "gelu"):
                    fused_activation[layer.name] = act
                    skip.add(consumers[0].name)

    def clone(layer):
        if isinstance(layer, keras.layers.BatchNormalization):
            config = layer.get_config()
            config["activation"] = fused_activation.get(layer.name)
            return tf_ops.layers.BatchNormalization.from_config(config)
        if layer.name in skip:
            return keras.layers.Identity(name=layer.name)
        return layer.__class__.from_config(layer.get_config())

    new = keras.models.clone_model(model, clone_function=clone)
    new.set_weights(model.get_weights())
    return new


def bench_models(budget_s: float) -> list[dict]:
    rows = []
    for name, ctor in (("EfficientNetB0", keras.applications.EfficientNetB0),
                       ("MobileNetV3Small", keras.applications.MobileNetV3Small),
                       ("ResNet50", keras.applications.ResNet50)):
        keras.utils.set_random_seed(0)
        stock = ctor(weights=None, input_shape=(224, 224, 3), classes=10)
        ours = replace_batch_norm(stock)
        x = tf.random.normal([8, 224, 224, 3])
        y = tf.one_hot(np.arange(8) % 10, 10)
        steps = {}
        for label, model in (("stock", stock), ("tf_ops", ours)):
            opt = keras.optimizers.SGD(1e-3)
            opt.build(model.trainable_variables)

            def step(model=model, opt=opt):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(keras.losses.categorical_crossentropy(y, model(x, training=True)))
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply(grads, model.trainable_variables)
                return loss

            steps[label] = tf.function(step)
        t = {k: v.median for k, v in time_interleaved(steps, 3, 12, budget_s).items()}
        rows.append({"model": name, "stock_ms": t["stock"] * 1e3, "tf_ops_ms": t["tf_ops"] * 1e3,
                     "speedup": t["stock"] / t["tf_ops"]})
        print(f"{name:<18} train step stock {t['stock'] * 1e3:8.1f} ms  tf_ops {t['tf_ops'] * 1e3:8.1f} ms"
              f"   {t['stock'] / t['tf_ops']:5.2f}x", flush=True)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget-s", type=float, default=4.0, help="per case, all candidates")
    parser.add_argument("--dtypes", nargs="*", default=["float32", "bfloat16"])
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--models", action="store_true")
    parser.add_argument("--grid", action="store_true",
                        help="the cases of a grid of channels x spatial sizes instead")
    args = parser.parse_args(argv)
    print("BN + activation, training forward + backward (y, dx, dgamma, dbeta), medians")
    bench_layers(list(GRID) if args.grid else args.cases, args.dtypes, args.budget_s)
    if args.models:
        bench_models(4 * args.budget_s)


if __name__ == "__main__":
    main()
