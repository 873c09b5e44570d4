"""`tf_ops.layers.LayerNormalization` and `tf_ops.layers.RMSNormalization`: Keras's layer
harness beyond Keras's own tests (those: tests/keras/test_keras_upstream.py),
values and gradients against Keras's layers, checkpoints both ways, config,
mixed precision, jit_compile, the residual form, and portable export to SavedModel,
TFLite and ONNX (no TfOps> op)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src import testing

import tf_ops
from fused_refs import op_types

L = tf_ops.layers


# Keras's own test files of LayerNormalization and RMSNormalization run against these
# classes in tests/keras/test_keras_upstream.py.


def test_run_layer_test_beyond_keras_tests():
    """run_layer_test where Keras's tests stop: RMSNormalization over several axes,
    LayerNormalization over a middle axis (a transpose around the op)."""
    t = testing.TestCase(methodName="run_layer_test")
    t.run_layer_test(L.RMSNormalization, init_kwargs={"axis": [-2, -1]}, input_shape=(3, 4, 5),
                     expected_output_shape=(3, 4, 5), expected_num_trainable_weights=1,
                     expected_num_seed_generators=0)
    t.run_layer_test(L.LayerNormalization, init_kwargs={"axis": 1}, input_shape=(3, 4, 5),
                     expected_output_shape=(3, 4, 5), expected_num_trainable_weights=2,
                     expected_num_non_trainable_weights=0, expected_num_seed_generators=0,
                     supports_masking=True)


def test_out_of_range_axis_names_the_shape():
    x = np.zeros((2, 3, 4), "float32")
    with pytest.raises(ValueError, match=r"out of bounds.*\(2, 3, 4\)"):
        L.LayerNormalization(axis=3)(x)
    with pytest.raises(ValueError, match=r"out of bounds.*\(2, 3, 4\)"):
        L.RMSNormalization(axis=-4)(x)


def _values_and_grads(layer, x, residual=None):
    with tf.GradientTape() as tape:
        tape.watch(x)
        if residual is None:
            y = layer(x)
        else:
            h, y = layer(x, residual=residual)
            y = y + 0.5 * tf.cast(h, y.dtype)
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * tf.sin(tf.cast(x, tf.float32)))
    return [y, *tape.gradient(loss, [x, *layer.trainable_variables])]


def test_match_keras_layers_and_share_checkpoints(tmp_path):
    x = tf.random.stateless_normal([6, 3, 8], seed=[1, 2]) * 3 + 1
    configs = [
        (L.LayerNormalization, keras.layers.LayerNormalization, {}),
        (L.LayerNormalization, keras.layers.LayerNormalization, {"axis": [-2, -1], "epsilon": 1e-5}),
        (L.LayerNormalization, keras.layers.LayerNormalization, {"axis": 1}),
        (L.LayerNormalization, keras.layers.LayerNormalization, {"center": False}),
        (L.LayerNormalization, keras.layers.LayerNormalization, {"scale": False}),
        (L.RMSNormalization, keras.layers.RMSNormalization, {}),
        (L.RMSNormalization, keras.layers.RMSNormalization, {"axis": [1, 2]}),
    ]
    for ours_cls, theirs_cls, kwargs in configs:
        ours, theirs = ours_cls(**kwargs), theirs_cls(**kwargs)
        ours.build(x.shape)
        theirs.build(x.shape)
        rng = np.random.default_rng(0)
        theirs.set_weights([rng.uniform(0.5, 1.5, w.shape).astype("float32") for w in ours.get_weights()])
        ours.set_weights(theirs.get_weights())
        assert [w.path.split("/")[-1] for w in ours.weights] == [w.path.split("/")[-1] for w in theirs.weights]
        assert ours.get_config() == {**theirs.get_config(), "name": ours.name}
        for got, want in zip(_values_and_grads(ours, x), _values_and_grads(theirs, x)):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=2e-5, err_msg=str(kwargs))
        # Checkpoints: each way.
        for src, dst_cls in ((ours, theirs_cls), (theirs, ours_cls)):
            path = str(tmp_path / f"ckpt_{id(src)}")
            tf.train.Checkpoint(layer=src).write(path)
            fresh = dst_cls(**kwargs)
            fresh.build(x.shape)
            tf.train.Checkpoint(layer=fresh).read(path).assert_consumed()
            for a, b in zip(fresh.get_weights(), src.get_weights()):
                np.testing.assert_array_equal(a, b)


def test_residual_form():
    x = tf.random.stateless_normal([4, 16], seed=[3, 4])
    r = tf.random.stateless_normal([4, 16], seed=[5, 6])
    for ours, theirs in ((L.LayerNormalization(), keras.layers.LayerNormalization()),
                         (L.RMSNormalization(), keras.layers.RMSNormalization())):
        ours.build(x.shape)
        theirs.build(x.shape)
        h, y = ours(x, residual=r)
        np.testing.assert_array_equal(h.numpy(), (x + r).numpy())
        np.testing.assert_allclose(y.numpy(), theirs(x + r).numpy(), rtol=1e-5, atol=1e-6)
        # Functional API: both outputs are symbolic tensors.
        xi, ri = keras.Input((16,)), keras.Input((16,))
        hs, ys = ours(xi, residual=ri)
        model = keras.Model([xi, ri], [hs, ys])
        got = model([x, r])
        np.testing.assert_allclose(got[1].numpy(), y.numpy(), rtol=1e-6)


def test_save_load_keras_file_and_config(tmp_path):
    model = keras.Sequential([keras.Input((3, 8)), L.LayerNormalization(axis=[-2, -1], epsilon=1e-5),
                              keras.layers.Dense(8), L.RMSNormalization()])
    x = np.random.default_rng(0).normal(size=(5, 3, 8)).astype("float32")
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.layers[0], L.LayerNormalization)
    np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_reads_16_bit_inputs_directly(policy):
    keras.mixed_precision.set_global_policy(policy)
    try:
        ln, rms = L.LayerNormalization(), L.RMSNormalization()
        dtype = keras.mixed_precision.global_policy().compute_dtype
        x = tf.cast(tf.random.stateless_normal([4, 32], seed=[1, 1]), dtype)
        fn = tf.function(lambda x: rms(ln(x)))
        y = fn(x)
        assert y.dtype == dtype and ln.gamma.dtype == "float32"
        ops = op_types(fn.get_concrete_function(x).graph.as_graph_def())
        assert "TfOps>LayerNorm" in ops and "TfOps>RmsNorm" in ops
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(rms(ln(x)), tf.float32))
        grads = tape.gradient(loss, ln.trainable_variables + rms.trainable_variables)
        assert all(g is not None and g.dtype == tf.float32 for g in grads)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    # LayerNormalization's graph has no Cast of x (gamma and beta are read as float32).
    concrete = tf.function(lambda x: ln(x)).get_concrete_function(x)
    casts = [n for n in concrete.graph.as_graph_def().node if n.op == "Cast"]
    assert not casts, [n.name for n in casts]


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_rms_norm_stands_in_for_keras_hub_llama_layer_norm(policy):
    """keras-hub's LLaMA normalises with its own LlamaLayerNorm (x cast to float32,
    mean(x^2), rsqrt, times the float32 scale, cast back once): `tf_ops.rms_norm` with
    the layer's scale and epsilon computes the same, with no Cast in its graph."""
    from keras_hub.src.models.llama.llama_layernorm import LlamaLayerNorm

    keras.mixed_precision.set_global_policy(policy)
    try:
        layer = LlamaLayerNorm(epsilon=1e-5)
        x = tf.cast(tf.random.stateless_normal([4, 7, 96], seed=[2, 3]) * 3, layer.compute_dtype)
        layer.build(x.shape)
        layer.scale.assign(tf.random.stateless_uniform([96], [4, 5], 0.5, 1.5))

        def ours(x):
            return tf_ops.rms_norm(x, layer.scale, epsilon=layer.epsilon)

        graph = tf.function(ours).get_concrete_function(x).graph.as_graph_def()
        assert "Cast" not in op_types(graph) and "TfOps>RmsNorm" in op_types(graph)
        results = []
        for fn in (ours, layer):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = fn(x)
                loss = tf.reduce_sum(tf.cast(y, tf.float32) * tf.sin(tf.cast(x, tf.float32)))
            results.append([y, *tape.gradient(loss, [x, layer.scale])])
        tol = 1e-5 if policy == "float32" else 2.0**-7
        for got, want in zip(*results):
            assert got.dtype == want.dtype
            np.testing.assert_allclose(tf.cast(got, tf.float32).numpy(),
                                       tf.cast(want, tf.float32).numpy(),
                                       rtol=tol, atol=tol * 4)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_jit_compile_train_step_and_portable_graph():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), L.LayerNormalization(),
                              keras.layers.Dense(16), L.RMSNormalization(), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    x = np.random.default_rng(0).normal(size=(32, 8)).astype("float32")
    y = np.random.default_rng(1).normal(size=(32, 1)).astype("float32")
    history = model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    want = model(x)
    with tf_ops.portable():
        concrete = tf.function(lambda x: model(x)).get_concrete_function(tf.constant(x))
    assert not any(t.startswith("TfOps>") for t in op_types(concrete.graph.as_graph_def()))
    np.testing.assert_allclose(concrete(tf.constant(x)).numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # a subprocess runs SavedModel, four TFLite runs and ONNX: ~50 s
def test_portable_export_to_savedmodel_tflite_and_onnx(tmp_path):
    from export_checks import assert_portable_export_runs

    keras.utils.set_random_seed(4)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16),
                              L.LayerNormalization(), keras.layers.Dense(16),
                              L.RMSNormalization(), keras.layers.Dense(2)])
    x = np.random.default_rng(9).normal(size=(32, 8)).astype(np.float32)
    assert_portable_export_runs(model, x, tmp_path, tol=1e-4)
