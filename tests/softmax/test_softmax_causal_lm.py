"""`tf_ops.LinearCrossEntropyCausalLM` and `tf_ops.head_cross_entropy` on a keras-hub
backbone with random weights: the loss and every weight's gradient equal keras-hub's
tied head (``token_embedding(h, reverse=True)``) + Keras's SparseCategoricalCrossentropy,
with and without ignore_class; model.fit trains it; its config round-trips."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_ops

keras_hub = pytest.importorskip("keras_hub")
RNG = np.random.default_rng(5)


def _backbone(**kw):
    return keras_hub.models.GPT2Backbone(vocabulary_size=80, num_layers=1, num_heads=2,
                                         hidden_dim=16, intermediate_dim=32,
                                         max_sequence_length=12, **kw)


def _data(batch=3, length=10, vocab=80):
    ids = RNG.integers(0, vocab, (batch, length + 1))
    mask = np.ones((batch, length), bool)
    mask[1, 6:] = False
    x = {"token_ids": ids[:, :-1], "padding_mask": mask}
    return x, ids[:, 1:], mask.astype(np.float32)


@pytest.mark.parametrize("ignore_class", [None, 3])
def test_loss_and_gradients_match_keras_hub_head(ignore_class):
    lm = tf_ops.LinearCrossEntropyCausalLM(_backbone(), ignore_class=ignore_class,
                                           chunk_size=7)
    x, y, w = _data()
    y[0, :4] = 3
    keras_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                            ignore_class=ignore_class)

    @tf.function
    def both():
        with tf.GradientTape(persistent=True) as tape:
            h = lm(x)
            ours = lm.compute_loss(x, y, h, w)
            theirs = keras_loss(y, lm.backbone.token_embedding(h, reverse=True), w)
        weights = lm.trainable_variables
        return ours, theirs, tape.gradient(ours, weights), tape.gradient(theirs, weights)

    ours, theirs, g_ours, g_theirs = both()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    assert len(g_ours) == len(g_theirs) > 5
    for a, e in zip(g_ours, g_theirs):
        np.testing.assert_allclose(tf.convert_to_tensor(a), tf.convert_to_tensor(e),
                                   rtol=2e-4, atol=1e-6)


def test_fit_and_config_round_trip():
    lm = tf_ops.LinearCrossEntropyCausalLM(_backbone(), label_smoothing=0.1)
    x, y, w = _data(batch=4)
    lm.compile(keras.optimizers.Adam(1e-2), jit_compile=False)
    before = lm.evaluate(x, y, sample_weight=w, verbose=0)
    history = lm.fit(x, y, sample_weight=w, epochs=3, batch_size=4, verbose=0)
    assert history.history["loss"][-1] < before
    again = tf_ops.LinearCrossEntropyCausalLM.from_config(lm.get_config())
    assert again.label_smoothing == 0.1 and again.head == "token_embedding"
    assert lm.logits(lm(x)).shape == (4, 10, 80)
    with pytest.raises(ValueError, match="no attribute"):
        tf_ops.LinearCrossEntropyCausalLM(lm.backbone, head="lm_head")
    with pytest.raises(ValueError, match="Embedding"):
        tf_ops.head_cross_entropy(keras.layers.ReLU(), tf.ones([2, 16]), [0, 1])
