"""Portable export of a small CNN with fused BatchNormalization + activation layers
(channels-last and channels-first, every kind of activation the CNNs use): under
`tf_ops.portable()` it exports to a SavedModel, TFLite (builtin ops) and ONNX that run in
a process without tf_ops and hold no TfOps> op (export_checks.py, test_export.py's helpers), matching the
fused model. Slow (a subprocess with the converters), as test_export.py."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import tf_ops
from export_checks import assert_portable_export_runs

pytestmark = pytest.mark.slow


def test_portable_batch_norm_model_runs_everywhere_without_tf_ops(tmp_path):
    keras.utils.set_random_seed(7)
    inp = keras.Input((6, 6, 3))
    h = keras.layers.Conv2D(8, 3, padding="same", use_bias=False)(inp)
    h = tf_ops.layers.BatchNormalization(activation="swish")(h)
    h = keras.layers.Conv2D(8, 1, use_bias=False)(h)
    h = tf_ops.layers.BatchNormalization(activation="relu")(h)
    h = keras.layers.Permute((3, 1, 2))(h)
    h = tf_ops.layers.BatchNormalization(axis=1, activation="hard_swish", center=False)(h)
    h = keras.layers.GlobalAveragePooling2D(data_format="channels_first")(h)
    out = keras.layers.Dense(2)(h)
    model = keras.Model(inp, out)
    rng = np.random.default_rng(0)
    for layer in model.layers:
        if isinstance(layer, tf_ops.layers.BatchNormalization):
            c = layer.moving_mean.shape[0]
            layer.moving_mean.assign(rng.standard_normal(c).astype("float32"))
            layer.moving_variance.assign((1 + rng.random(c)).astype("float32"))
    x = rng.standard_normal((16, 6, 6, 3)).astype(np.float32)
    assert_portable_export_runs(model, x, tmp_path, tol=1e-4)
