"""keras-hub's decoder masks under `tf_ops.patch_keras()` (issue 45, section 1: "a cheaper
form, e.g. causal plus key lengths, where the patch can prove it equivalent"): in a graph,
the fused op gets ``causal`` and the padding as a ``[batch, 1, 1, S]`` key mask, and no
``[batch, T, S]`` mask feeds it; the results are the dense mask's; masks the patch cannot
prove keep their dense form."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from patch_checks import relative_errors
from tf_ops.python.patch import keras_hub_masks

hub = pytest.importorskip("keras_hub")
B, T = 2, 10


def _backbone(name: str, dtype: str = "float32"):
    keras.config.set_dtype_policy(dtype)
    try:
        keras.utils.set_random_seed(0)
        common = dict(vocabulary_size=64, num_layers=2, hidden_dim=32, intermediate_dim=48)
        if name == "llama":
            return hub.models.LlamaBackbone(num_query_heads=4, num_key_value_heads=2,
                                            **common)
        if name == "gpt2":
            return hub.models.GPT2Backbone(num_heads=4, max_sequence_length=32, dropout=0.0,
                                           **common)
        if name == "gpt_neo_x":
            return hub.models.GPTNeoXBackbone(num_heads=4, max_sequence_length=32,
                                              dropout=0.0, **common)
        raise KeyError(name)
    finally:
        keras.config.set_dtype_policy("float32")


def _inputs(padding_kind: str) -> dict:
    tokens = np.random.default_rng(0).integers(1, 64, (B, T)).astype("int32")
    padding = np.ones((B, T), "int32")
    if padding_kind == "right":
        padding[1, 7:] = 0
    elif padding_kind == "left":  # batch 1's first 3 queries keep no key: dead rows
        padding[1, :3] = 0
    elif padding_kind == "values":  # keras-hub keeps any positive value
        padding[0, ::2] = 2
    return {"token_ids": tf.constant(tokens), "padding_mask": tf.constant(padding)}


def _attention_ops(model, x) -> list:
    graph = tf.function(lambda x: model(x)).get_concrete_function(x).graph
    return [op for op in graph.get_operations() if op.type == "TfOps>Attention"]


def _ancestors(tensor) -> list:
    seen, todo, found = set(), [tensor.op], []
    while todo:
        op = todo.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        found.append(op)
        todo.extend(t.op for t in op.inputs)
    return found


@pytest.mark.parametrize("name", ["llama", "gpt2", "gpt_neo_x"])
def test_decoder_mask_reaches_the_op_as_causal_and_key_padding(name):
    model = _backbone(name)
    with tf_ops.patch_keras():
        ops = _attention_ops(model, _inputs("right"))
    assert len(ops) == 2
    for op in ops:
        assert op.get_attr("causal")
        mask = op.inputs[3]
        assert mask.shape.as_list() == [B, 1, 1, T], mask.shape
        square = [o.name for o in _ancestors(mask)
                  if any(t.shape.rank and t.shape.rank >= 3 and t.shape[-2] == T
                         for t in o.outputs)]
        assert not square, square  # nothing [B, T, S] computes the mask the op reads


def test_without_padding_the_op_is_causal_alone():
    layer = _backbone("llama").transformer_layers[0]
    hidden = tf.random.normal([B, T, 32])
    with tf_ops.patch_keras():
        graph = tf.function(layer).get_concrete_function(hidden).graph
    ops = [op for op in graph.get_operations() if op.type == "TfOps>Attention"]
    assert len(ops) == 1 and ops[0].get_attr("causal")
    assert ops[0].inputs[3].shape.rank == 0  # no mask at all


def _train_step(model, x):
    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            out = model(x)
            # A positive sum (no float32 sum's error either): sum(out * w) with signed w
            # cancelled ~140x at this size, so its relative error was the outputs' error
            # over a small loss, whichever way their rounding happened to fall.
            w = tf.constant(np.random.default_rng(1).uniform(0.5, 1.5, out.shape), tf.float64)
            value = tf.reduce_sum(tf.square(tf.cast(out, tf.float64)) * w)
        return out, value, tape.gradient(value, model.trainable_weights)

    out, value, grads = step(x)
    result = {"output": out.numpy(), "loss": value.numpy()}
    result.update({f"grad {i}": tf.convert_to_tensor(g).numpy()
                   for i, g in enumerate(grads) if g is not None})
    return result


@pytest.mark.parametrize("name", ["llama", "gpt2"])
@pytest.mark.parametrize("padding", ["right", "values"])
def test_graph_train_step_exact_against_float64(name, padding):
    """Stock keras-hub in float64 is the reference; patched float32 (causal + keys) is no
    worse than stock float32."""
    model, model64 = _backbone(name), _backbone(name, "float64")
    for v64, v in zip(model64.variables, model.variables):
        v64.assign(np.asarray(v.numpy()).astype(v64.dtype))
    x = _inputs(padding)
    stock, reference = _train_step(model, x), _train_step(model64, x)
    with tf_ops.patch_keras():
        patched = _train_step(model, x)
    stock_error, patched_error = (relative_errors(r, reference) for r in (stock, patched))
    for kind, error in patched_error.items():
        assert error <= 3 * max(stock_error[kind], stock_error["output"]) + 1e-6, (
            kind, patched_error, stock_error)


def test_dead_rows_as_with_the_dense_mask(monkeypatch):
    """Left padding leaves queries with no key: the op's answer for them (Keras's) is the
    same whether it reads the dense mask or causal + keys."""
    model = _backbone("llama")
    x = _inputs("left")
    with tf_ops.patch_keras():
        fast = _train_step(model, x)
        monkeypatch.setattr(keras_hub_masks, "causal_and_keys", lambda *a: None)
        dense = _train_step(model, x)
    for kind in fast:
        np.testing.assert_allclose(fast[kind], dense[kind], rtol=2e-5, atol=2e-6,
                                   err_msg=kind)


def test_masks_it_cannot_prove_stay_dense():
    """A causal mask the user builds, and keras-hub's causal mask with a cache offset, are
    not marked: the op reads them as they are."""
    q = tf.random.normal([1, 4, 2, 4])
    utils = keras_hub_masks.UTILS

    def user_mask(x):
        causal = tf.linalg.band_part(tf.ones([4, 4]), -1, 0) > 0
        return keras.ops.dot_product_attention(x, x, x, mask=causal[None, None])

    def cached_mask(x):
        import importlib

        mask = importlib.import_module(utils).compute_causal_mask(1, 4, 4, cache_index=2)
        return keras.ops.dot_product_attention(x, x, x, mask=keras.ops.cast(
            keras.ops.expand_dims(mask, 1), "bool"))

    with tf_ops.patch_keras():
        for fn in (user_mask, cached_mask):
            graph = tf.function(fn).get_concrete_function(q).graph
            op, = [o for o in graph.get_operations() if o.type == "TfOps>Attention"]
            assert not op.get_attr("causal") and op.inputs[3].shape.as_list() == [1, 1, 4, 4]
        value = tf.function(cached_mask)(q)
    np.testing.assert_allclose(value.numpy(), cached_mask(q).numpy(), rtol=1e-5, atol=1e-6)


def test_discover_finds_every_module_that_builds_a_causal_mask():
    targets = keras_hub_masks.discover()
    modules = {t.split(":")[0] for t in targets if t.endswith(":compute_causal_mask")}
    for name in ("layers.modeling.transformer_decoder", "models.llama.llama_decoder",
                 "models.gemma3.gemma3_decoder_block", "models.qwen3.qwen3_decoder"):
        assert f"keras_hub.src.{name}" in modules
    with tf_ops.patch_keras():
        from keras_hub.src.models.llama import llama_decoder

        assert hasattr(llama_decoder.compute_causal_mask, "__tf_ops_patch__")
    assert not hasattr(llama_decoder.compute_causal_mask, "__tf_ops_patch__")
