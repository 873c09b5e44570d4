"""tf_ops demo: one line, `tf_ops.patch_keras()`, on a model nobody here wrote.

keras.applications' MobileNetV3Small (random initial weights) learns scikit-learn's
handwritten digits (1,797 8x8 images shipped inside scikit-learn, nothing is
downloaded; scaled up to 64x64 RGB). Two copies start from the same weights and see
the same batches: one is stock Keras, the other trains inside `with
tf_ops.patch_keras():`, which makes Keras's own layers run tf_ops's kernels (here each
BatchNormalization with the activation after it as one op). Their train steps run
interleaved, one of each per round (which goes first alternates), so a slow moment of
a shared machine falls on both; each round's time ratio is one paired sample, and the
demo prints their median and spread.

What makes the comparison trustworthy is shown, not asserted: the first steps' losses
side by side (equal to the digits printed: the same model, the same batches, float32
rounding apart), both loss curves over every step in a picture (`--plot`, default
demo_losses.png), and each copy's accuracy on the held-out test images. Over epochs of
Adam the two curves drift apart by rounding grown step by step, as two stock runs on
two machines do; the test accuracies say whether either learned differently.

Last, the patched model ships as a stock model: its layers are Keras's, so TFLite
converts it with builtin ops only, and LiteRT's interpreter (TensorFlow's where LiteRT
is absent) runs it.

Run with `make demo` (builds the library first), or after `make build`:
  .venv/bin/python examples/demo.py [--epochs 3] [--side 64] [--plot demo_losses.png]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
import warnings

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"  # its own lines only: no TensorFlow log


@contextlib.contextmanager
def _quiet():
    """Silences what the converter prints (the SavedModel it writes on the way, its MLIR
    passes' log, the interpreter's delegate notice; at import, what TensorFlow's C++
    logs before it reads TF_CPP_MIN_LOG_LEVEL) at the file-descriptor level, where
    TensorFlow's C++ writes it."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


with _quiet():
    import numpy as np
    import tensorflow as tf
    import keras
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    import tf_ops

    tf.config.list_logical_devices()  # what TensorFlow logs when it first looks for devices


def load_data(side: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits as side x side RGB images in [0, 255], split 75/25 with every class in both."""
    digits = load_digits()
    images = digits.images / 16.0 * 255.0
    repeat = -(-side // 8)
    images = np.kron(images, np.ones((repeat, repeat)))[:, :side, :side]
    x = np.repeat(images[..., None], 3, axis=-1).astype("float32")
    y = digits.target.astype("int32")
    return train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)


def build_model(side: int) -> keras.Model:
    keras.utils.set_random_seed(0)  # the same initial weights for both copies
    model = keras.applications.MobileNetV3Small(
        weights=None, input_shape=(side, side, 3), classes=10, dropout_rate=0.0)
    # keras.applications' batch norms keep 99.9% of their moving statistics per step:
    # after the demo's 126 steps those are still mostly their start, and both copies
    # predict the test images at chance. 0.9 lets them follow the batches.
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = 0.9
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"])
    return model


def train_interleaved(data, epochs: int, batch: int):
    """Trains the stock and the patched copy on the same batches, one step of each per
    round; returns both models, the per-round time ratios stock / patched (the first
    epoch's rounds excluded: they trace the train steps) and each copy's loss at every
    step."""
    x_train, _, y_train, _ = data
    side = x_train.shape[1]
    stock, patched = build_model(side), build_model(side)
    ratios, losses = [], {"stock": [], "patched": []}
    steps = len(x_train) // batch
    for epoch in range(epochs):
        order = np.random.default_rng(epoch).permutation(len(x_train))
        for i in range(steps):
            xb = x_train[order[i * batch:(i + 1) * batch]]
            yb = y_train[order[i * batch:(i + 1) * batch]]
            seconds = {}
            for name in (("stock", "patched") if i % 2 == 0 else ("patched", "stock")):
                start = time.perf_counter()
                if name == "stock":
                    logs = stock.train_on_batch(xb, yb, return_dict=True)
                else:
                    with tf_ops.patch_keras():  # <- the one line
                        logs = patched.train_on_batch(xb, yb, return_dict=True)
                seconds[name] = time.perf_counter() - start
                losses[name].append(float(logs["loss"]))
            if epoch > 0:
                ratios.append(seconds["stock"] / seconds["patched"])
    return stock, patched, ratios, losses


def plot_losses(losses: dict[str, list[float]], steps_per_epoch: int, path: str) -> None:
    """Both loss curves, step by step, in one picture at `path` (the patched one dashed
    over the stock one: where they are one line, they agree)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(losses["stock"], label="stock Keras", linewidth=2.5, alpha=0.6)
    ax.plot(losses["patched"], "--", label="inside tf_ops.patch_keras()", linewidth=1.2)
    for epoch in range(1, len(losses["stock"]) // steps_per_epoch):
        ax.axvline(epoch * steps_per_epoch, color="grey", linewidth=0.5)
    ax.set_xlabel("train step (grey lines: epochs)")
    ax.set_ylabel("training loss (the batch's)")
    ax.set_title("MobileNetV3Small on digits: the same batches, the same initial weights")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _interpreter(content: bytes):
    """LiteRT's interpreter (ai-edge-litert, what replaces the deprecated
    tf.lite.Interpreter), else TensorFlow's where LiteRT is not installed."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return tf.lite.Interpreter(model_content=content)
    return Interpreter(model_content=content)


def tflite_export(model: keras.Model, x: np.ndarray) -> tuple[int, float, int]:
    """Converts `model` to TFLite with builtin ops only (the patch is not active here:
    the model is Keras's own), runs it on `x` and returns how many of its predicted
    classes are Keras's, the largest |probability difference| from Keras and the file's
    size in bytes."""
    with _quiet():
        converter = tf.lite.TFLiteConverter.from_keras_model(model)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        content = converter.convert()
        interpreter = _interpreter(content)
        (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
        interpreter.resize_tensor_input(inp["index"], x.shape)
        interpreter.allocate_tensors()
        interpreter.set_tensor(inp["index"], x)
        interpreter.invoke()
        probs = interpreter.get_tensor(out["index"])
    expected = model.predict_on_batch(x)
    same = int(np.sum(np.argmax(probs, axis=-1) == np.argmax(expected, axis=-1)))
    return same, float(np.max(np.abs(probs - expected))), len(content)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3, help="epochs (default 3; the first traces)")
    parser.add_argument("--side", type=int, default=64, help="image side (default 64, >= 32)")
    parser.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    parser.add_argument("--train-images", type=int, default=None,
                        help="train on the first N training images only (default: all)")
    parser.add_argument("--plot", default="demo_losses.png",
                        help="where to save both loss curves (default demo_losses.png)")
    args = parser.parse_args(argv)
    if args.epochs < 2 or args.side < 32:
        parser.error("--epochs must be at least 2 (the first traces) and --side at least 32")

    data = load_data(args.side)
    if args.train_images:
        data = [data[0][:args.train_images], data[1], data[2][:args.train_images], data[3]]
    print(f"keras.applications.MobileNetV3Small on scikit-learn's digits at {args.side}x"
          f"{args.side} ({len(data[0])} training images), batch {args.batch}, {args.epochs} "
          f"epochs: stock Keras, and the same inside `with tf_ops.patch_keras():`")
    stock, patched, ratios, losses = train_interleaved(data, args.epochs, args.batch)
    low, median, high = statistics.quantiles(ratios, n=4, method="inclusive")
    print(f"train step, stock time / patched time, {len(ratios)} interleaved rounds "
          f"(first epoch excluded): median {median:.2f}x, interquartile range "
          f"{low:.2f}-{high:.2f}")
    first = "  ".join(f"{a:.4f}|{b:.4f}" for a, b in zip(losses["stock"][:5],
                                                         losses["patched"][:5]))
    print(f"loss at the first 5 steps, stock|patched: {first}")
    steps = len(losses["stock"]) // args.epochs
    plot_losses(losses, steps, args.plot)
    print(f"both loss curves, all {len(losses['stock'])} steps: {args.plot}")
    x_test, y_test = data[1], data[3]
    with tf_ops.patch_keras():  # the patched copy predicts with the kernels too
        predicted = {"patched": patched.predict_on_batch(x_test)}
    predicted["stock"] = stock.predict_on_batch(x_test)
    accuracy = {name: float(np.mean(np.argmax(p, -1) == y_test)) for name, p in predicted.items()}
    print(f"test accuracy ({len(x_test)} held-out images): stock {accuracy['stock']:.3f}, "
          f"patched {accuracy['patched']:.3f}")
    same, gap, size = tflite_export(patched, x_test)
    print(f"the patched model exported to TFLite (builtin ops only, {size:,} bytes) and run "
          f"by LiteRT: the class Keras predicts for {same} of {len(x_test)} test images, "
          f"probabilities within {gap:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
