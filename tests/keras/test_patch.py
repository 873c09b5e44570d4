"""`tf_ops.patch_keras()` on small models: every entry of the patch table runs tf_ops's
op and matches stock Keras (values, gradients, moving statistics) to float32 rounding;
an activation layer after BatchNormalization or Dense is fused into it only where that
is exact; undo, nesting and family selection; the report and the per-model summary;
.keras files both ways (saved while patched: a stock file; a stock file loaded while
patched: runs fused); jit_compile and mixed precision. The keras.applications and
keras-hub models are in test_patch_models.py."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from tf_ops.python.patch import FAMILIES, keras_layers, state, xla_cpu
from tf_ops.python.patch.table import ENTRIES
from patch_checks import assert_close, fused_op_types, restore, snapshot, stock_and_patched

RNG = np.random.default_rng(3)


def _images(shape=(4, 6, 6, 3)):
    return RNG.normal(0, 1, shape).astype("float32")


def _conv_bn(activation_layer, bn_kwargs=None, conv_activation=None):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6, 6, 3))
    x = keras.layers.Conv2D(5, 3, use_bias=False, activation=conv_activation,
                            name="conv")(inputs)
    x = keras.layers.BatchNormalization(name="bn", **(bn_kwargs or {}))(x)
    x = activation_layer(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(3)(x))


# --- the table and its undo --------------------------------------------------------------

def _targets() -> list[str]:
    """Every attribute the table replaces: an entry's target, or what a discovering
    entry finds (keras-hub's norm classes: imported first, as the patch imports it)."""
    if importlib.util.find_spec("keras_hub") is not None:
        importlib.import_module("keras_hub")
    return [t for e in ENTRIES if e.replacement
            for t in (e.discover() if e.discover else (e.target,))]


def test_families_and_undo_restore_keras():
    before = {t: state.resolve_target(t) for t in _targets()}
    originals = {t: (o, a, o.__dict__.get(a)) for t, (o, a) in before.items()}
    outer = tf_ops.patch_keras()
    inner = tf_ops.patch_keras(only=("norm",))
    assert keras.layers.LayerNormalization.call.__tf_ops_patch__
    outer.undo()  # out of order: the norm family stays patched for `inner`
    assert getattr(keras.layers.LayerNormalization.call, "__tf_ops_patch__", None)
    assert not hasattr(keras.layers.Dense.call, "__tf_ops_patch__")
    outer.undo()  # twice: nothing
    inner.undo()
    assert not state.active_families()
    for target, (owner, attribute, raw) in originals.items():
        assert owner.__dict__.get(attribute) is raw, target  # put back, or still inherited
    with tf_ops.patch_keras(only="softmax", exclude=()) as patch:
        assert patch.families == ("softmax",) and patch.active
    assert not patch.active and not state.active_families()
    with pytest.raises(ValueError, match="unknown families \\['pooling'\\]"):
        tf_ops.patch_keras(only=("pooling",))



def test_reentering_reuses_replacements_until_keras_changes():
    # The benchmarks enter the patch at every step: its wrappers are built once, and
    # built again only where the attribute no longer holds what they replaced.
    with tf_ops.patch_keras():
        first = keras.layers.LayerNormalization.call
    with tf_ops.patch_keras():
        assert keras.layers.LayerNormalization.call is first
    stock = keras.layers.LayerNormalization.__dict__["call"]

    def someone_elses(self, *args, **kwargs):
        return stock(self, *args, **kwargs)

    keras.layers.LayerNormalization.call = someone_elses
    try:
        with tf_ops.patch_keras():
            rebuilt = keras.layers.LayerNormalization.call
            assert rebuilt is not first and rebuilt.__tf_ops_patch__
        assert keras.layers.LayerNormalization.__dict__["call"] is someone_elses
    finally:
        keras.layers.LayerNormalization.call = stock

def test_report_says_what_was_patched_and_what_was_left(capsys):
    with tf_ops.patch_keras(exclude=("loss",), report=True) as patch:
        printed = capsys.readouterr().out
        report = patch.report()
    assert printed.strip() == str(report)
    rows = {r.entry.target: r for r in report.rows}
    assert rows.keys() == {e.target for e in ENTRIES}
    for entry in ENTRIES:
        row = rows[entry.target]
        if entry.pending:
            assert not row.patched and row.why.startswith("not patched yet: ")
        elif "loss" in entry.families:
            assert not row.patched and row.why == "its family is not selected"
        else:
            assert row.patched and row.why == entry.does, entry.target
    assert "left     keras sparse categorical cross-entropy" in printed
    assert set(FAMILIES) == {f for e in ENTRIES for f in e.families}


# --- activations, Dense -----------------------------------------------------------------

def test_activations_by_name_function_and_layer():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((7,))
    x = keras.layers.Dense(8, use_bias=False, activation="gelu")(inputs)  # no bias: gelu alone
    x = keras.layers.Activation("silu")(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Dense(8)(x)
    x = keras.layers.LeakyReLU(negative_slope=0.1)(x)
    x = keras.layers.ELU(alpha=0.5)(keras.layers.Dense(8)(x))
    x = keras.layers.Activation(keras.activations.mish)(x)
    x = keras.layers.Lambda(lambda t: keras.ops.gelu(t, approximate=True))(x)
    x = keras.layers.Activation("hard_silu")(keras.layers.Dense(8)(x))
    x = keras.layers.Activation(keras.activations.celu)(x)
    x = keras.layers.Activation("hard_sigmoid")(keras.layers.Dense(8)(x))
    x = keras.layers.Lambda(lambda t: keras.ops.hard_sigmoid(3.0 * t - 1.5))(x)
    model = keras.Model(inputs, x)
    data = RNG.normal(0, 2, (6, 7)).astype("float32")
    assert_close(*stock_and_patched(model, data, only=("activation",)))
    ops = fused_op_types(model, data, only=("activation",))
    # keras.ops.hard_sigmoid alone (Keras's backend function, patched) runs it too.
    gate = keras.Sequential([keras.Input((7,)), keras.layers.Dense(7),
                             keras.layers.Lambda(keras.ops.hard_sigmoid)])
    assert "TfOps>HardSigmoidGrad" in fused_op_types(gate, data, only=("activation",))
    for op in ("Gelu", "Swish", "LeakyRelu", "Elu", "Mish", "HardSwish", "Celu", "HardSigmoid"):
        assert f"TfOps>{op}" in ops and f"TfOps>{op}Grad" in ops, (op, ops)
    # The plain ReLU stays TensorFlow's (its gradient reads the output: less memory), a
    # Dense's with no bias too (the summary says so, not "tf_ops's kernel").
    relu_only = keras.Sequential([keras.Input((7,)), keras.layers.ReLU(),
                                  keras.layers.Activation("relu"),
                                  keras.layers.Dense(7, use_bias=False, activation="relu")])
    assert not fused_op_types(relu_only, data, only=("activation",))
    with tf_ops.patch_keras():
        left = [r.detail for r in tf_ops.patch_summary(relu_only).left]
    assert len(left) == 3 and all(d.startswith("TensorFlow's Relu") for d in left), left


def test_keras_hub_quick_gelu_runs_swish():
    """CLIP's ``quick_gelu`` (x * sigmoid(1.702 x)) is swish with beta 1.702: its
    Activation layer, inside CLIP's subclassed encoder layer, runs TfOps>Swish, with
    stock's values; the summary says so."""
    pytest.importorskip("keras_hub")
    from keras_hub.src.models.clip.clip_layers import quick_gelu

    keras.utils.set_random_seed(0)
    inputs = keras.Input((7,))
    hidden = keras.layers.Dense(8, use_bias=False, name="no_bias")(inputs)  # for gradients
    model = keras.Model(inputs, keras.layers.Activation(quick_gelu, name="act")(hidden))
    data = RNG.normal(0, 3, (6, 7)).astype("float32")
    assert_close(*stock_and_patched(model, data, only=("activation",)))
    ops = fused_op_types(model, data, only=("activation",))
    assert "TfOps>Swish" in ops and "TfOps>SwishGrad" in ops, ops
    with tf_ops.patch_keras(only=("activation",)):
        fused = {r.layers: r.detail for r in tf_ops.patch_summary(model).fused}
    assert fused.get("act") == "tf_ops swish", fused
    # Keras's own activations keep their path and their report: ReLU stays TensorFlow's.
    relu = keras.Sequential([keras.Input((7,)), keras.layers.Activation("relu")])
    assert not fused_op_types(relu, data, only=("activation",))


@pytest.mark.parametrize("activation", ["gelu", "relu", keras.activations.swish, "tanh",
                                        "relu6", "selu", None])
def test_dense_fuses_bias_and_activation(activation):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5, 7)), keras.layers.Dense(6, activation=activation)])
    data = RNG.normal(0, 1, (3, 5, 7)).astype("float32")
    assert_close(*stock_and_patched(model, data, only=("dense",)))
    ops = fused_op_types(model, data)
    fused = activation not in ("selu", None)  # tf_ops has no SELU kernel
    assert any(op.startswith("TfOps>Bias") for op in ops) == fused, ops


def test_dense_then_activation_layer_is_one_op():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((7,))
    x = keras.layers.Dense(8, name="fc")(inputs)
    x = keras.layers.Activation("gelu", name="act")(x)
    model = keras.Model(inputs, keras.layers.Dense(2)(x))
    data = RNG.normal(0, 1, (4, 7)).astype("float32")
    assert_close(*stock_and_patched(model, data))
    ops = fused_op_types(model, data)
    assert {"TfOps>BiasGelu", "TfOps>BiasGeluGrad"} <= ops and "TfOps>Gelu" not in ops
    rows = {r.layers: r.detail for r in tf_ops.patch_summary(model).fused}
    assert rows["fc + act"] == "bias + gelu in one op"


# --- BatchNormalization and the activation after it ---------------------------------------

@pytest.mark.parametrize("activation", [
    keras.layers.Activation("swish"), keras.layers.ReLU(), keras.layers.Activation("hard_swish"),
    keras.layers.LeakyReLU(negative_slope=0.3), keras.layers.Activation("linear")])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_and_activation_fused(activation, training):
    # The convolution has an activation of its own, so the batch norm is not folded into
    # it at inference (test_conv_batch_norm_folded_at_inference): the fused ops run.
    model = _conv_bn(activation, conv_activation="tanh")
    data = _images()
    assert_close(*stock_and_patched(model, data, training=training))
    ops = fused_op_types(model, data, training)
    op = "TfOps>BatchNormTraining" if training else "TfOps>BatchNormInference"
    assert op in ops and op + "Grad" in ops
    # The activation runs inside the batch-norm op: no separate activation op.
    assert not ops - {op, op + "Grad"}, ops


def test_batch_norm_frozen_and_moving_statistics():
    model = _conv_bn(keras.layers.Activation("swish"), {"momentum": 0.5})
    model.get_layer("bn").trainable = False  # Keras: inference-mode statistics, even training
    assert_close(*stock_and_patched(model, _images(), training=True))
    model.get_layer("bn").trainable = True
    stock, patched = stock_and_patched(model, _images(), training=True)
    assert_close(stock, patched)
    moved = [k for k in stock if k.startswith("state") and "moving" in k]
    assert len(moved) == 2  # the moving mean and variance were compared after the update


def test_pairs_only_where_exact():
    """No fusion where the batch norm's output is needed as it is: a model output, a
    second consumer, a shared layer; a feature extractor on the same layers gets the
    batch norm's own output."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6, 6, 3))
    x = keras.layers.Conv2D(4, 3)(inputs)
    bn = keras.layers.BatchNormalization(name="bn")
    y = bn(x)
    act = keras.layers.Activation("swish", name="act")(y)
    z = keras.layers.BatchNormalization(name="bn2")(act)
    both = keras.layers.Add()([keras.layers.Activation("relu", name="relu2")(z), z])  # z: 2 uses
    model = keras.Model(inputs, both)
    features = keras.Model(inputs, y)  # the first batch norm's output itself
    data = _images()
    assert_close(*stock_and_patched(model, data))
    assert_close(*stock_and_patched(features, data))
    with tf_ops.patch_keras():
        pairs = {r.layers for r in tf_ops.patch_summary(model).fused}
        assert "bn + act" in pairs and not any("+" in p and "relu2" in p for p in pairs)
        # (The convolution + batch norm fold stays: the batch norm's output is exact.)
        assert not any("act" in r.layers for r in tf_ops.patch_summary(features).fused)
        shared = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3)])
        layer = shared.layers[0]
        twice = keras.Sequential([keras.Input((3,)), layer, keras.layers.Activation("gelu"),
                                  layer])
        assert not any("+" in r.layers for r in tf_ops.patch_summary(twice).fused)


# --- a batch norm folded into the convolution before it (inference) ----------------------

def _conv_bn_block(conv, tail, shape=(4, 7, 7, 3), frozen=False):
    """conv -> BatchNormalization (random moving statistics) -> `tail` (layers, or "add":
    ResNet's block end, the batch norm's output added to the input's projection)."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape[1:])
    x = conv(inputs)
    bn = keras.layers.BatchNormalization(name="bn", epsilon=1e-3)
    x = bn(x)
    if tail == "add":
        x = keras.layers.Add()([x, keras.layers.Conv2D(x.shape[-1], 1, padding="same",
                                                       strides=conv.strides)(inputs)])
        x = keras.layers.Activation("relu")(x)
    else:
        for layer in tail:
            x = layer(x)
    x = keras.layers.Flatten()(x)
    model = keras.Model(inputs, keras.layers.Dense(3)(x))
    rng = np.random.default_rng(5)
    channels = bn.moving_mean.shape[0]
    bn.moving_mean.assign(rng.normal(0, 0.5, channels).astype("float32"))
    bn.moving_variance.assign(rng.uniform(0.2, 2.0, channels).astype("float32"))
    bn.gamma.assign(rng.uniform(0.5, 1.5, channels).astype("float32"))
    bn.beta.assign(rng.normal(0, 0.3, channels).astype("float32"))
    bn.trainable = not frozen
    return model


FOLDED_CONVS = {
    "conv2d": lambda: keras.layers.Conv2D(6, 3, padding="same", name="conv"),
    "conv2d no bias, strided": lambda: keras.layers.Conv2D(4, 3, strides=2, padding="same",
                                                           use_bias=False, name="conv"),
    "conv2d groups": lambda: keras.layers.Conv2D(6, 1, groups=3, name="conv"),
    "depthwise": lambda: keras.layers.DepthwiseConv2D(3, depth_multiplier=2, padding="same",
                                                      name="conv"),
}


@pytest.mark.parametrize("conv", list(FOLDED_CONVS))
@pytest.mark.parametrize("tail", ["relu", "swish", "none", "add"])
def test_conv_batch_norm_folded_at_inference(conv, tail):
    """Inference: the batch norm (and the activation after it) is the convolution's
    kernel and bias: no batch-norm op, the same outputs and gradients as Keras's;
    training (batch statistics) runs the fused batch-norm op instead."""
    layers = {"relu": [keras.layers.ReLU(name="act")],
              "swish": [keras.layers.Activation("swish", name="act")], "none": [],
              "add": "add"}[tail]
    model = _conv_bn_block(FOLDED_CONVS[conv](), layers)
    data = _images((4, 7, 7, 3))
    assert_close(*stock_and_patched(model, data, training=False))
    ops = fused_op_types(model, data, training=False)
    assert not any("BatchNorm" in op for op in ops), ops
    # ("add": ResNet's block end, whose Add and ReLU are one op, its gradient ReLU's.)
    assert ops == {"swish": {"TfOps>BiasSwish", "TfOps>BiasSwishGrad"},
                   "add": {"TfOps>AddLeakyRelu", "TfOps>LeakyReluGrad"}}.get(tail, set())
    assert_close(*stock_and_patched(model, data, training=True))
    assert "TfOps>BatchNormTraining" in fused_op_types(model, data, training=True)
    with tf_ops.patch_keras():
        rows = {r.layers: r.detail for r in tf_ops.patch_summary(model).fused}
    act = {"relu": "relu", "swish": "swish"}.get(tail, "linear")
    assert rows["conv + bn"] == ("batch norm folded into the convolution with its moving "
                                 f"statistics (then bias + {act} in one op)"), rows


@pytest.mark.parametrize("conv, shape", [
    (lambda: keras.layers.Conv3D(4, 2, name="conv"), (2, 4, 5, 5, 3)),
    (lambda: keras.layers.DepthwiseConv1D(3, depth_multiplier=3, name="conv"), (3, 9, 2)),
], ids=["conv3d", "depthwise1d"])
def test_conv_batch_norm_folded_at_other_ranks(conv, shape):
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape[1:])
    x = keras.layers.BatchNormalization(name="bn")(conv()(inputs))
    x = keras.layers.Activation("gelu", name="act")(x)
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(x)))
    data = RNG.normal(0, 1, shape).astype("float32")
    assert_close(*stock_and_patched(model, data, training=False))
    assert fused_op_types(model, data, training=False) == {"TfOps>BiasGelu",
                                                           "TfOps>BiasGeluGrad"}


def test_conv_batch_norm_folded_when_frozen_in_training():
    """A frozen batch norm (trainable=False) uses its moving statistics in training too
    (Keras's fine-tuning): folded there, with the convolution's gradients Keras's."""
    model = _conv_bn_block(FOLDED_CONVS["conv2d"](), [keras.layers.ReLU()], frozen=True)
    data = _images((4, 7, 7, 3))
    assert_close(*stock_and_patched(model, data, training=True))
    assert not any("BatchNorm" in op for op in fused_op_types(model, data, training=True))


def test_conv_batch_norm_fold_in_predict_and_a_compiled_model():
    """model.predict (Keras's predict function, training=False): the fold's outputs."""
    model = _conv_bn_block(FOLDED_CONVS["depthwise"](), [keras.layers.Activation("swish")])
    data = _images((8, 7, 7, 3))
    stock = model.predict(data, verbose=0)
    with tf_ops.patch_keras():
        patched_model = keras.models.clone_model(model)
        patched_model.set_weights(model.get_weights())
        patched = patched_model.predict(data, verbose=0)
        called = patched_model(data)  # no training argument: inference
    np.testing.assert_allclose(patched, stock, rtol=2e-5, atol=2e-6 * np.abs(stock).max())
    np.testing.assert_allclose(called, stock, rtol=2e-5, atol=2e-6 * np.abs(stock).max())


def test_conv_batch_norm_not_folded_where_inexact():
    """Not folded: the convolution's output needed as it is (a second consumer, a model
    output), a convolution with its own activation, another channel axis, mixed
    precision (Keras normalises in float32 there), a shared convolution; the outputs
    are Keras's in each case."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6, 6, 3))
    conv = keras.layers.Conv2D(4, 3, name="twice_used")
    z = conv(inputs)
    both = keras.layers.Add()([keras.layers.BatchNormalization(name="bn1")(z), z])
    y = keras.layers.Conv2D(4, 1, activation="relu", name="own_act")(both)
    y = keras.layers.BatchNormalization(name="bn2")(y)
    y = keras.layers.Conv2D(4, 1, name="other_axis")(y)
    y = keras.layers.BatchNormalization(axis=1, name="bn3")(y)
    model = keras.Model(inputs, y)
    features = keras.Model(inputs, keras.layers.Concatenate()(
        [z, keras.layers.BatchNormalization(name="bn4")(z)]))
    data = _images()
    assert_close(*stock_and_patched(model, data, training=False))
    assert_close(*stock_and_patched(features, data, training=False))
    with tf_ops.patch_keras():
        for m in (model, features):
            assert not [r for r in tf_ops.patch_summary(m).fused if "folded" in r.detail]
    keras.config.set_dtype_policy("mixed_float16")
    try:
        half = _conv_bn_block(FOLDED_CONVS["conv2d"](), [keras.layers.ReLU()])
    finally:
        keras.config.set_dtype_policy("float32")
    with tf_ops.patch_keras():
        assert not [r for r in tf_ops.patch_summary(half).fused if "folded" in r.detail]
    assert "TfOps>BatchNormInference" in fused_op_types(half, _images((4, 7, 7, 3)), False)


# --- norms, softmax, attention, loss ----------------------------------------------------

def test_layer_and_rms_norm():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((5, 16))
    x = keras.layers.LayerNormalization()(inputs)
    x = keras.layers.Dense(16)(x)
    x = keras.layers.LayerNormalization(axis=[1, 2], center=False, epsilon=1e-5)(x)
    x = keras.layers.RMSNormalization()(x)
    left = keras.layers.LayerNormalization(rms_scaling=True, name="left")(x)
    model = keras.Model(inputs, left)
    data = RNG.normal(1, 2, (3, 5, 16)).astype("float32")
    assert_close(*stock_and_patched(model, data, only=("norm",)))
    ops = fused_op_types(model, data)
    assert {"TfOps>LayerNorm", "TfOps>LayerNormGrad", "TfOps>RmsNorm", "TfOps>RmsNormGrad"} <= ops
    left_rows = {r.layers: r.detail for r in tf_ops.patch_summary(model).left}
    assert left_rows["left"] == "rms_scaling=True (Keras's deprecated variance scaling)"


def test_softmax_layer_with_masks():
    keras.utils.set_random_seed(0)
    inputs, mask = keras.Input((4, 6)), keras.Input((4, 6), dtype="bool")
    probs = keras.layers.Softmax()(keras.layers.Dense(6)(inputs), mask=mask)
    model = keras.Model([inputs, mask], probs)
    data = RNG.normal(0, 2, (3, 4, 6)).astype("float32")
    kept = RNG.random((3, 4, 6)) < 0.6
    kept[0, 1] = False  # a fully masked row: zeros, as Keras's layer gives
    assert_close(*stock_and_patched(model, [data, kept], only=("softmax",)))
    assert "TfOps>ScaledMaskedSoftmax" in fused_op_types(model, [data, kept])


@pytest.mark.parametrize("dropout", [0.0, 0.5])
@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_attention(dropout, causal):
    """Without dropout Keras runs ops.dot_product_attention (the fused attention), with
    it the Softmax layer (the fused masked softmax); a query whose keys are all masked
    gets Keras's uniform weights."""
    keras.utils.set_random_seed(0)
    q, v = keras.Input((5, 8)), keras.Input((7, 8))
    mask = keras.Input((5, 7), dtype="bool")
    mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, dropout=dropout)
    model = keras.Model([q, v, mask], mha(q, v, attention_mask=mask, use_causal_mask=causal))
    kept = RNG.random((2, 5, 7)) < 0.7
    kept[1, 2] = False
    data = [RNG.normal(0, 1, (2, 5, 8)).astype("float32"),
            RNG.normal(0, 1, (2, 7, 8)).astype("float32"), kept]
    assert_close(*stock_and_patched(model, data, only=("softmax", "attention")))
    fused = "TfOps>ScaledMaskedSoftmax" if dropout else "TfOps>Attention"
    assert fused in fused_op_types(model, data)


def test_sparse_cross_entropy_from_logits_and_probabilities():
    keras.utils.set_random_seed(0)
    logits = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5)])
    probs = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, activation="softmax")])
    data = RNG.normal(0, 1, (8, 6)).astype("float32")
    labels = RNG.integers(0, 5, (8, 1))
    labels[3] = -1
    for model, loss in ((logits, keras.losses.SparseCategoricalCrossentropy(from_logits=True)),
                        (logits, keras.losses.SparseCategoricalCrossentropy(
                            from_logits=True, ignore_class=-1)),
                        (probs, keras.losses.SparseCategoricalCrossentropy())):
        y = labels if loss.fn.__name__ and getattr(loss, "_fn_kwargs", {}).get(
            "ignore_class") is not None else np.maximum(labels, 0)
        assert_close(*stock_and_patched(model, data, y, loss, only=("loss", "softmax")))

    @tf.function
    def loss_graph(x):
        return keras.losses.sparse_categorical_crossentropy(np.maximum(labels, 0), probs(x))

    with tf_ops.patch_keras(only=("loss", "softmax")):
        ops = {op.type for op in loss_graph.get_concrete_function(data).graph.get_operations()}
    assert "TfOps>SparseSoftmaxCrossEntropy" in ops and "SparseSoftmaxCrossEntropyWithLogits" not in ops


# --- keras-hub's own layers ---------------------------------------------------------------

def test_keras_hub_rms_norms():
    hub = pytest.importorskip("keras_hub")
    from keras_hub.src.models.gemma.rms_normalization import RMSNormalization as GemmaNorm
    from keras_hub.src.models.llama.llama_layernorm import LlamaLayerNorm
    from keras_hub.src.models.qwen3.qwen3_layernorm import Qwen3LayerNorm

    assert hub
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4, 16))
    x = LlamaLayerNorm(epsilon=1e-5)(inputs)
    x = GemmaNorm()(keras.layers.Dense(16)(x))
    x = Qwen3LayerNorm()(keras.layers.Dense(16)(x))
    model = keras.Model(inputs, x)
    model.layers[3].scale.assign(RNG.normal(0, 0.3, 16))  # Gemma's 1 + scale, not 1
    data = RNG.normal(0, 2, (3, 4, 16)).astype("float32")
    assert_close(*stock_and_patched(model, data, only=("norm",)))
    assert {"TfOps>RmsNorm", "TfOps>RmsNormGrad"} <= fused_op_types(model, data)



def _rotary_model(layers, shape):
    """Dense -> reshape to [B, S, heads, D] -> each rotary layer in turn -> flatten."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape[1:2] + (shape[2] * shape[3],))
    x = keras.layers.Reshape(shape[1:])(keras.layers.Dense(shape[2] * shape[3])(inputs))
    for layer in layers:
        x = layer(x)
    return keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Flatten()(x)))


def test_keras_hub_rotary_embeddings():
    pytest.importorskip("keras_hub")
    from keras_hub.src.layers.modeling.rotary_embedding import RotaryEmbedding
    from keras_hub.src.models.llama.llama_rotary_embedding import LlamaRotaryEmbedding
    from keras_hub.src.models.phi3.phi3_rotary_embedding import Phi3SuScaledRotaryEmbedding

    shape = (2, 6, 2, 8)
    covered = [RotaryEmbedding(100, scaling_factor=2.0), RotaryEmbedding(rope_type="yarn",
                                                                         scaling_factor=4.0),
               RotaryEmbedding(sequence_axis=-3, feature_axis=3, rope_type="dynamic",
                               scaling_factor=3.0),
               LlamaRotaryEmbedding(500, frequency_adjustment_factor=8.0, low_freq_factor=1.0,
                                    high_freq_factor=4.0, pretraining_sequence_length=4),
               LlamaRotaryEmbedding(50)]
    data = RNG.normal(0, 1, (shape[0], shape[1], shape[2] * shape[3])).astype("float32")
    model = _rotary_model(covered, shape)
    assert_close(*stock_and_patched(model, data, only=("rotary",)))
    assert {"TfOps>RotaryEmbedding", "TfOps>RotaryEmbeddingGrad"} <= fused_op_types(model, data)
    details = [r.detail for r in tf_ops.patch_summary(model).fused]
    assert details.count("TfOps>RotaryEmbedding (one op forward, one backward)") == 5

    # keras-hub's call arguments, same signature: a start index (a tensor, as in cached
    # decoding) and positions, [S] or [B, S].
    x = RNG.normal(0, 1, shape).astype("float32")
    calls = [{}, {"start_index": 7}, {"start_index": tf.constant(3)},
             {"positions": np.arange(5, 11)},
             {"positions": np.stack([np.arange(6), np.arange(6) * 2 + 1])}]
    stock = [[layer(x, **k).numpy() for k in calls] for layer in covered]
    with tf_ops.patch_keras(only=("rotary",)):
        patched = [[layer(x, **k).numpy() for k in calls] for layer in covered]
        ops = fused_op_types(covered[0], x)
    assert "TfOps>RotaryEmbedding" in ops
    for want, got in zip(stock, patched):
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)

    # What the op does not compute runs keras-hub's call: Llama's frequencies with YaRN,
    # Phi-3's own, inputs of another dtype than the layer's, an odd feature size (keras-hub's
    # error).
    left = [LlamaRotaryEmbedding(rope_type="yarn", position_scaling_factor=2.0),
            Phi3SuScaledRotaryEmbedding(np.ones(4), np.ones(4) * 2, max_sequence_length=64,
                                        pretraining_sequence_length=16)]
    model = _rotary_model(left, shape)
    assert_close(*stock_and_patched(model, data, only=("rotary",)))
    assert "TfOps>RotaryEmbedding" not in fused_op_types(model, data, only=("rotary",))
    with tf_ops.patch_keras(only=("rotary",)):
        reasons = [r.detail for r in tf_ops.patch_summary(model).left]
        # float64 inputs of a float32 layer reach the call without autocast: keras-hub's
        # call, and its error.
        with pytest.raises(tf.errors.InvalidArgumentError, match="expected to be a double"):
            RotaryEmbedding(autocast=False)(x.astype("float64"))
        with pytest.raises(ValueError, match="Rotary dimension must be even"):
            covered[0](np.ones((1, 2, 5), "float32"))
    assert any("rope_type='yarn'" in r for r in reasons), reasons
    assert "Phi3SuScaledRotaryEmbedding computes frequencies of its own" in reasons


def _llama_lm(tie: bool, **kwargs):
    import keras_hub

    keras.utils.set_random_seed(2)
    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=97, num_layers=1, num_query_heads=2, num_key_value_heads=1,
        hidden_dim=16, intermediate_dim=24, max_sequence_length=16, tie_word_embeddings=tie)
    return keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=None, **kwargs)


def _lm_data():
    tokens = np.random.default_rng(7).integers(1, 97, (3, 9)).astype("int32")
    mask = np.ones_like(tokens)
    mask[1, 6:] = mask[2, 4:] = 0  # padding: weight 0, as keras-hub's preprocessors give it
    labels = np.where(mask, np.roll(tokens, -1, axis=1), 0).astype("int32")
    return {"token_ids": tokens, "padding_mask": mask}, labels, mask


def _fit_step(lm, patched: bool, jit: bool = False, **compile_kwargs) -> dict[str, np.ndarray]:
    """One `train_on_batch` (SGD) from the model's state, compiled stock or patched: the
    logs and the weights after it; the state is put back."""
    x, y, mask = _lm_data()
    start = snapshot(lm)
    patch = tf_ops.patch_keras(only=("lm_head",)) if patched else None
    try:
        lm.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=jit, **compile_kwargs)
        logs = lm.train_on_batch(x, y, sample_weight=mask, return_dict=True)
        result = {f"log {k}": np.asarray(v) for k, v in logs.items()}
        result.update({f"weight {i} {v.path}": v.numpy()
                       for i, v in enumerate(lm.trainable_variables)})
        return result
    finally:
        if patch is not None:
            patch.undo()
        restore(lm, start)


def _train_step_ops(lm, patched: bool = True) -> list:
    """The ops of `lm`'s train_step traced (not run), under the lm_head family or not."""
    x, y, mask = _lm_data()
    patch = tf_ops.patch_keras(only=("lm_head",)) if patched else None
    try:
        fn = tf.function(lambda data: lm.train_step(data))
        return fn.get_concrete_function((x, y, mask)).graph.get_operations()
    finally:
        if patch is not None:
            patch.undo()


@pytest.mark.heavy  # keras-hub causal LM fits
@pytest.mark.parametrize("tie", [True, False])
def test_keras_hub_causal_lm_fit_without_logits(tie):
    pytest.importorskip("keras_hub")
    # keras-hub's compile(): SparseCategoricalCrossentropy(from_logits=True) and a weighted
    # accuracy (updated from the argmax linear_cross_entropy reads, no logits); "accuracy"
    # beside a metric that needs the logits (computed off the tape); and no metrics at all
    # (a task made with compile=False: Keras's compile() keeps an earlier one's metrics).
    top3 = keras.metrics.SparseTopKCategoricalAccuracy(k=3)
    cases = ((_llama_lm(tie), {}, ("sparse_categorical_accuracy",)),
             (_llama_lm(tie, compile=False),
              {"metrics": ["accuracy"], "weighted_metrics": [top3]},
              ("accuracy", top3.name)),
             (_llama_lm(tie, compile=False), {"weighted_metrics": None}, ()))
    for lm, kwargs, metrics in cases:
        stock, patched = _fit_step(lm, False, **kwargs), _fit_step(lm, True, **kwargs)
        assert stock.keys() == patched.keys()
        assert {k for k in stock if k.startswith("log ")} == {
            "log loss", *(f"log {m}" for m in metrics)}, stock.keys()
        for key in stock:
            np.testing.assert_allclose(patched[key], stock[key], rtol=2e-5, atol=2e-6,
                                       err_msg=key)
    # No [batch, length, vocab] tensor in the step: linear_cross_entropy's chunks of rows,
    # with keras-hub's accuracy or without metrics; the logits for a top-k metric.
    def vocab_shaped(ops):
        return [op.name for op in ops for t in op.outputs
                if t.shape.rank == 3 and t.shape[-1] == 97]

    for lm, kwargs, metrics in cases:
        lm.compile(optimizer="sgd", **kwargs)
        stock_ops, ops = _train_step_ops(lm, patched=False), _train_step_ops(lm)
        assert vocab_shaped(stock_ops)
        assert bool(vocab_shaped(ops)) == (top3.name in metrics), vocab_shaped(ops)
        assert "SparseSoftmaxCrossEntropyWithLogits" in {op.type for op in stock_ops}
        assert "TfOps>SparseSoftmaxCrossEntropy" in {op.type for op in ops}
    rows = {r.layers: r.detail for r in tf_ops.patch_summary(lm).fused}
    assert rows[f"{lm.name} (fit)"].startswith("fit: the head (tied or not) and its loss")

    # ignore_class: Keras divides by the labels not ignored.
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)
    stock, patched = _fit_step(lm, False, loss=loss), _fit_step(lm, True, loss=loss)
    for key in stock:
        np.testing.assert_allclose(patched[key], stock[key], rtol=2e-5, atol=2e-6, err_msg=key)


@pytest.mark.heavy  # a keras-hub seq2seq LM fit
@pytest.mark.parametrize("kind", ["Bart", "T5"])
def test_keras_hub_seq2seq_lm_fit_without_logits(kind):
    """A seq2seq LM's head reads one of its backbone's outputs (BART's
    ``backbone(inputs)["decoder_sequence_output"]``), or what the model computes from it
    (T5's rescaling before its tied head): fused as a causal LM's, the same logs and
    weights as stock's after a step, no [batch, length, vocab] tensor."""
    keras_hub = pytest.importorskip("keras_hub")
    keras.utils.set_random_seed(3)
    backbone = getattr(keras_hub.models, f"{kind}Backbone")(
        vocabulary_size=97, num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=24,
        **({"max_sequence_length": 16} if kind == "Bart" else {}))
    if kind == "T5":
        assert backbone.tie_embedding_weights  # the rescaled head is the case
    lm = getattr(keras_hub.models, f"{kind}Seq2SeqLM")(backbone=backbone, preprocessor=None)
    rng = np.random.default_rng(8)
    x = {"encoder_token_ids": rng.integers(1, 97, (3, 7)).astype("int32"),
         "encoder_padding_mask": np.ones((3, 7), "int32"),
         "decoder_token_ids": rng.integers(1, 97, (3, 9)).astype("int32"),
         "decoder_padding_mask": np.ones((3, 9), "int32")}
    x["decoder_padding_mask"][1, 6:] = 0
    y = np.roll(x["decoder_token_ids"], -1, axis=1)
    mask = x["decoder_padding_mask"]
    start = snapshot(lm)

    def step(patched: bool) -> dict[str, np.ndarray]:
        patch = tf_ops.patch_keras(only=("lm_head",)) if patched else None
        try:
            lm.compile(optimizer=keras.optimizers.SGD(0.5))
            logs = lm.train_on_batch(x, y, sample_weight=mask, return_dict=True)
            found = {f"log {k}": np.asarray(v) for k, v in logs.items()}
            found.update({f"weight {i} {v.path}": v.numpy()
                          for i, v in enumerate(lm.trainable_variables)})
            fn = tf.function(lambda data: lm.train_step(data))
            found["ops"] = fn.get_concrete_function((x, y, mask)).graph.get_operations()
            return found
        finally:
            if patch is not None:
                patch.undo()
            restore(lm, start)

    stock, patched = step(False), step(True)
    for key in stock:
        if key != "ops":
            np.testing.assert_allclose(patched[key], stock[key], rtol=2e-5, atol=2e-6,
                                       err_msg=key)
    types = {op.type for op in patched["ops"]}
    assert "TfOps>SparseSoftmaxCrossEntropy" in types
    assert not [op.name for op in patched["ops"] for t in op.outputs
                if t.shape.rank == 3 and t.shape[-1] == 97]
    assert [op.name for op in stock["ops"] for t in op.outputs
            if t.shape.rank == 3 and t.shape[-1] == 97]
    with tf_ops.patch_keras(only=("lm_head",)):
        rows = {r.layers: r.detail for r in tf_ops.patch_summary(lm).fused}
    assert rows[f"{lm.name} (fit)"].startswith("fit: the head (tied or not) and its loss")


@pytest.mark.heavy  # keras-hub causal LM fits under jit
def test_keras_hub_causal_lm_fit_mixed_precision_and_jit():
    """Under mixed_bfloat16 the patched step's loss and weights are within bfloat16's
    rounding of stock's (the logits are not rounded to 16 bits there); jit_compile=True
    (on the CPU Keras's own step: the family is left to XLA there) matches stock."""
    pytest.importorskip("keras_hub")
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        lm = _llama_lm(False)
        start = {f"weight {i} {v.path}": v.numpy() for i, v in enumerate(lm.trainable_variables)}
        stock, patched = _fit_step(lm, False), _fit_step(lm, True)
    finally:
        keras.config.set_dtype_policy("float32")
    np.testing.assert_allclose(patched["log loss"], stock["log loss"], rtol=2.0**-8)
    # The step's update, all weights together, in norm (one element's gradient may differ by
    # more than a 16-bit rounding where it is a small sum of large bfloat16 terms).
    diff = sum(np.sum((patched[k] - stock[k]) ** 2.0) for k in start)
    norm = sum(np.sum((stock[k] - start[k]) ** 2.0) for k in start)
    assert (diff / norm) ** 0.5 < 2.0**-6
    lm = _llama_lm(True)
    stock, patched = _fit_step(lm, False, jit=True), _fit_step(lm, True, jit=True)
    for key in stock:
        np.testing.assert_allclose(patched[key], stock[key], rtol=2e-5, atol=2e-6, err_msg=key)


@pytest.mark.heavy  # a keras-hub causal LM fit
def test_keras_hub_causal_lm_left_to_keras():
    pytest.importorskip("keras_hub")
    from tf_ops.python.patch import causal_lm

    lm = _llama_lm(True)
    assert causal_lm.reason_left(lm) is None
    # A loss the op does not compute (probabilities), a custom loss: Keras's step.
    for loss in (keras.losses.SparseCategoricalCrossentropy(),
                 lambda y, p: keras.ops.mean(p)):
        lm.compile(loss=loss)
        assert causal_lm.reason_left(lm).startswith("its loss is not one ")
        stock, patched = _fit_step(lm, False, loss=loss), _fit_step(lm, True, loss=loss)
        for key in stock:
            np.testing.assert_allclose(patched[key], stock[key], rtol=1e-6, err_msg=key)
    lm.compile()
    lm.backbone.token_embedding.logit_soft_cap = 30.0  # a soft-capped head: Keras's step
    try:
        assert "logit_soft_cap" in causal_lm.reason_left(lm)
        assert "SparseSoftmaxCrossEntropyWithLogits" in {op.type for op in _train_step_ops(lm)}
        rows = {r.layers: r.detail for r in tf_ops.patch_summary(lm).left}
        assert "logit_soft_cap" in rows[f"{lm.name} (fit)"]
    finally:
        lm.backbone.token_embedding.logit_soft_cap = None


# --- files, jit, mixed precision, the summary --------------------------------------------------

def test_stock_file_loaded_while_patched_runs_fused(tmp_path):
    model = _conv_bn(keras.layers.Activation("swish"))
    path = tmp_path / "stock.keras"
    model.save(path)  # saved unpatched
    data = _images()
    expected = model(data, training=False).numpy()
    with tf_ops.patch_keras():
        loaded = keras.models.load_model(path)
        got = loaded(data, training=False).numpy()
        assert type(loaded.get_layer("bn")) is keras.layers.BatchNormalization
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # Inference: the batch norm folded into the convolution, the swish with its bias.
    assert fused_op_types(loaded, data, training=False) == {"TfOps>BiasSwish",
                                                           "TfOps>BiasSwishGrad"}
    assert "TfOps>BatchNormTraining" in fused_op_types(loaded, data, training=True)


def _jit_train_step(model, x) -> tuple[dict[str, np.ndarray], set[str]]:
    """One XLA-compiled forward and backward pass (`step`'s, with the moving statistics
    updated) traced now, so under whatever patch is active: the results, and the op
    types of the traced graph."""
    w = np.random.default_rng(1).normal(size=(x.shape[0], 3)).astype("float32")

    @tf.function(jit_compile=True)
    def run(x):
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            value = tf.reduce_sum(out * w)
        return out, tape.gradient(value, model.trainable_weights)

    out, grads = run(x)
    result = {"output": out.numpy()}
    result.update({f"grad {i} {v.path}": g.numpy()
                   for i, (v, g) in enumerate(zip(model.trainable_weights, grads))})
    result.update({f"state {i} {v.path}": v.numpy()
                   for i, v in enumerate(model.non_trainable_weights)})
    return result, {op.type for op in run.get_concrete_function(x).graph.get_operations()}


def test_jit_compile_and_mixed_precision(monkeypatch):
    """Under jit_compile, on the CPU and compiled for a GPU alike: the batch-norm ops'
    lowerings (custom calls into the engine) with the activation fused into the batch
    norm, forward and backward, where the library has them; on the CPU, with the
    batch-norm family left to XLA (`xla_cpu.LEFT`), Keras's own code (the choice is made
    while tracing, so a traced program shows it without a GPU)."""
    model = _conv_bn(keras.layers.Activation("gelu", name="gelu"))
    data = _images()
    start = snapshot(model)
    expected, _ = _jit_train_step(model, data)
    restore(model, start)

    def patched_ops() -> set[str]:
        """The patched jitted step's op types, its values checked against stock's."""
        with tf_ops.patch_keras():
            got, ops = _jit_train_step(model, data)
        restore(model, start)
        assert_close(expected, got)
        return ops

    fused_bn = {"TfOps>BatchNormTraining", "TfOps>BatchNormTrainingGrad"}
    unfused_gelu = {"TfOps>Gelu", "TfOps>GeluGrad", "Erf"}
    if keras_layers._BATCH_NORM_LOWERED:
        assert not xla_cpu.steps_aside(("batch_norm",))
        ops = patched_ops()
        assert fused_bn <= ops and not ops & unfused_gelu
    monkeypatch.setattr(xla_cpu, "LEFT", xla_cpu.LEFT | {"batch_norm"})
    ops = patched_ops()
    assert not any(op.startswith("TfOps>") for op in ops), ops
    monkeypatch.undo()
    if keras_layers._BATCH_NORM_LOWERED:
        monkeypatch.setattr(xla_cpu, "_has_gpu", lambda: True)
        ops = patched_ops()
        assert fused_bn <= ops and not ops & unfused_gelu
        # In a library without those lowerings (-DTF_OPS_XLA=OFF, Bazel): Keras's own
        # code rather than a composite of the same math, then the activation's op.
        monkeypatch.setattr(keras_layers, "_BATCH_NORM_LOWERED", False)
        ops = patched_ops()
        assert "TfOps>Gelu" in ops and "TfOps>BatchNormTraining" not in ops
        monkeypatch.undo()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        half = _conv_bn(keras.layers.Activation("swish"))
    finally:
        keras.config.set_dtype_policy("float32")
    stock, patched = stock_and_patched(half, data)
    assert patched["output"].dtype == np.float16
    assert_close(stock, patched, rtol=2e-3, atol=2e-3)


def test_under_jit_on_the_cpu_the_left_families_run_keras_code():
    """Under jit_compile on the CPU the families of `xla_cpu.LEFT` step aside for Keras's
    own code (XLA fuses it at least as fast, measured): no tf_ops op in the compiled
    program and the same values, a Dense + activation pair included (not fused there, the
    activation not lost); the same model in graph mode runs tf_ops's ops."""
    inputs = keras.Input((6, 8))
    x = keras.layers.Dense(16, name="dense")(inputs)
    x = keras.layers.Activation("gelu", name="gelu")(x)
    x = keras.layers.LayerNormalization(name="ln")(x)
    x = keras.layers.Dense(3, activation="silu", name="head")(x)
    model = keras.Model(inputs, keras.layers.Softmax(name="softmax")(x))
    data = tf.constant(np.random.default_rng(0).normal(size=(4, 6, 8)), tf.float32)
    w = tf.constant(np.random.default_rng(1).normal(size=(4, 6, 3)), tf.float32)

    def step(x):
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            value = tf.reduce_sum(out * w)
        return [out] + tape.gradient(value, model.trainable_weights)

    def run(jit: bool) -> tuple[list, set[str]]:
        fn = tf.function(step, jit_compile=jit)
        ops = {op.type for op in fn.get_concrete_function(data).graph.get_operations()}
        return [t.numpy() for t in fn(data)], ops

    expected, _ = run(True)
    with tf_ops.patch_keras() as patch:
        got, ops = run(True)
        in_graph, graph_ops = run(False)
        text = str(patch.report())
    assert not any(op.startswith("TfOps>") for op in ops), ops
    assert {"TfOps>BiasGelu", "TfOps>LayerNorm", "TfOps>BiasSwish", "TfOps>Softmax"} <= graph_ops
    for e, g, c in zip(expected, got, in_graph):
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(c, e, rtol=2e-5, atol=2e-6)
    assert "under jit_compile on the CPU: Keras's own code for" in text
    seen = []

    @tf.function(jit_compile=True)
    def probe():
        seen.append(xla_cpu.compiling_for_cpu())
        return tf.constant(0)

    probe()
    assert seen == [True] and not xla_cpu.compiling_for_cpu()


def test_einsum_dense_bias_of_several_axes_is_one_bias_add():
    """EinsumDense under the dense family: a bias of several axes (MultiHeadAttention's
    [heads, head_dim]) is one BiasAdd forward and one BiasAddGrad backward instead of a
    broadcasting AddV2 and its reduction, with Keras's values and gradients; a bias of
    one axis (Keras's add makes that a BiasAdd itself) runs Keras's call; the summary
    says which is which."""
    inputs = keras.Input((6, 16))
    x = keras.layers.EinsumDense("abc,cde->abde", output_shape=(None, 4, 8), bias_axes="de",
                                 activation="tanh", name="qkv")(inputs)
    x = keras.layers.Reshape((6, 32))(x)
    x = keras.layers.EinsumDense("abc,cd->abd", output_shape=(6, 5), bias_axes="b",
                                 name="one_axis")(x)
    model = keras.Model(inputs, x)
    data = tf.constant(np.random.default_rng(0).normal(size=(2, 6, 16)), tf.float32)

    def run() -> tuple[list, set[str]]:
        @tf.function
        def step(d):
            with tf.GradientTape() as tape:
                y = model(d)
                value = tf.reduce_sum(y * y)
            return [y] + tape.gradient(value, model.trainable_weights)
        ops = {op.type for op in step.get_concrete_function(data).graph.get_operations()}
        return [t.numpy() for t in step(data)], ops

    expected, stock_ops = run()
    with tf_ops.patch_keras(only=("dense",)):
        got, ops = run()
        summary = tf_ops.patch_summary(model)
    assert "AddV2" in stock_ops and "AddV2" not in ops and "BiasAddGrad" in ops
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    assert [r.layers for r in summary.fused] == ["qkv"]
    assert any(r.layers == "one_axis" and "one axis" in r.detail for r in summary.left)


def _adam_fit(optimizer, patched: bool, jit: bool) -> tuple[list, list]:
    """120 steps (30 epochs of 4 batches) of `optimizer` on a small Dense model: the
    losses and the weights."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"),
                              keras.layers.Dense(3)])
    x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
    y = np.random.default_rng(1).normal(size=(64, 3)).astype("float32")
    with tf_ops.patch_keras(only=("optimizer",)) if patched else contextlib.nullcontext():
        model.compile(optimizer, "mse", jit_compile=jit)
        losses = model.fit(x, y, epochs=30, batch_size=16, verbose=0).history["loss"]
    return losses, [w.numpy() for w in model.weights]


def _xla_compiled_calls(graph) -> int:
    return sum(1 for op in graph.get_operations()
               if op.type in ("PartitionedCall", "StatefulPartitionedCall")
               and op.node_def.attr["_XlaMustCompile"].b)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("make", [lambda: keras.optimizers.Adam(1e-2),
                                  lambda: keras.optimizers.AdamW(1e-2, weight_decay=0.05),
                                  lambda: keras.optimizers.Adam(1e-2, amsgrad=True)],
                         ids=["adam", "adamw", "amsgrad"])
def test_optimizer_family_updates_as_keras_adam(make, jit):
    """The optimizer family: Adam's and AdamW's update of each variable is Keras's own,
    compiled by XLA (one compiled call per variable, none of Keras's assigns outside
    it): the same losses and weights as Keras's after 120 steps, bit for bit but for
    XLA's own rounding; under jit_compile on the CPU, Keras's update as it is."""

    def update_graph(optimizer):
        variables = [keras.Variable(np.ones([4, 3], "float32")),
                     keras.Variable(np.ones([3], "float32")),
                     keras.Variable(np.ones([4, 3], "float32"))]
        optimizer.build(variables)
        grads = [tf.fill([4, 3], 0.5), tf.fill([3], -0.5), tf.fill([4, 3], 2.0)]
        with tf_ops.patch_keras(only=("optimizer",)):
            fn = tf.function(lambda: optimizer.apply(grads, variables), jit_compile=jit)
            return fn.get_concrete_function().graph, optimizer

    stock_losses, stock_weights = _adam_fit(make(), False, jit)
    losses, weights = _adam_fit(make(), True, jit)
    np.testing.assert_allclose(losses, stock_losses, rtol=1e-6)
    for got, want in zip(weights, stock_weights):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    graph, optimizer = update_graph(make())
    ops = [op.type for op in graph.get_operations()]
    if jit:  # on the CPU: xla_cpu.LEFT, Keras's update inline
        assert _xla_compiled_calls(graph) == 0 and "AssignAddVariableOp" in ops
    else:
        assert _xla_compiled_calls(graph) == 3, ops
        assert "AssignAddVariableOp" not in ops, ops  # Keras's assigns: inside the calls
        # one program per (shape, dtype): the two [4, 3] variables share theirs
        assert optimizer._tf_ops_compiled_update.experimental_get_tracing_count() == 2
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(make(), "mse")
    with tf_ops.patch_keras(only=("optimizer",)):
        summary = tf_ops.patch_summary(model)
    assert any(r.layers.endswith("(optimizer)") for r in summary.fused), summary


def test_optimizer_family_runs_keras_update_where_the_slots_are_not_found(monkeypatch):
    """A Keras whose Adam keeps its slots under other names (here: `_slots` cannot find
    them) trains with Keras's own update, not an error: the same weights as stock."""
    from tf_ops.python.patch import optimizers

    def renamed(optimizer, variable):
        raise AttributeError("'Adam' object has no attribute '_momentums'")

    monkeypatch.setattr(optimizers, "_slots", renamed)
    stock_losses, stock_weights = _adam_fit(keras.optimizers.Adam(1e-2), False, False)
    optimizer = keras.optimizers.Adam(1e-2)
    losses, weights = _adam_fit(optimizer, True, False)
    assert "_tf_ops_compiled_update" not in optimizer.__dict__
    np.testing.assert_array_equal(losses, stock_losses)
    for got, want in zip(weights, stock_weights):
        np.testing.assert_array_equal(got, want)


def test_optimizer_family_compiles_a_sparse_gradient_as_keras_updates_it():
    """An embedding's gradient is IndexedSlices, with an index twice when a token is
    looked up twice: Keras's Adam squares the slices before it sums them, which a dense
    update would not do. Patched, the compiled update takes the slices as they are:
    the embedding's weights are Keras's but for XLA's ulps (a dense gradient: 0.08
    apart)."""

    def fit(patched: bool) -> tuple[list, keras.optimizers.Optimizer]:
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((6,), dtype="int32"),
                                  keras.layers.Embedding(10, 4),
                                  keras.layers.GlobalAveragePooling1D(),
                                  keras.layers.Dense(2)])
        x = np.array([[1, 1, 2, 3, 3, 3]] * 8, "int32")  # indices repeated in each row
        y = np.random.default_rng(0).normal(size=(8, 2)).astype("float32")
        optimizer = keras.optimizers.Adam(0.05)
        with tf_ops.patch_keras(only=("optimizer",)) if patched else contextlib.nullcontext():
            model.compile(optimizer, "mse")
            model.fit(x, y, epochs=5, batch_size=4, verbose=0)
        return [w.numpy() for w in model.weights], optimizer

    with tf.GradientTape() as tape:  # the premise: the embedding's gradient is sparse
        layer = keras.layers.Embedding(10, 4)
        loss = tf.reduce_sum(layer(np.array([[1, 1]], "int32")))
    assert isinstance(tape.gradient(loss, layer.embeddings.value), tf.IndexedSlices)
    weights, optimizer = fit(True)
    # the embedding's update is compiled, slices in: not left to Keras, not densified
    assert "IndexedSlices" in (
        optimizer._tf_ops_compiled_update.pretty_printed_concrete_signatures())
    for got, want in zip(weights, fit(False)[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_summary_of_an_unpatched_model_says_what_the_patch_would_do():
    model = _conv_bn(keras.layers.Activation("swish", name="swish"))
    summary = tf_ops.patch_summary(model)
    assert not state.active_families()
    text = str(summary)
    assert "not active now: what it would do" in text
    assert [r.layers for r in summary.fused] == ["conv + bn", "bn + swish"]
    assert "tf_ops has no op for: GlobalAveragePooling2D x1" in text
    assert summary.fused[1].detail == "batch norm + swish in one op"


def test_summary_says_what_the_graph_runs_and_why_a_layer_is_left():
    """A Dense with a softmax activation: its bias and softmax are not one op, but the
    softmax runs tf_ops's (the traced graph has TfOps>Softmax), so the summary lists it
    as fused, not as left for want of a kernel; a ReLU capped at 4 (tf_ops's cap is 6's,
    MobileNet's) is left with a reason, not counted among the layers tf_ops has no op
    for."""
    inputs = keras.Input((6, 6, 3))
    x = keras.layers.Conv2D(4, 3, name="conv")(inputs)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.ReLU(max_value=4.0, name="relu4")(x)
    x = keras.layers.Flatten(name="flat")(x)
    model = keras.Model(inputs, keras.layers.Dense(5, activation="softmax", name="probs")(x))
    with tf_ops.patch_keras():
        summary = tf_ops.patch_summary(model)
        graph = tf.function(model).get_concrete_function(
            tf.TensorSpec((2, 6, 6, 3), tf.float32)).graph
    assert "TfOps>Softmax" in {op.type for op in graph.get_operations()}
    fused = {r.layers: r.detail for r in summary.fused}
    left = {r.layers: r.detail for r in summary.left}
    assert fused["probs"] == "matmul + bias (Keras's), then TfOps>Softmax"
    assert left["relu4"].startswith("ReLU(max_value=4.0, threshold=0.0): tf_ops has a ReLU")
    assert "ReLU" not in dict(summary.no_op) and "Dense" not in dict(summary.no_op)


def test_batch_norm_and_relu6_are_one_op():
    """MobileNet's BatchNormalization -> ReLU(max_value=6): one TfOps>BatchNormTraining
    with the Relu6 activation in training (values and gradients as Keras's), the
    ReLU6 left to grappler's fused convolution at inference once the batch norm is
    folded, and the summary's row says so; a standalone ReLU6 runs TfOps>Relu6."""
    model = _conv_bn(keras.layers.ReLU(max_value=6.0, name="relu6"))
    data = _images() * 4.0  # some outputs above 6
    assert_close(*stock_and_patched(model, data, training=True))
    ops = fused_op_types(model, data, training=True)
    assert "TfOps>BatchNormTraining" in ops and not any("Relu6" in op for op in ops), ops
    graph_attrs = _bn_activation_attrs(model, data)
    assert graph_attrs == {"Relu6"}, graph_attrs
    with tf_ops.patch_keras():
        rows = {r.layers: r.detail for r in tf_ops.patch_summary(model).fused}
    assert rows["bn + relu6"] == "batch norm + relu6 in one op", rows
    alone = keras.Sequential([keras.Input((5,)), keras.layers.ReLU(max_value=6.0)])
    x = tf.constant(RNG.normal(0, 5, (3, 5)).astype("float32"))
    assert_close(*stock_and_patched(alone, x))
    assert fused_op_types(alone, x) == {"TfOps>Relu6"}  # no weights: no gradient op

    @tf.function
    def input_gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = alone(x)
        return tape.gradient(y, x)

    with tf_ops.patch_keras():
        traced = input_gradient.get_concrete_function(x)
        ops = {op.type for op in traced.graph.get_operations() if op.type.startswith("TfOps>")}
        dx = traced(x)
    assert ops == {"TfOps>Relu6", "TfOps>Relu6Grad"}, ops
    np.testing.assert_array_equal(dx, tf.cast((x > 0) & (x < 6), tf.float32))


# --- an add and the activation after it (a residual block's end) -------------------------

def _residual(activation, add=None):
    """conv -> BatchNormalization -> add(the block's input) -> `activation` ("act")."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6, 6, 4))
    x = keras.layers.Conv2D(4, 3, padding="same", use_bias=False)(inputs)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = (add or keras.layers.Add(name="add"))([inputs, x])
    x = activation(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(3)(x))


@pytest.mark.parametrize("activation, op", [
    (lambda: keras.layers.Activation("relu", name="act"), "TfOps>AddLeakyRelu"),
    (lambda: keras.layers.ReLU(name="act"), "TfOps>AddLeakyRelu"),
    (lambda: keras.layers.ReLU(max_value=6.0, name="act"), "TfOps>AddRelu6"),
    (lambda: keras.layers.Activation("elu", name="act"), "TfOps>AddElu"),
    # swish' needs its input: fused, the backward would keep both addends (Keras's add
    # keeps neither, its swish the sum): left as two ops.
    (lambda: keras.layers.Activation("swish", name="act"), None),
], ids=["relu", "ReLU", "ReLU6", "elu", "swish"])
@pytest.mark.parametrize("training", [True, False])
def test_add_and_activation_are_one_op(activation, op, training):
    """ResNet's Add -> ReLU: one TfOps>Add{Act}, whose gradient reads the output (so
    the patched step keeps no more than Keras's), values and gradients as Keras's."""
    model = _residual(activation())
    data = _images((4, 6, 6, 4)) * 2.0
    assert_close(*stock_and_patched(model, data, training=training))
    ops = fused_op_types(model, data, training)
    adds = {o for o in ops if o.startswith("TfOps>Add")}
    assert adds == ({op} if op else set()), ops
    with tf_ops.patch_keras():
        rows = {r.layers: r.detail for r in tf_ops.patch_summary(model).fused}
    if op:
        assert rows["add + act"].startswith("add + ") and "act" not in rows, rows
    else:
        assert "act" in rows and not any("add" in k for k in rows), rows


def test_inception_resnet_scaled_add_and_relu_are_one_op():
    """InceptionResNetV2's CustomScaleLayer (x + r * scale) and the ReLU after it: one
    op; without an activation after it, Keras's own call (and nothing in the summary)."""
    from keras.src.applications.inception_resnet_v2 import CustomScaleLayer

    model = _residual(keras.layers.Activation("relu", name="act"),
                      CustomScaleLayer(0.17, name="add"))
    data = _images((4, 6, 6, 4)) * 2.0
    assert_close(*stock_and_patched(model, data))
    assert "TfOps>AddLeakyRelu" in fused_op_types(model, data)
    bare = _residual(keras.layers.Identity(name="act"), CustomScaleLayer(0.17, name="add"))
    assert_close(*stock_and_patched(bare, data))
    assert not any(o.startswith("TfOps>Add") for o in fused_op_types(bare, data))
    with tf_ops.patch_keras():
        rows = {r.layers for r in tf_ops.patch_summary(model).fused}
        bare_summary = tf_ops.patch_summary(bare)
    assert "add + act" in rows
    assert not any("add" in r.layers for r in bare_summary.fused + bare_summary.left)
    assert ("CustomScaleLayer", 1) in bare_summary.no_op


def test_add_pairs_only_where_exact():
    """No add + activation op where the sum is needed as it is (a second consumer, a
    model output), nor for three addends or addends Keras broadcasts."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6, 6, 4))
    x = keras.layers.Conv2D(4, 1)(inputs)
    total = keras.layers.Add(name="twice")([x, inputs])
    y = keras.layers.Activation("relu", name="relu")(total)
    three = keras.layers.Add(name="three")([x, inputs, y])
    z = keras.layers.Activation("relu", name="relu3")(three)
    row = keras.layers.Conv2D(4, (6, 1))(inputs)  # [batch, 1, 6, 4]: broadcast
    wide = keras.layers.Add(name="broadcast")([x, row])
    w = keras.layers.Activation("relu", name="relu_b")(wide)
    model = keras.Model(inputs, [keras.layers.Add()([total, y, z, w])])
    data = _images((4, 6, 6, 4))
    assert_close(*stock_and_patched(model, data))
    assert not any(o.startswith("TfOps>Add") for o in fused_op_types(model, data))


def _bn_activation_attrs(model, data) -> set[str]:
    """The `activation` attribute of every TfOps>BatchNormTraining op in `model`'s
    training graph, traced under the patch."""
    @tf.function
    def run(x):
        return model(x, training=True)

    with tf_ops.patch_keras():
        graph = run.get_concrete_function(tf.convert_to_tensor(data)).graph
    return {op.get_attr("activation").decode() for op in graph.get_operations()
            if op.type == "TfOps>BatchNormTraining"}


# --- convolutions with one group per channel (conv family) ------------------------------

@pytest.mark.parametrize("layer, shape", [
    (lambda: keras.layers.Conv2D(8, 7, padding="same", groups=8, name="grouped"), (2, 9, 9, 8)),
    (lambda: keras.layers.Conv2D(12, 3, strides=2, groups=4, activation="gelu",
                                 name="grouped"), (2, 9, 9, 4)),
    (lambda: keras.layers.Conv2D(6, (3, 2), dilation_rate=2, groups=3, use_bias=False,
                                 name="grouped"), (2, 11, 9, 3)),
], ids=["convnext-7x7", "strided-multiplier-3", "dilated-no-bias"])
def test_grouped_conv_with_a_group_per_channel_is_depthwise(layer, shape):
    """ConvNeXt's grouped 7x7 convolution (groups = channels): TensorFlow's depthwise
    kernels, the same values and gradients as Keras's XLA program, and no XLA call."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape[1:])
    model = keras.Model(inputs, keras.layers.Dense(3)(layer()(inputs)))
    data = RNG.normal(0, 1, shape).astype("float32")
    assert_close(*stock_and_patched(model, data, only=("conv",)))

    @tf.function
    def run(x):
        with tf.GradientTape() as tape:
            total = tf.reduce_sum(model(x))
        return tape.gradient(total, model.trainable_weights)

    def op_types():
        graph = run.get_concrete_function(tf.constant(data)).graph
        types = {op.type for op in graph.get_operations()}
        for f in graph._functions.values():  # Keras's jit_compile'd convolution
            types |= {op.type for op in f.graph.get_operations()}
        return types

    stock = op_types()
    assert not {"DepthwiseConv2dNative"} & stock and "Conv2D" in stock
    run = tf.function(run.python_function)  # traced again, now patched
    with tf_ops.patch_keras(only=("conv",)) as patch:
        patched = op_types()
        rows = {r.layers: r.detail for r in tf_ops.patch_summary(model).fused}
    assert "DepthwiseConv2dNative" in patched and "Conv2D" not in patched, patched
    assert rows["grouped"].startswith("TensorFlow's depthwise convolution"), rows
    assert patch.families == ("conv",)


def test_under_jit_on_the_cpu_a_grouped_conv_before_a_batch_norm_keeps_keras_code():
    """The convolution's patched call also serves the batch-norm family (folds), which
    does not step aside under XLA on the CPU; its depthwise path (the conv family, which
    does) is Keras's grouped convolution there, while the batch norm runs its op."""
    model = _conv_bn_block(keras.layers.Conv2D(8, 3, padding="same", groups=8,
                                               name="grouped"),
                           [keras.layers.Activation("relu")], shape=(2, 7, 7, 8))
    data = _images((2, 7, 7, 8))
    start = snapshot(model)
    expected, stock_ops = _jit_train_step(model, data)
    restore(model, start)
    with tf_ops.patch_keras(only=("conv", "batch_norm")):
        got, ops = _jit_train_step(model, data)
    restore(model, start)
    assert_close(expected, got)
    assert "DepthwiseConv2dNative" not in ops and "DepthwiseConv2dNative" not in stock_ops
    if keras_layers._BATCH_NORM_LOWERED:
        assert "TfOps>BatchNormTraining" in ops, ops


def test_other_grouped_convs_keep_keras_code():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((5, 5, 8))
    model = keras.Model(inputs, keras.layers.Conv2D(4, 3, groups=2, name="two_groups")(inputs))
    data = RNG.normal(0, 1, (2, 5, 5, 8)).astype("float32")
    assert_close(*stock_and_patched(model, data))
    with tf_ops.patch_keras():
        rows = {r.layers: r.detail for r in tf_ops.patch_summary(model).left}
    assert rows["two_groups"] == "groups=2 of 8 input channels (Keras's XLA program)", rows
