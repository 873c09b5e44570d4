"""A model with every tf_ops layer and activation function, saved three ways
(`.keras`, `tf.saved_model.save`, `model.export`) and reloaded in a fresh Python
process that imports tf_ops first: same outputs, and gradients flow through it."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
import tensorflow as tf
import keras

import tf_ops
from op_specs import SPECS, function_name, layer_class, make_layer, non_default_attrs
from subprocesses import SCRIPTS, run_python

# Saves a model three ways, reloads it in fresh processes: make test only, not test-quick.
pytestmark = pytest.mark.heavy

FORMATS = ("keras", "saved_model", "export")


def build_model() -> keras.Model:
    """Every layer with non-default arguments, and every function as a Dense activation.
    Random biases make each variable's value unique (the reload matches them by value)."""
    keras.utils.set_random_seed(3)

    def dense(units: int, activation=None) -> keras.layers.Dense:
        return keras.layers.Dense(units, activation=activation, bias_initializer="random_normal")

    layers = [keras.Input((6,))]
    for spec in SPECS:
        layers += [dense(8), make_layer(spec, non_default_attrs(spec))]
    layers += [dense(8, getattr(tf_ops, function_name(spec))) for spec in SPECS]
    return keras.Sequential([*layers, dense(3)])


def reference(model: keras.Model, x: np.ndarray) -> dict:
    inputs = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        outputs = model(inputs)
        loss = tf.reduce_sum(tf.square(outputs))
    grads = tape.gradient(loss, [inputs, *model.trainable_variables])
    return {
        "outputs": outputs.numpy(),
        "input_grad": grads[0].numpy(),
        "variables": [(v.numpy(), g.numpy()) for v, g in zip(model.trainable_variables, grads[1:])],
    }


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Saves the model three ways, reloads all three in ONE fresh process (one
    TensorFlow start-up), and returns the reference and the directory."""
    root = tmp_path_factory.mktemp("saving")
    model = build_model()
    x = np.random.default_rng(0).normal(scale=2.0, size=(5, 6)).astype("float32")
    np.save(root / "inputs.npy", x)
    model.save(root / "model.keras")
    tf.saved_model.save(model, str(root / "saved_model"))
    model.export(str(root / "export"), verbose=False)
    run_python(SCRIPTS / "reload_saved.py", root, timeout=300)
    return reference(model, x), root


def reloaded(root, fmt: str) -> dict:
    error = root / f"{fmt}.error"
    assert not error.exists(), f"reloading the {fmt} format failed:\n{error.read_text()}"
    with np.load(root / f"{fmt}.npz") as data:
        return dict(data)


@pytest.mark.parametrize("fmt", FORMATS)
def test_reload_in_fresh_process_gives_same_outputs(saved, fmt):
    ref, root = saved
    got = reloaded(root, fmt)
    # The same kernels on the same inputs and weights: bit for bit.
    np.testing.assert_array_equal(got["outputs"], ref["outputs"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_gradients_flow_through_reloaded_model(saved, fmt):
    ref, root = saved
    got = reloaded(root, fmt)
    # Through every activation's gradient, back to the inputs.
    assert np.abs(got["input_grad"]).min() > 0
    np.testing.assert_allclose(got["input_grad"], ref["input_grad"], rtol=1e-6, atol=1e-7)
    # And to every trainable variable the reloaded object exposes (matched by value).
    count = sum(key.startswith("grad_") for key in got)
    assert count == len(ref["variables"])
    for i in range(count):
        value, grad = got[f"value_{i}"], got[f"grad_{i}"]
        matches = [g for v, g in ref["variables"] if np.array_equal(v, value)]
        assert len(matches) == 1, f"variable {i} of shape {value.shape} matches {len(matches)}"
        np.testing.assert_allclose(grad, matches[0], rtol=1e-5, atol=1e-7)


def test_saved_files_hold_the_tf_ops_ops_and_names(saved):
    _, root = saved
    # The graphs run the fused ops (not some fallback), so loading needs `import tf_ops`.
    for directory in ("saved_model", "export"):
        graph = (root / directory / "saved_model.pb").read_bytes()
        for op in (spec.name for spec in SPECS):
            assert f"TfOps>{op}".encode() in graph, (directory, op)
    # The Keras config names the layers and functions by their registered names.
    with zipfile.ZipFile(root / "model.keras") as archive:
        config = json.dumps(json.loads(archive.read("config.json")))
    for name in (layer_class(spec).__name__ for spec in SPECS):
        assert f'"registered_name": "tf_ops>{name}"' in config, name
    for name in (function_name(spec) for spec in SPECS):
        assert f'"config": "tf_ops>{name}"' in config, name
