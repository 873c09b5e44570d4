"""keras-hub's LlamaCausalLM trained by fit under MirroredStrategy over two logical CPUs,
stock and under `tf_ops.patch_keras(only=("lm_head",))` (the head and its loss by
head_cross_entropy, scaled by the replicas as Keras's losses are).

Usage: mirrored_causal_lm_fit.py OUT_JSON

Splitting the CPU into logical devices must happen before TensorFlow initialises its
devices, hence a script of its own. Writes both runs' losses and the largest relative
difference of the weights after them.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import keras_hub  # noqa: E402

import tf_ops  # noqa: E402


def run(patched: bool) -> tuple[list[float], list[np.ndarray], int]:
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        keras.utils.set_random_seed(2)
        backbone = keras_hub.models.LlamaBackbone(
            vocabulary_size=97, num_layers=1, num_query_heads=2, num_key_value_heads=1,
            hidden_dim=16, intermediate_dim=24, max_sequence_length=16)
        lm = keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=None)
        patch = tf_ops.patch_keras(only=("lm_head",)) if patched else None
        lm.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=False)
    tokens = np.random.default_rng(7).integers(1, 97, (8, 9)).astype("int32")
    mask = np.ones_like(tokens)
    mask[1, 6:] = mask[2, 4:] = 0
    labels = np.where(mask, np.roll(tokens, -1, axis=1), 0).astype("int32")
    history = lm.fit({"token_ids": tokens, "padding_mask": mask}, labels, sample_weight=mask,
                     batch_size=8, epochs=2, shuffle=False, verbose=0)
    if patch is not None:
        patch.undo()
    return (history.history["loss"], [v.numpy() for v in lm.trainable_variables],
            strategy.num_replicas_in_sync)


stock_loss, stock_weights, replicas = run(False)
patched_loss, patched_weights, _ = run(True)
difference = max(float(np.max(np.abs(a - b)) / np.max(np.abs(a)))
                 for a, b in zip(stock_weights, patched_weights))
with open(sys.argv[1], "w") as f:
    json.dump({"replicas": replicas, "stock_loss": stock_loss, "patched_loss": patched_loss,
               "max_weight_difference": difference}, f)
