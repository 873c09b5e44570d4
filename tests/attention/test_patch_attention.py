"""The attention family under `tf_ops.patch_keras()` (issue 45, section 2):
``keras.ops.dot_product_attention`` runs ``TfOps>Attention`` with every argument Keras
takes (float32 against Keras's own float64 computation no worse than stock's), including
``flash_attention=True`` and ``keras.config.enable_flash_attention()``, which stop
raising; ``MultiHeadAttention`` and keras-hub's attention layers (LLaMA, Gemma 3 with its
soft cap and sliding window, Mistral's sliding window, Qwen 3) call it; attention dropout
keeps Keras's and keras-hub's own path; the summary says which."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from patch_checks import relative_errors

RNG = np.random.default_rng(0)


def _keras_dpa():
    from keras.src.backend.tensorflow import nn as keras_nn

    return keras_nn


def _graph_ops(fn, *args) -> set[str]:
    return {op.type for op in tf.function(fn).get_concrete_function(*args).graph
            .get_operations()}


@pytest.mark.parametrize("kwargs", [
    {}, dict(is_causal=True), dict(mask="padding"), dict(mask="dead", is_causal=True),
    dict(bias=True), dict(scale=0.3), dict(heads=(4, 2)),
])
def test_dot_product_attention_matches_keras_float64(kwargs):
    kwargs = dict(kwargs)
    heads, kv_heads = kwargs.pop("heads", (2, 2))
    b, t, s, d = 2, 9, 11, 8
    q = RNG.normal(size=(b, t, heads, d))
    k = RNG.normal(size=(b, s, kv_heads, d))
    v = RNG.normal(size=(b, s, kv_heads, d))
    mask = kwargs.pop("mask", None)
    if mask is not None:
        mask = RNG.random((b, 1, t, s)) < 0.7
        if kwargs.get("is_causal"):
            mask[:, :, 0, :] = False  # a dead row
    if kwargs.pop("bias", False):
        kwargs["bias"] = RNG.normal(size=(1, heads, t, s))
    nn = _keras_dpa()

    def run(dtype, patched):
        args = [tf.constant(x, dtype) for x in (q, k, v)]
        kw = dict(kwargs, mask=None if mask is None else tf.constant(mask))
        if "bias" in kw:
            kw["bias"] = tf.constant(kw["bias"], dtype)
        if patched:
            with tf_ops.patch_keras(only=("attention",)):
                return keras.ops.dot_product_attention(*args, **kw).numpy()
        return nn.dot_product_attention(*args, **kw).numpy()

    truth = run(tf.float64, False)
    stock_err = np.abs(run(tf.float32, False) - truth).max()
    patched_err = np.abs(run(tf.float32, True) - truth).max()
    assert patched_err <= 3 * stock_err + 1e-6, (patched_err, stock_err)
    np.testing.assert_allclose(run(tf.float64, True), truth, atol=1e-12)


def test_flash_attention_flag_and_config_run_the_fused_op():
    q = tf.random.normal([1, 8, 2, 4])
    with pytest.raises(ValueError, match="Flash attention is not supported"):
        keras.ops.dot_product_attention(q, q, q, flash_attention=True)
    with tf_ops.patch_keras(only=("attention",)):
        out = keras.ops.dot_product_attention(q, q, q, flash_attention=True)
        ops = _graph_ops(lambda x: keras.ops.dot_product_attention(
            x, x, x, flash_attention=True), q)
        keras.config.enable_flash_attention()
        try:
            mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
            y = mha(tf.random.normal([1, 8, 6]), tf.random.normal([1, 8, 6]))
        finally:
            keras.config.disable_flash_attention()
    want = _keras_dpa().dot_product_attention(q, q, q)
    np.testing.assert_allclose(out.numpy(), want.numpy(), atol=1e-6)
    assert "TfOps>Attention" in ops
    assert y.shape == (1, 8, 6)


def test_under_jit_on_the_cpu_the_fused_op_stays():
    """Unlike the families `xla_cpu.LEFT` names, attention does not step aside under
    jit_compile on the CPU: a patched MultiHeadAttention train step compiles to the op's
    custom calls (no [batch, heads, T, S] softmax), with stock's values; the report
    leaves attention out of what runs Keras's code there."""
    from tf_ops.python.attention import functions as attention_functions
    from tf_ops.python.patch import xla_cpu

    assert not xla_cpu.steps_aside(("attention",))
    mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    x = tf.constant(RNG.normal(size=(2, 8, 6)), tf.float32)
    mask = tf.constant(np.tril(np.ones((8, 8), bool))[None].repeat(2, 0))
    mha(x, x, attention_mask=mask)

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = mha(x, x, attention_mask=mask)
            loss = tf.reduce_sum(y * y)
        return [y, *tape.gradient(loss, [x, *mha.trainable_weights])]

    def run():
        fn = tf.function(step, jit_compile=True)
        return [t.numpy() for t in fn(x)], fn.experimental_get_compiler_ir(x)(stage="hlo")

    expected, stock_hlo = run()
    with tf_ops.patch_keras(only=("attention",)) as patch:
        got, hlo = run()
        text = str(patch.report())
    assert "custom-call" not in stock_hlo
    if {"Attention", "AttentionGrad"} <= attention_functions.XLA_LOWERED:
        assert 'custom_call_target="tf_ops_attention_forward"' in hlo
        assert 'custom_call_target="tf_ops_attention_backward"' in hlo
    else:  # TensorFlow < 2.20 builds no lowerings: the op's composite, not Keras's code
        assert "custom-call" not in hlo
    assert "Keras's own code for" not in text, text
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_soft_cap_and_multi_query():
    """Keras's TF backend refuses attn_logits_soft_cap and fails on one KV head; the
    patched function computes both (against the float64 reference)."""
    from test_attention import ref_attention

    q = RNG.normal(size=(1, 6, 4, 8))
    k = RNG.normal(size=(1, 6, 1, 8))
    v = RNG.normal(size=(1, 6, 1, 8))
    with tf_ops.patch_keras(only=("attention",)):
        out = keras.ops.dot_product_attention(
            tf.constant(q), tf.constant(k), tf.constant(v), is_causal=True,
            attn_logits_soft_cap=5.0)
    want = ref_attention(q, k, v, causal=True, softcap=5.0)
    np.testing.assert_allclose(out.numpy(), want, atol=1e-12)


def test_mask_computed_in_the_graph_is_fused():
    q = tf.random.normal([1, 4, 2, 4])
    mask = tf.ones([1, 1, 4, 4])
    with tf_ops.patch_keras(only=("attention",)):
        ops = _graph_ops(lambda x: keras.ops.dot_product_attention(
            x, x, x, mask=tf.cast(mask, tf.float32) > 0.5), q)
    assert "TfOps>Attention" in ops


def _step(model, x) -> dict:
    """patch_checks.step for a backbone: the hidden states weighted by fixed numbers, and
    the gradients of the weights that reach them (an untied reverse embedding does not)."""
    with tf.GradientTape() as tape:
        out = model(x)
        w = np.random.default_rng(1).normal(size=out.shape)
        value = tf.reduce_sum(tf.cast(out, tf.float64) * w)
    grads = tape.gradient(value, model.trainable_weights)
    result = {"output": out.numpy(), "loss": value.numpy()}
    for i, g in enumerate(grads):
        if g is not None:
            result[f"grad {i}"] = tf.convert_to_tensor(g).numpy()
    return result


def _hub_backbone(name: str):
    hub = pytest.importorskip("keras_hub")
    common = dict(vocabulary_size=64, num_layers=2, hidden_dim=32, intermediate_dim=48)
    if name == "llama":
        return hub.models.LlamaBackbone(num_query_heads=4, num_key_value_heads=2, **common)
    if name == "mistral":
        return hub.models.MistralBackbone(num_query_heads=4, num_key_value_heads=2,
                                          sliding_window=5, **common)
    if name == "qwen3":
        return hub.models.Qwen3Backbone(num_query_heads=4, num_key_value_heads=2,
                                        head_dim=8, layer_norm_epsilon=1e-6, **common)
    if name == "gemma3":
        return hub.models.Gemma3Backbone(
            num_query_heads=4, num_key_value_heads=2, head_dim=8,
            attention_logit_soft_cap=20.0, use_sliding_window_attention=True,
            sliding_window_size=4, image_size=16, **common)
    raise KeyError(name)


@pytest.mark.parametrize("name", ["llama", "mistral", "qwen3", "gemma3"])
def test_keras_hub_attention_runs_fused_and_exact(name):
    keras.utils.set_random_seed(0)
    model = _hub_backbone(name)
    tokens = RNG.integers(1, 64, (2, 10))
    padding = np.ones((2, 10), bool)
    padding[1, 7:] = False
    x = {"token_ids": tokens, "padding_mask": padding}
    keras.config.set_dtype_policy("float64")
    try:
        model64 = _hub_backbone(name)
    finally:
        keras.config.set_dtype_policy("float32")
    for v64, v in zip(model64.variables, model.variables):
        v64.assign(np.asarray(v.numpy()).astype(v64.dtype))
    stock = _step(model, x)
    with tf_ops.patch_keras():
        patched = _step(model, x)
    reference = _step(model64, x)
    stock_error, patched_error = relative_errors(stock, reference), relative_errors(patched,
                                                                                   reference)
    for kind, error in patched_error.items():
        assert error <= 3 * max(stock_error[kind], stock_error["output"]) + 1e-6, (
            kind, patched_error, stock_error)

    @tf.function
    def forward(x):
        return model(x)

    with tf_ops.patch_keras():
        ops = {op.type for op in forward.get_concrete_function(
            tf.nest.map_structure(tf.convert_to_tensor, x)).graph.get_operations()}
        summary = tf_ops.patch_summary(model)
    assert "TfOps>Attention" in ops, sorted(o for o in ops if o.startswith("TfOps"))
    assert any("flash attention" in r.detail for r in summary.fused), str(summary)


def test_attention_dropout_keeps_keras_hub_path():
    hub = pytest.importorskip("keras_hub")
    keras.utils.set_random_seed(0)
    model = hub.models.LlamaBackbone(vocabulary_size=64, num_layers=1, num_query_heads=2,
                                     num_key_value_heads=2, hidden_dim=16,
                                     intermediate_dim=24, dropout=0.5)
    x = {"token_ids": tf.constant([[1, 2, 3, 4]]),
         "padding_mask": tf.constant([[True] * 4])}

    @tf.function
    def forward(x):
        return model(x, training=True)

    with tf_ops.patch_keras():
        ops = {op.type for op in forward.get_concrete_function(x).graph.get_operations()}
        summary = tf_ops.patch_summary(model)
    assert "TfOps>Attention" not in ops
    assert any("attention dropout" in r.detail for r in summary.left), str(summary)
