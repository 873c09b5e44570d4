"""`tf_ops.layers.LayerNormalization` and `tf_ops.layers.RMSNormalization`: Keras's
layer harness with the expectations of Keras's own tests, Keras's upstream tests'
values, values and gradients against Keras's layers, checkpoints both ways, config,
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


def _harness():
    return testing.TestCase(methodName="run_layer_test")


def test_run_layer_test_with_keras_expectations():
    t = _harness()
    common = dict(expected_num_non_trainable_weights=0, expected_num_seed_generators=0,
                  supports_masking=True)
    for kwargs, shape, trainable, losses in [
        ({"gamma_regularizer": keras.regularizers.L2(0.01),
          "beta_regularizer": keras.regularizers.L2(0.01)}, (3, 4, 2), 2, 2),
        ({"gamma_initializer": "ones", "beta_initializer": "ones"}, (3, 4, 2), 2, 0),
        ({"scale": False, "center": False}, (3, 3), 0, 0),
        ({"rms_scaling": True}, (3, 3), 1, 0),
        ({"axis": (-3, -2, -1)}, (2, 8, 8, 3), 2, 0),
        ({}, (1, 0, 10), 2, 0),
    ]:
        t.run_layer_test(L.LayerNormalization, init_kwargs=kwargs, input_shape=shape,
                         expected_output_shape=shape, expected_num_trainable_weights=trainable,
                         expected_num_losses=losses, **common)
    for kwargs in ({}, {"axis": -1}):
        t.run_layer_test(L.RMSNormalization, init_kwargs=kwargs, input_shape=(4, 2),
                         expected_output_shape=(4, 2), expected_num_trainable_weights=1,
                         expected_num_seed_generators=0)


def test_keras_upstream_values():
    """The values of Keras's own layer_normalization_test / rms_normalization_test."""
    out = L.LayerNormalization(dtype="float32", beta_initializer="ones",
                               gamma_initializer="ones")(np.arange(5).astype("float32")[None])
    np.testing.assert_allclose(out, [[-0.41386, 0.29307, 1.0, 1.70693, 2.41386]], rtol=1e-5)
    out = L.LayerNormalization(dtype="float32", rms_scaling=True,
                               gamma_initializer="ones")(np.arange(5).astype("float32")[None])
    np.testing.assert_allclose(out, [[0.0, 0.70693, 1.41386, 2.12079, 2.82772]], rtol=1e-5)
    out = L.RMSNormalization()(np.arange(10).astype("float32")[None])
    np.testing.assert_allclose(out, [[0.0, 0.18731716, 0.37463433, 0.5619515, 0.74926865,
                                      0.9365858, 1.123903, 1.3112202, 1.4985373, 1.6858544]],
                               rtol=1e-5)
    x = np.random.default_rng(1).normal(5.0, 10.0, (1000, 2, 2, 2)).astype("float32")
    layer = L.LayerNormalization(dtype="float32")
    out = (layer(x) - layer.beta) / layer.gamma
    np.testing.assert_allclose(np.mean(out), 0.0, atol=1e-1)
    np.testing.assert_allclose(np.std(out), 1.0, atol=1e-1)
    x = np.random.default_rng(2).normal(size=(2, 3, 4)).astype("float32")
    for cls in (L.LayerNormalization, L.RMSNormalization):
        np.testing.assert_allclose(cls(axis=[-2, -1])(x), cls(axis=[-1, -2])(x), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="Expected an int or a list/tuple of ints"):
        L.LayerNormalization(axis={"axis": -1})
    with pytest.raises(ValueError, match="out of bounds"):
        L.LayerNormalization(axis=3)(x)


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
    from test_export import assert_portable_export_runs

    keras.utils.set_random_seed(4)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16),
                              L.LayerNormalization(), keras.layers.Dense(16),
                              L.RMSNormalization(), keras.layers.Dense(2)])
    x = np.random.default_rng(9).normal(size=(32, 8)).astype(np.float32)
    assert_portable_export_runs(model, x, tmp_path, tol=1e-4)
