"""Reloads, in a fresh process, the model that test_saving.py saved three ways.

Usage: reload_saved.py DIR

DIR holds `inputs.npy` and the model as `model.keras` (Keras format),
`saved_model/` (`tf.saved_model.save`) and `export/` (`model.export`). For each
format this writes `DIR/<format>.npz` with the outputs on the inputs, the
gradient of sum(outputs**2) with respect to the inputs, and, for every variable
the reloaded object exposes, its value (`value_i`) and gradient (`grad_i`); or
`DIR/<format>.error` with the traceback when that format fails.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

import tf_ops  # noqa: F401  first: registers the ops, their gradients and the Keras objects
import keras


def compute(fn: Callable[[tf.Tensor], tf.Tensor], x: np.ndarray, variables: Sequence) -> dict:
    inputs = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        outputs = fn(inputs)
        loss = tf.reduce_sum(tf.square(outputs))
    grads = tape.gradient(loss, [inputs, *variables])
    result = {"outputs": outputs.numpy(), "input_grad": grads[0].numpy()}
    for i, (variable, grad) in enumerate(zip(variables, grads[1:])):
        result[f"value_{i}"] = np.asarray(variable.numpy())
        result[f"grad_{i}"] = np.full(variable.shape, np.nan) if grad is None else grad.numpy()
    return result


def keras_format(path: Path, x: np.ndarray) -> dict:
    model = keras.saving.load_model(path)
    return compute(model, x, model.trainable_variables)


def saved_model_format(path: Path, x: np.ndarray) -> dict:
    loaded = tf.saved_model.load(str(path))  # keep: the signature does not own the variables
    signature = loaded.signatures["serving_default"]
    (input_name,) = signature.structured_input_signature[1]
    (output_name,) = signature.structured_outputs

    def fn(inputs: tf.Tensor) -> tf.Tensor:
        return loaded.signatures["serving_default"](**{input_name: inputs})[output_name]

    return compute(fn, x, signature.trainable_variables)


def export_format(path: Path, x: np.ndarray) -> dict:
    archive = tf.saved_model.load(str(path))
    return compute(archive.serve, x, archive.trainable_variables)


FORMATS = {
    "keras": (keras_format, "model.keras"),
    "saved_model": (saved_model_format, "saved_model"),
    "export": (export_format, "export"),
}


def main(directory: str) -> int:
    root = Path(directory)
    x = np.load(root / "inputs.npy")
    for name, (load, filename) in FORMATS.items():
        try:
            np.savez(root / f"{name}.npz", **load(root / filename, x))
        except Exception:  # recorded for the test to show; the other formats still run
            (root / f"{name}.error").write_text(traceback.format_exc())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
