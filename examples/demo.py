"""tf_ops demo: one small Keras MLP, trained with Keras's activations and with tf_ops layers.

The data are scikit-learn's handwritten digits (1,797 8x8 images, shipped inside
scikit-learn: nothing is downloaded). The model is the same twice, with the same
initial weights and batches; only its five hidden activations differ:

  Keras built-in: LeakyReLU(0.2), ELU, Activation("gelu"), Activation("silu"), Activation("mish")
  tf_ops layers:  LeakyReLU(0.2), ELU, GELU,               Swish,              Mish

It prints the accuracy and the time per epoch of both and writes a PNG of the
training curves.

Run with `make demo` (builds the library first), or after `make build`:
  PYTHONPATH=. .venv/bin/python examples/demo.py --epochs 20 --out build/demo.png
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
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


@dataclasses.dataclass
class Run:
    """What one training run produced."""

    label: str
    history: dict[str, list[float]]
    epoch_seconds: list[float]

    @property
    def steady_epoch_seconds(self) -> float:
        """Median epoch time after the first (which also traces the train function)."""
        rest = self.epoch_seconds[1:] or self.epoch_seconds
        return statistics.median(rest)


class EpochTimer(keras.callbacks.Callback):
    """Records the wall time of each epoch (training and validation)."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: list[float] = []
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


def train(kind: str, label: str, data: tuple, epochs: int, quiet: bool) -> Run:
    x_train, x_test, y_train, y_test = data
    model = build_model(kind)
    timer = EpochTimer()
    if not quiet:
        print(f"\n== {label} ==", flush=True)
    history = model.fit(
        x_train,
        y_train,
        validation_data=(x_test, y_test),
        epochs=epochs,
        batch_size=32,
        shuffle=True,
        callbacks=[timer],
        # Keras's progress bar on a terminal, one line per epoch in a log.
        verbose=0 if quiet else (1 if sys.stdout.isatty() else 2),
    )
    return Run(label, history.history, timer.seconds)


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


def report(runs: list[Run]) -> None:
    print(f"\n{'activations':<16} {'train acc':>9} {'test acc':>9} "
          f"{'1st epoch s':>11} {'s/epoch':>8}")
    for run in runs:
        h = run.history
        print(f"{run.label:<16} {h['accuracy'][-1]:>9.4f} {h['val_accuracy'][-1]:>9.4f} "
              f"{run.epoch_seconds[0]:>11.3f} {run.steady_epoch_seconds:>8.3f}")
    base, ours = runs
    gap = max(abs(a - b) for a, b in zip(base.history["val_loss"], ours.history["val_loss"]))
    print(f"largest difference in test loss between the two runs: {gap:.2e}")
    print(f"time per epoch, tf_ops / Keras: {ours.steady_epoch_seconds / base.steady_epoch_seconds:.2f}"
          " (1st epoch excluded; it traces the train function)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20, help="epochs per variant (default 20)")
    parser.add_argument("--out", type=Path, default=Path(DEFAULT_OUT),
                        help=f"PNG of the training curves (default {DEFAULT_OUT})")
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")

    print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}, "
          f"tf_ops library {tf_ops.library_path()}")
    data = load_data()
    print(f"digits: {len(data[0])} training and {len(data[1])} test images, 10 classes")
    runs = [
        train("keras", "Keras built-in", data, args.epochs, args.quiet),
        train("tf_ops", "tf_ops layers", data, args.epochs, args.quiet),
    ]
    report(runs)
    plot(runs, args.out)
    print(f"training curves: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
