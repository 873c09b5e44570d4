"""`tf_ops.layers.Softmax`: Keras's layer harness, values and gradients against
keras.layers.Softmax with and without masks, config, mixed precision, jit_compile, and a
model using it (and the fused loss) exported under tf_ops.portable() with no TfOps> op."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src import testing

import tf_ops

RNG = np.random.default_rng(2)


def test_run_layer_test_softmax():
    testing.TestCase(methodName="run_layer_test").run_layer_test(
        tf_ops.layers.Softmax,
        init_kwargs={"axis": -1},
        input_shape=(2, 3, 4),
        expected_output_shape=(2, 3, 4),
        expected_num_trainable_weights=0,
        expected_num_non_trainable_weights=0,
        expected_num_seed_generators=0,
        expected_num_losses=0,
        supports_masking=True,
    )


def test_softmax_layer_matches_keras():
    x = RNG.normal(0, 2, (2, 3, 4, 5)).astype(np.float32)
    masks = [None, RNG.random((2, 1, 4, 5)) < 0.5, RNG.random((5,)) < 0.5,
             (RNG.random((2, 3, 4, 5)) < 0.5).astype(np.float32)]
    for axis in (-1, 1, [2], [1, 2]):
        ours, theirs = tf_ops.layers.Softmax(axis=axis), keras.layers.Softmax(axis=axis)
        assert ours.get_config() == {**theirs.get_config(), "name": ours.name}
        for mask in masks:
            xt = tf.constant(x)
            with tf.GradientTape(persistent=True) as tape:
                tape.watch(xt)
                a, e = ours(xt, mask=mask), theirs(xt, mask=mask)
                w = tf.constant(RNG.normal(size=x.shape), tf.float32)
                la, le = tf.reduce_sum(a * w), tf.reduce_sum(e * w)
            np.testing.assert_allclose(a, e, rtol=2e-6, atol=1e-7, err_msg=f"{axis}")
            np.testing.assert_allclose(tape.gradient(la, xt), tape.gradient(le, xt),
                                       rtol=1e-5, atol=1e-6, err_msg=f"{axis} grad")
    with pytest.raises(ValueError, match="broadcastable"):
        tf_ops.layers.Softmax()(x, mask=np.ones((2, 3, 3, 5), bool))
    # Serialisation through Keras.
    layer = keras.layers.deserialize(keras.layers.serialize(tf_ops.layers.Softmax(axis=1)))
    assert isinstance(layer, tf_ops.layers.Softmax) and layer.axis == 1


def test_mixed_precision_jit_fit_and_portable_export(tmp_path):
    x = RNG.normal(0, 1, (32, 6, 8)).astype(np.float32)
    y = RNG.integers(0, 8, (32, 6))
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        inp = keras.Input((6, 8))
        scores = keras.layers.Dense(8)(inp)
        probs = tf_ops.layers.Softmax()(scores)
        logits = keras.layers.Dense(8, dtype="float32")(probs)
        model = keras.Model(inp, logits)
        assert probs.dtype == "bfloat16"
        for jit in (False, True):
            model.compile("adam", tf_ops.losses.SparseCategoricalCrossentropy(
                from_logits=True, ignore_class=0, label_smoothing=0.1), jit_compile=jit)
            history = model.fit(x, y, epochs=2, batch_size=16, verbose=0)
            assert np.isfinite(history.history["loss"]).all()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    model = keras.Sequential([keras.Input((6, 8)), keras.layers.Dense(8), tf_ops.layers.Softmax()])
    expected = model(x).numpy()
    with tf_ops.portable():
        model.export(str(tmp_path / "export"), verbose=False)
    loaded = tf.saved_model.load(str(tmp_path / "export"))
    ops = {node.op for f in loaded.serve.concrete_functions for node in f.graph.as_graph_def().node}
    ops |= {n.op for f in loaded.serve.concrete_functions
            for fn in f.graph.as_graph_def().library.function for n in fn.node_def}
    assert not [t for t in ops if t.startswith("TfOps>")], ops
    np.testing.assert_allclose(loaded.serve(x), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # a subprocess runs SavedModel, four TFLite runs and ONNX: ~50 s
def test_portable_export_to_savedmodel_tflite_and_onnx(tmp_path):
    """Attention-like scores through a causally masked and a plain tf_ops Softmax, exported
    under tf_ops.portable(): SavedModel, TFLite builtins and ONNX run it without tf_ops."""
    from export_checks import assert_portable_export_runs

    keras.utils.set_random_seed(6)
    inp = keras.Input((6, 8))
    scores = keras.layers.Dense(6)(inp)  # [batch, query, key]
    causal = np.tril(np.ones((1, 6, 6), bool))
    probs = tf_ops.layers.Softmax()(scores, mask=causal)
    # Keras hands the mask on through Dense: the second Softmax (over the queries) has it too.
    mixed = keras.layers.Dense(6)(probs)
    out = keras.layers.Dense(2)(keras.layers.Flatten()(tf_ops.layers.Softmax(axis=1)(mixed)))
    model = keras.Model(inp, out)
    x = RNG.normal(0, 2, (16, 6, 8)).astype(np.float32)
    assert_portable_export_runs(model, x, tmp_path, tol=1e-5)
