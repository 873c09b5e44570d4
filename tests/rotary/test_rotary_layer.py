"""`tf_ops.layers.RotaryEmbedding`: Keras's layer harness with keras-hub's expectations
(its layer's outputs as the expected ones), keras-hub's upstream layer tests, configs
both ways, saving, mixed precision against keras-hub's layer under the same policy,
jit_compile, the drop-in in keras-hub's LLaMA (full pass, gradients, cached decoding),
and portable export to SavedModel, TFLite and ONNX (no TfOps> op)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src import testing

import tf_ops
from fused_refs import op_types
from test_rotary import OUT_EPS, ref_rotary
from tf_ops.python.rotary.layers import rotary_kwargs

hub = pytest.importorskip("keras_hub.src.layers.modeling.rotary_embedding")
L = tf_ops.layers


def test_run_layer_test_with_keras_hub_outputs():
    t = testing.TestCase(methodName="run_layer_test")
    rng = np.random.default_rng(1)
    for kwargs, shape in (({"max_wavelength": 1000, "scaling_factor": 2.0, "sequence_axis": 1,
                            "feature_axis": -1}, (2, 4, 6)),
                          ({"max_wavelength": 1000}, (2, 8, 4, 6)),
                          ({"rope_type": "yarn", "scaling_factor": 4.0}, (2, 8, 4, 6)),
                          ({"sequence_axis": -1, "feature_axis": -2}, (2, 6, 5))):
        data = rng.uniform(size=shape).astype("float32")
        t.run_layer_test(L.RotaryEmbedding, init_kwargs=kwargs, input_data=data,
                         expected_output=hub.RotaryEmbedding(**kwargs)(data),
                         expected_num_trainable_weights=0, expected_num_non_trainable_weights=0,
                         expected_num_seed_generators=0, expected_num_losses=0,
                         supports_masking=False)


def test_keras_hub_upstream_layer_tests():
    """keras-hub's rotary_embedding_test.py, on this layer."""
    out = L.RotaryEmbedding()(keras.Input(shape=(None, 32)))
    assert out.shape == (None, None, 32)
    out = L.RotaryEmbedding()(keras.Input(shape=(None, 100, 32)))
    assert out.shape == (None, None, 100, 32)
    model = keras.Sequential([keras.Input(shape=(4, 6)), L.RotaryEmbedding()])
    out = model(np.ones((1, 4, 6), "float32"))
    np.testing.assert_allclose(out[0, 0], np.ones(6), atol=1e-6)
    np.testing.assert_allclose(out[0, 3], [-1.1311, 0.8515, 0.9935, -0.8489, 1.1291, 1.0064],
                               atol=1e-4)
    # start_index: one token at a time gives the whole sequence's values.
    data = np.random.default_rng(2).uniform(size=(2, 3, 4)).astype("float32")
    layer = L.RotaryEmbedding(3)
    full = layer(data)
    steps = [layer(data[:, i:i + 1], start_index=i) for i in range(3)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-6, atol=1e-6)
    # Permuted axes.
    permuted = L.RotaryEmbedding(3, sequence_axis=-1, feature_axis=-2)(np.transpose(data, (0, 2, 1)))
    np.testing.assert_allclose(np.transpose(permuted, (0, 2, 1)), full, rtol=1e-6, atol=1e-6)
    # float16.
    assert L.RotaryEmbedding(dtype="float16")(keras.Input(shape=(100, 32))).dtype == "float16"
    assert L.RotaryEmbedding(dtype="float16")(data).dtype == "float16"


def test_configs_both_ways_and_saving(tmp_path):
    for kwargs in ({}, {"max_wavelength": 500, "scaling_factor": 2.0, "rope_type": "dynamic",
                        "sequence_axis": 2, "feature_axis": -1, "denominator_dim": 12},
                   {"rope_type": "yarn", "scaling_factor": 8.0, "beta_fast": 16.0, "beta_slow": 2.0,
                    "original_max_position_embeddings": 1024, "truncate": False}):
        theirs = hub.RotaryEmbedding(**kwargs)
        ours = L.RotaryEmbedding.from_config(theirs.get_config())
        assert ours.get_config() == theirs.get_config()
        back = hub.RotaryEmbedding.from_config(ours.get_config())
        assert back.get_config() == theirs.get_config()
        x = np.random.default_rng(0).normal(size=(2, 5, 3, 8)).astype("float32")
        np.testing.assert_allclose(ours(x), theirs(x), rtol=1e-5, atol=1e-5)
    model = keras.Sequential([keras.Input((5, 3, 8)), L.RotaryEmbedding(scaling_factor=2.0),
                              keras.layers.Flatten(), keras.layers.Dense(2)])
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.layers[0], L.RotaryEmbedding)
    np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())
    # Bad arguments fail when the layer is made.
    for bad, msg in (({"rope_type": "ntk"}, "rope_type must be"),
                     ({"max_wavelength": 0}, "max_wavelength must be finite and > 0"),
                     ({"scaling_factor": -2.0}, "scaling_factor must be finite and > 0")):
        with pytest.raises(ValueError, match=msg):
            L.RotaryEmbedding(**bad)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_against_keras_hub(policy):
    """16-bit inputs read directly (no Cast of x in the graph), rotated in float32 and
    rounded once: within one rounding of the float64 truth, and of keras-hub's layer
    under the same policy within its own roundings (it rounds cos and sin to the 16-bit
    type and multiplies and adds in it: a few ulps of the largest term)."""
    keras.mixed_precision.set_global_policy(policy)
    try:
        ours, theirs = L.RotaryEmbedding(), hub.RotaryEmbedding()
        x = tf.random.stateless_normal([2, 64, 4, 32], seed=[1, 2])
        fn = tf.function(lambda x: ours(x, start_index=100))
        got = fn(x)
        want = theirs(x, start_index=100)
        dtype = got.dtype
        assert dtype == want.dtype == keras.mixed_precision.global_policy().compute_dtype
        graph = fn.get_concrete_function(x).graph.as_graph_def()
        assert "TfOps>RotaryEmbedding" in op_types(graph)
        x16 = np.asarray(tf.cast(tf.cast(x, dtype), tf.float64))
        truth, theta, scale = ref_rotary(x16, start_index=100)
        eps = OUT_EPS[tf.as_dtype(dtype)]
        ours_err = np.abs(np.asarray(tf.cast(got, tf.float64)) - truth)
        assert np.all(ours_err <= eps * np.abs(truth) + scale * (theta * 2.0**-23 + 2.0**-21))
        hub_err = np.abs(np.asarray(tf.cast(want, tf.float64)) - truth)
        assert np.all(hub_err <= 6 * eps * scale + scale * theta * 2.0**-23)
        # keras-hub's extra roundings make it the less accurate of the two.
        assert ours_err.mean() < hub_err.mean()
        with tf.GradientTape() as tape:
            xv = tf.cast(x, dtype)
            tape.watch(xv)
            loss = tf.reduce_sum(tf.cast(ours(xv), tf.float32) * tf.cast(xv, tf.float32))
        assert tape.gradient(loss, xv).dtype == dtype
    finally:
        keras.mixed_precision.set_global_policy("float32")
    concrete = tf.function(lambda x: ours(x)).get_concrete_function(tf.cast(x, dtype))
    assert not [n for n in concrete.graph.as_graph_def().node if n.op == "Cast"
                and n.input and n.input[0].startswith("x")]


def test_jit_compile_training():
    model = keras.Sequential([keras.Input((6, 8)), keras.layers.Dense(16),
                              keras.layers.Reshape((6, 2, 8)), L.RotaryEmbedding(),
                              keras.layers.Flatten(), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    x = np.random.default_rng(0).normal(size=(32, 6, 8)).astype("float32")
    y = np.random.default_rng(1).normal(size=(32, 1)).astype("float32")
    history = model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


def _llama(keras_hub):
    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=64, num_layers=2, num_query_heads=4, num_key_value_heads=2,
        hidden_dim=32, intermediate_dim=48, max_sequence_length=16,
        rope_frequency_adjustment_factor=8.0, rope_low_freq_factor=1.0,
        rope_high_freq_factor=4.0, rope_pretraining_sequence_length=8)
    return keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=None)


def _swap_rotary(backbone) -> list:
    """Each attention's LlamaRotaryEmbedding computed by tf_ops (an instance's call, as
    tf_ops.patch_keras() will swap the class's); returns the layers."""
    swapped = []
    for block in backbone.transformer_layers:
        layer = block._self_attention_layer.rotary_embedding_layer
        kwargs = rotary_kwargs(layer)
        assert kwargs is not None and kwargs["rope_type"] == "llama3"
        layer.call = (lambda inputs, start_index=0, positions=None, kw=kwargs:
                      tf_ops.rotary_embedding(inputs, start_index, positions, **kw))
        swapped.append(layer)
    return swapped


def test_drop_in_for_keras_hub_llama():
    keras_hub = pytest.importorskip("keras_hub")
    keras.utils.set_random_seed(3)
    lm = _llama(keras_hub)
    tokens = np.random.default_rng(4).integers(0, 64, (2, 10)).astype("int32")
    inputs = {"token_ids": tokens, "padding_mask": np.ones_like(tokens)}

    def forward_and_grads():
        with tf.GradientTape() as tape:
            logits = lm(inputs)
            loss = tf.reduce_mean(logits * logits)
        return [logits] + tape.gradient(loss, lm.trainable_variables)

    def decode():
        hidden, cache = lm._build_cache(tokens[:, :7])
        outs = []
        padded = np.pad(tokens, ((0, 0), (0, 3)))
        cache = tf.concat([cache, tf.zeros_like(cache)[:, :, :, :3]], axis=3)
        for i in range(7, 10):
            logits, _, cache = lm.call_with_cache(padded[:, i:i + 1], cache, tf.constant(i))
            outs.append(logits)
        return outs

    want, want_decode = forward_and_grads(), decode()
    _swap_rotary(lm.backbone)
    got, got_decode = forward_and_grads(), decode()
    for a, b in zip(got + got_decode, want + want_decode):
        np.testing.assert_allclose(tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy(),
                                   rtol=2e-5, atol=2e-6)
    fn = tf.function(lambda: lm(inputs))
    assert "TfOps>RotaryEmbedding" in op_types(fn.get_concrete_function().graph.as_graph_def())


@pytest.mark.slow  # a subprocess runs SavedModel, four TFLite runs and ONNX: ~50 s
def test_portable_export_to_savedmodel_tflite_and_onnx(tmp_path):
    from export_checks import assert_portable_export_runs

    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((8, 8)), keras.layers.Dense(16),
                              keras.layers.Reshape((8, 2, 8)),
                              L.RotaryEmbedding(scaling_factor=2.0),
                              keras.layers.Reshape((8, 16)),
                              L.RotaryEmbedding(rope_type="yarn", scaling_factor=4.0),
                              keras.layers.Flatten(), keras.layers.Dense(2)])
    x = np.random.default_rng(9).normal(size=(16, 8, 8)).astype(np.float32)
    assert_portable_export_runs(model, x, tmp_path, tol=1e-4)
