"""tf_ops demo: one small Keras MLP, trained with Keras's activations and with tf_ops layers.

The data are scikit-learn's handwritten digits (1,797 8x8 images, shipped inside
scikit-learn: nothing is downloaded). The model is the same twice, with the same
initial weights and the same batches; only its five hidden activations differ:

  Keras built-in: LeakyReLU(0.2), ELU, Activation("gelu"), Activation("silu"), Activation("mish")
  tf_ops layers:  LeakyReLU(0.2), ELU, GELU,               Swish,              Mish

The two are trained interleaved, one epoch of each per round (which goes first
alternates), so that both see the same machine: a slow moment of a shared machine
falls on both, not on one. The time ratio of each round is one paired sample; the
demo prints their median and spread, and says when the difference is within noise.
It also prints both accuracies and writes a PNG of the training curves.

Last, it ships the tf_ops model the way docs/deploy.md says: converted to TensorFlow
Lite inside `tf_ops.portable()`, so the file holds TFLite's builtin ops only and runs
without tf_ops; LiteRT's interpreter (TensorFlow's where LiteRT is absent) runs it,
and its test accuracy is printed next to Keras's.

Run with `make demo` (builds the library first), or after `make build`:
  .venv/bin/python examples/demo.py --epochs 20 --out build/demo.png
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import tf_ops  # noqa: E402

DEFAULT_OUT = "build/demo.png"  # build/ is ignored by git
KINDS = {"keras": "Keras built-in", "tf_ops": "tf_ops layers"}
# A difference is called real when the rounds favour one variant this consistently: the
# two-sided sign-test p-value of the per-round ratios must be below it.
SIGNIFICANCE = 0.05


@dataclasses.dataclass
class Run:
    """One variant's model and what its training produced."""

    label: str
    model: keras.Model
    history: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    epoch_seconds: list[float] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Per-round time ratios (tf_ops / Keras) and what they say."""

    ratios: list[float]
    median: float
    low: float  # first quartile
    high: float  # third quartile
    faster_rounds: int  # rounds where tf_ops took less time
    p_value: float  # two-sided sign test: are the rounds' signs a coin toss?

    @property
    def within_noise(self) -> bool:
        return not self.p_value < SIGNIFICANCE

    def verdict(self) -> str:
        """One plain sentence.

        Example:
          >>> compare([0.9, 0.92, 0.88, 0.91, 0.93, 0.9, 0.89]).verdict()
          'tf_ops is 10% faster per epoch (7 of 7 rounds, sign test p = 0.016)'
        """
        n = len(self.ratios)
        if n == 0:
            return "no timed rounds (the first epoch traces the train function and is not compared)"
        rounds = f"{self.faster_rounds} of {n} rounds, sign test p = {self.p_value:.2g}"
        if self.within_noise:
            return (f"within noise: tf_ops was faster in {rounds}, which chance alone explains; "
                    "no difference in speed is shown")
        change = abs(1.0 - self.median)
        word = "faster" if self.median < 1.0 else "slower"
        return f"tf_ops is {change:.0%} {word} per epoch ({rounds})"


def sign_test_p(successes: int, n: int) -> float:
    """Two-sided exact binomial p-value of `successes` in `n` fair coin tosses."""
    if n == 0:
        return 1.0
    k = min(successes, n - successes)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2.0 * tail)


def compare(ratios: list[float]) -> Comparison:
    """Summarises per-round time ratios (tf_ops / Keras) of paired, interleaved epochs.

    Example:
      >>> c = compare([1.02, 0.97, 1.01, 0.99, 1.03, 0.98])
      >>> c.median, c.within_noise
      (1.0, True)
    """
    if not ratios:
        return Comparison([], math.nan, math.nan, math.nan, 0, 1.0)
    if len(ratios) == 1:
        low = high = ratios[0]
    else:
        low, _, high = statistics.quantiles(ratios, n=4, method="inclusive")
    faster = sum(r < 1.0 for r in ratios)
    ties = sum(r == 1.0 for r in ratios)
    return Comparison(list(ratios), statistics.median(ratios), low, high, faster,
                      sign_test_p(faster, len(ratios) - ties))


class EpochTimer(keras.callbacks.Callback):
    """Records the wall time of each epoch (training and validation)."""

    def __init__(self, seconds: list[float]) -> None:
        super().__init__()
        self.seconds = seconds
        self._start = 0.0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.seconds.append(time.perf_counter() - self._start)


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits scaled to [0, 1], split 75/25 with every class in both parts."""
    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")
    y = digits.target.astype("int32")
    return train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)


def activations(kind: str) -> list[keras.layers.Layer]:
    """The five hidden activations, as Keras's own layers or as tf_ops layers."""
    if kind == "keras":
        return [
            keras.layers.LeakyReLU(negative_slope=0.2),
            keras.layers.ELU(alpha=1.0),
            keras.layers.Activation("gelu"),  # exact GELU, as tf_ops's default
            keras.layers.Activation("silu"),
            keras.layers.Activation("mish"),
        ]
    return [
        tf_ops.layers.LeakyReLU(negative_slope=0.2),
        tf_ops.layers.ELU(alpha=1.0),
        tf_ops.layers.GELU(),
        tf_ops.layers.Swish(),
        tf_ops.layers.Mish(),
    ]


def build_model(kind: str) -> keras.Model:
    keras.utils.set_random_seed(0)  # same initial weights for both variants
    layers: list[keras.layers.Layer] = [keras.Input((64,))]
    for width, activation in zip((128, 128, 64, 64, 64), activations(kind)):
        layers += [keras.layers.Dense(width), activation]
    layers.append(keras.layers.Dense(10))
    model = keras.Sequential(layers, name=f"mlp_{kind}")
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        # Both variants on the same (graph, non-XLA) path, so the comparison is fair.
        jit_compile=False,
    )
    return model


def train_interleaved(data: tuple, epochs: int, quiet: bool) -> dict[str, Run]:
    """Trains both variants one epoch at a time, alternating which goes first each round.
    Each epoch's batches are a fixed permutation of the training set, the same for both."""
    x_train, x_test, y_train, y_test = data
    runs = {kind: Run(label, build_model(kind)) for kind, label in KINDS.items()}
    for epoch in range(epochs):
        order = list(runs) if epoch % 2 == 0 else list(reversed(runs))
        batches = np.random.default_rng(epoch).permutation(len(x_train))
        for kind in order:
            run = runs[kind]
            history = run.model.fit(
                x_train[batches],
                y_train[batches],
                validation_data=(x_test, y_test),
                initial_epoch=epoch,
                epochs=epoch + 1,
                batch_size=32,
                shuffle=False,
                callbacks=[EpochTimer(run.epoch_seconds)],
                verbose=0,
            )
            for key, values in history.history.items():
                run.history.setdefault(key, []).extend(values)
        if not quiet:
            print(f"epoch {epoch + 1}/{epochs}: " + ", ".join(
                f"{run.label} {run.epoch_seconds[-1]:.2f} s, test accuracy "
                f"{run.history['val_accuracy'][-1]:.4f}" for run in runs.values()), flush=True)
    return runs


def plot(runs: list[Run], out: Path) -> None:
    """Loss and accuracy per epoch, train and test, both variants in one figure."""
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    # The curves nearly coincide: Keras's wide and pale, tf_ops's thin with dots on top.
    styles = ({"color": "tab:blue", "linewidth": 5, "alpha": 0.35},
              {"color": "tab:orange", "linewidth": 1.3, "marker": ".", "markersize": 5})
    for run, style in zip(runs, styles):
        epochs = range(1, len(run.history["loss"]) + 1)
        for prefix, part, dashes in (("", "train", "-"), ("val_", "test", "--")):
            label = f"{run.label} ({part})"
            loss_ax.plot(epochs, run.history[prefix + "loss"], dashes, label=label, **style)
            acc_ax.plot(epochs, run.history[prefix + "accuracy"], dashes, label=label, **style)
    loss_ax.set(title="loss", xlabel="epoch", yscale="log")
    acc_ax.set(title="accuracy", xlabel="epoch")
    for ax in (loss_ax, acc_ax):
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("MLP on scikit-learn digits: Keras activations vs tf_ops layers")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def report(runs: dict[str, Run]) -> Comparison:
    """Prints accuracies, epoch times and the interleaved comparison; returns the latter."""
    print(f"\n{'activations':<16} {'train acc':>9} {'test acc':>9} "
          f"{'1st epoch s':>11} {'median s/epoch':>14}")
    for run in runs.values():
        h, later = run.history, run.epoch_seconds[1:] or run.epoch_seconds
        print(f"{run.label:<16} {h['accuracy'][-1]:>9.4f} {h['val_accuracy'][-1]:>9.4f} "
              f"{run.epoch_seconds[0]:>11.3f} {statistics.median(later):>14.3f}")
    base, ours = runs["keras"], runs["tf_ops"]
    gap = max(abs(a - b) for a, b in zip(base.history["val_loss"], ours.history["val_loss"]))
    print(f"largest difference in test loss between the two runs: {gap:.2e}")
    # Round 1 traces both train functions: compared are the rounds after it.
    result = compare([o / b for o, b in zip(ours.epoch_seconds[1:], base.epoch_seconds[1:])])
    if result.ratios:
        print(f"time per epoch, tf_ops / Keras, interleaved: median {result.median:.2f}, "
              f"interquartile range {result.low:.2f}-{result.high:.2f} "
              f"over {len(result.ratios)} rounds (1st epoch excluded; it traces)")
    print(result.verdict())
    return result


@contextlib.contextmanager
def _quiet():
    """Silences what the converter prints (the SavedModel it writes on the way, its MLIR
    passes' log) at the file-descriptor level, where TensorFlow's C++ writes it."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _interpreter(content: bytes):
    """LiteRT's interpreter (ai-edge-litert, what replaces the deprecated
    tf.lite.Interpreter), else TensorFlow's where LiteRT is not installed."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its deprecation notice
            return tf.lite.Interpreter(model_content=content)
    return Interpreter(model_content=content)


def tflite_accuracy(model: keras.Model, x: np.ndarray, y: np.ndarray) -> tuple[float, float, int]:
    """Converts `model` to TFLite with builtin ops only, under `tf_ops.portable()` (no
    `TfOps>` op reaches the converter), runs the interpreter on `x` and returns its
    accuracy on `y`, the largest |logit difference| from the in-process model (its fused
    kernels) and the file's size in bytes."""
    with tf_ops.portable(), _quiet():
        converter = tf.lite.TFLiteConverter.from_keras_model(model)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]  # no flex, no custom
        content = converter.convert()
    with _quiet():  # the runtime announces its XNNPACK delegate
        interpreter = _interpreter(content)
        (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
        interpreter.resize_tensor_input(inp["index"], x.shape)
        interpreter.allocate_tensors()
        interpreter.set_tensor(inp["index"], x)
        interpreter.invoke()
        logits = interpreter.get_tensor(out["index"])
    accuracy = float(np.mean(np.argmax(logits, axis=-1) == y))
    gap = float(np.max(np.abs(logits - model(x).numpy())))
    return accuracy, gap, len(content)


def report_tflite(runs: dict[str, Run], data: tuple) -> None:
    _, x_test, _, y_test = data
    accuracy, gap, size = tflite_accuracy(runs["tf_ops"].model, x_test, y_test)
    print(f"\nexported under tf_ops.portable() to TFLite (builtin ops only, {size:,} bytes): "
          f"test accuracy {accuracy:.4f} (Keras built-in {runs['keras'].history['val_accuracy'][-1]:.4f}, "
          f"tf_ops layers {runs['tf_ops'].history['val_accuracy'][-1]:.4f}); "
          f"largest logit difference from the fused model {gap:.1e}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20, help="epochs per variant (default 20)")
    parser.add_argument("--out", type=Path, default=Path(DEFAULT_OUT),
                        help=f"PNG of the training curves (default {DEFAULT_OUT})")
    parser.add_argument("--quiet", action="store_true", help="no line per epoch")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")

    print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}, "
          f"tf_ops library {tf_ops.library_path()}")
    data = load_data()
    print(f"digits: {len(data[0])} training and {len(data[1])} test images, 10 classes; "
          f"{args.epochs} epochs of each variant, interleaved")
    runs = train_interleaved(data, args.epochs, args.quiet)
    report(runs)
    report_tflite(runs, data)
    plot(list(runs.values()), args.out)
    print(f"training curves: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
