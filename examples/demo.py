"""tf_ops demo: the fused activations from a plain TF script and from a Keras model.

Run with `make demo` (it builds the library first).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

import tf_ops


def tf_script() -> None:
    """Values and gradients next to TensorFlow's own ops."""
    x = tf.constant([-3.0, -1.0, -0.1, 0.0, 0.1, 1.0, 3.0])
    print("x                         ", x.numpy())
    print("tf_ops.leaky_relu(x, 0.2) ", tf_ops.leaky_relu(x, alpha=0.2).numpy())
    print("tf.nn.leaky_relu(x, 0.2)  ", tf.nn.leaky_relu(x, alpha=0.2).numpy())
    print("tf_ops.elu(x)             ", tf_ops.elu(x).numpy())
    print("tf.nn.elu(x)              ", tf.nn.elu(x).numpy())
    print("tf_ops.gelu(x)            ", tf_ops.gelu(x).numpy())
    print("tf.nn.gelu(x)             ", tf.nn.gelu(x).numpy())
    print("tf_ops.swish(x)           ", tf_ops.swish(x).numpy())
    print("tf.nn.silu(x)             ", tf.nn.silu(x).numpy())
    print("tf_ops.mish(x)            ", tf_ops.mish(x).numpy())

    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = tf_ops.elu(x)
        dy = inner.gradient(y, x)
    print("d elu / dx                ", dy.numpy())
    print("d2 elu / dx2              ", outer.gradient(dy, x).numpy())

    @tf.function
    def half_precision(v: tf.Tensor) -> tf.Tensor:
        return tf_ops.leaky_relu(tf.cast(v, tf.float16), alpha=0.1)

    print("leaky_relu in float16 (tf.function)", half_precision(x).numpy())


def keras_model() -> None:
    """A small classifier whose hidden activations are tf_ops ops."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(2048, 16)).astype("float32")
    labels = (features[:, :4].sum(axis=1) > 0).astype("int32")

    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(16,)),
            tf.keras.layers.Dense(32),
            tf.keras.layers.Lambda(lambda t: tf_ops.elu(t)),
            tf.keras.layers.Dense(32),
            tf.keras.layers.Lambda(lambda t: tf_ops.gelu(t)),
            tf.keras.layers.Dense(32),
            tf.keras.layers.Lambda(lambda t: tf_ops.mish(t)),
            tf.keras.layers.Dense(2),
        ]
    )
    model.compile(
        optimizer=tf.keras.optimizers.Adam(0.01),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    history = model.fit(features, labels, epochs=5, batch_size=128, verbose=0)
    for epoch, (loss, acc) in enumerate(
        zip(history.history["loss"], history.history["accuracy"]), start=1
    ):
        print(f"epoch {epoch}: loss {loss:.4f}  accuracy {acc:.3f}")


if __name__ == "__main__":
    print(f"TensorFlow {tf.__version__}, tf_ops library {tf_ops.library_path()}\n")
    tf_script()
    print("\nKeras model with tf_ops activations:")
    keras_model()
