"""tf_ops.layers: configuration, drop-in equality with Keras, training, mixed precision."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf
import keras

import tf_ops
from op_specs import SPECS, function_name, layer_class, make_layer, non_default_attrs
from tf_ops import layers as L

# Each layer with non-default arguments, and the function it computes.
LAYERS = {
    layer_class(spec).__name__: (
        lambda spec=spec: make_layer(spec, non_default_attrs(spec)),
        lambda x, spec=spec: spec.forward(x, **non_default_attrs(spec)),
    )
    for spec in SPECS
}
# The layer argument holding each op attribute (Keras's name where it differs).
ARGS = {
    layer_class(spec).__name__: {a: o for o, a in layer_class(spec).ENTRY.layer_args.items()}.get(attr, attr)
    for spec in SPECS
    for attr in spec.attr_variants[0]
}
FUNCTIONS = tuple(function_name(spec) for spec in SPECS)


def sample(shape=(4, 33), dtype="float32", seed=0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(scale=3.0, size=shape)
    x.flat[:3] = (0.0, -0.0, 1e-3)
    return x.astype(dtype)


def value_and_grad(fn, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(t)
        y = fn(t)
    return y.numpy(), tape.gradient(y, t).numpy()


def test_public_module():
    assert tf_ops.layers.GELU is L.GELU
    for name in LAYERS:
        assert issubclass(getattr(tf_ops.layers, name), keras.layers.Layer)
    # The activation layers, the fused Dense layers (tests/fused/test_fused_layers.py) and
    # each family's layers.
    assert sorted(tf_ops.layers.__all__) == sorted([*LAYERS, "Dense", "GatedDense",
                                                   "LayerNormalization", "RMSNormalization",
                                                   "Softmax", "BatchNormalization",
                                                   "RotaryEmbedding", "GroupNormalization"])


def test_defaults():
    # LeakyReLU: 0.2 as tf.nn.leaky_relu and keras.activations.leaky_relu
    # (keras.layers.LeakyReLU's default is 0.3: the README says so).
    assert L.LeakyReLU().negative_slope == 0.2
    assert L.ELU().alpha == 1.0
    assert L.GELU().approximate is False
    assert L.Swish().beta == 1.0
    x = sample()
    np.testing.assert_array_equal(L.LeakyReLU()(x).numpy(), tf_ops.leaky_relu(x, alpha=0.2).numpy())
    np.testing.assert_array_equal(L.GELU()(x).numpy(), tf_ops.gelu(x).numpy())


@pytest.mark.parametrize("name", LAYERS)
def test_layer_computes_its_op(name):
    make, fn = LAYERS[name]
    x = sample()
    y, dy = value_and_grad(make(), x)
    y_ref, dy_ref = value_and_grad(fn, x)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(dy, dy_ref)


@pytest.mark.parametrize("name", LAYERS)
def test_config_round_trip(name):
    make, _ = LAYERS[name]
    layer = make()
    config = layer.get_config()
    if name in ARGS:
        assert config[ARGS[name]] == getattr(layer, ARGS[name])
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    # Through Keras's registry, by the registered name alone.
    serialized = keras.saving.serialize_keras_object(layer)
    assert serialized["registered_name"] == f"tf_ops>{name}"
    restored = keras.saving.deserialize_keras_object(serialized)
    assert type(restored) is type(layer) and restored.get_config() == config
    x = sample()
    np.testing.assert_array_equal(restored(x).numpy(), layer(x).numpy())


BAD_ARGUMENTS = {
    "leaky-str": (lambda: L.LeakyReLU(negative_slope="0.2"), TypeError, "negative_slope"),
    "leaky-none": (lambda: L.LeakyReLU(negative_slope=None), ValueError,  # as Keras's
                   "The negative_slope value of a Leaky ReLU layer cannot be None"),
    "leaky-bool": (lambda: L.LeakyReLU(negative_slope=True), TypeError, "negative_slope"),
    "leaky-nan": (lambda: L.LeakyReLU(negative_slope=math.nan), ValueError, "finite"),
    "leaky-inf": (lambda: L.LeakyReLU(negative_slope=math.inf), ValueError, "finite"),
    "elu-negative": (lambda: L.ELU(alpha=-0.5), ValueError, ">= 0"),
    "elu-list": (lambda: L.ELU(alpha=[1.0]), TypeError, "alpha"),
    "elu-inf": (lambda: L.ELU(alpha=-math.inf), ValueError, "finite"),
    "gelu-str": (lambda: L.GELU(approximate="tanh"), TypeError, "approximate"),
    "gelu-int": (lambda: L.GELU(approximate=1), TypeError, "approximate"),
    "swish-nan": (lambda: L.Swish(beta=math.nan), ValueError, "finite"),
    "swish-tensor": (lambda: L.Swish(beta=tf.constant(1.0)), TypeError, "beta"),
    "mish-unknown-kwarg": (lambda: L.Mish(unknown=1), ValueError, "unknown"),  # Keras's check
}


@pytest.mark.parametrize("make,error,words", BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_bad_arguments_fail_at_construction(make, error, words):
    with pytest.raises(error, match=words):
        make()


def test_arguments_accept_numpy_numbers_and_keras_alias():
    assert L.LeakyReLU(np.float32(0.25)).negative_slope == 0.25
    assert L.Swish(beta=np.int64(2)).beta == 2.0
    # Keras 3's LeakyReLU still accepts Keras 2's `alpha=`; so does the drop-in.
    assert L.LeakyReLU(alpha=0.1).negative_slope == 0.1
    # Slopes outside [0, 1] mean what the formula says (a select, as tf.nn.leaky_relu).
    x = np.array([-1.0, 3.0], "float32")
    np.testing.assert_array_equal(L.LeakyReLU(-2.0)(x).numpy(), [2.0, 3.0])


@pytest.mark.parametrize("slope", [0.0, 0.2, 0.3, 1.0])
def test_leaky_relu_is_drop_in_for_keras(slope):
    x = sample()
    ours = value_and_grad(L.LeakyReLU(negative_slope=slope), x)
    theirs = value_and_grad(keras.layers.LeakyReLU(negative_slope=slope), x)
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[1], theirs[1])


@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.0])
def test_elu_is_drop_in_for_keras(alpha):
    x = sample()
    ours = value_and_grad(L.ELU(alpha=alpha), x)
    theirs = value_and_grad(keras.layers.ELU(alpha=alpha), x)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize(
    "layer,keras_fn",
    [
        pytest.param(L.GELU(), lambda x: keras.activations.gelu(x, approximate=False), id="gelu"),
        pytest.param(L.GELU(approximate=True), lambda x: keras.activations.gelu(x, approximate=True),
                     id="gelu-tanh"),
        pytest.param(L.Swish(), keras.activations.silu, id="swish-silu"),
        pytest.param(L.Mish(), keras.activations.mish, id="mish"),
        pytest.param(L.HardSwish(), keras.activations.hard_swish, id="hard-swish"),
    ],
)
def test_matches_keras_activation(layer, keras_fn):
    x = sample()
    ours = value_and_grad(layer, x)
    theirs = value_and_grad(keras_fn, x)
    # Keras composes several TF kernels, each rounding: a few float32 ulps apart. Its
    # tanh-GELU gradient also loses digits to cancellation in 1 + tanh(u) for x < -4
    # (1.8e-6 absolute at x = -4.28, where tf_ops agrees with float64): hence atol.
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 3.0])
def test_celu_matches_keras_activation_except_its_kink(alpha):
    """Keras's celu is max(x, 0) + alpha * expm1(min(x, 0) / alpha): its autodiff takes
    both branches at x = 0 and says f'(0) = 2. CELU's derivative is continuous: 1."""
    x = sample()
    ours = value_and_grad(L.CELU(alpha=alpha), x)
    theirs = value_and_grad(lambda t: keras.activations.celu(t, alpha=alpha), x)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-6)
    kink = x == 0
    assert kink.any() and np.all(ours[1][kink] == 1.0) and np.all(theirs[1][kink] == 2.0)
    np.testing.assert_allclose(ours[1][~kink], theirs[1][~kink], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_activation_function_in_dense_serializes(name):
    fn = getattr(tf_ops, name)
    dense = keras.layers.Dense(4, activation=fn)
    config = dense.get_config()
    # Serialized by its registered name, not by module and function name.
    assert config["activation"]["config"] == f"tf_ops>{name}"
    restored = keras.layers.Dense.from_config(config)
    assert restored.activation is fn
    assert keras.activations.deserialize(keras.activations.serialize(fn)) is fn


@pytest.mark.parametrize("name", LAYERS)
def test_shapes_and_symbolic_use(name):
    layer = LAYERS[name][0]()
    assert layer.compute_output_shape((None, 3, 5)) == (None, 3, 5)
    inputs = keras.Input((3, 5))
    outputs = layer(inputs)
    assert tuple(outputs.shape) == (None, 3, 5)
    assert layer.supports_masking
    assert layer.count_params() == 0


def test_integer_inputs_are_cast_to_the_compute_dtype():
    y = L.GELU()(tf.constant([[-1, 0, 2]]))
    assert y.dtype == tf.float32
    np.testing.assert_array_equal(y.numpy(), tf_ops.gelu(tf.constant([[-1.0, 0.0, 2.0]])).numpy())


def all_layers_model(final_dtype: str | None = None) -> keras.Model:
    keras.utils.set_random_seed(0)
    inputs = keras.Input((10,))
    h = inputs
    for name in LAYERS:
        h = keras.layers.Dense(16)(h)
        h = LAYERS[name][0]()(h)
    h = keras.layers.Dense(16, activation=tf_ops.gelu)(h)  # a function as activation, too
    outputs = keras.layers.Dense(1, dtype=final_dtype)(h)
    return keras.Model(inputs, outputs)


def regression_data(n: int = 128) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, 10)).astype("float32")
    y = (np.sin(x[:, :1]) + 0.5 * x[:, 1:2] ** 2).astype("float32")
    return x, y


def test_fit_evaluate_predict():
    model = all_layers_model()
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", jit_compile=False)
    x, y = regression_data()
    first = model.layers[1].kernel.numpy().copy()
    history = model.fit(x, y, epochs=4, batch_size=32, verbose=0)
    losses = history.history["loss"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    # Gradients reached the first layer through all five activations.
    assert not np.allclose(model.layers[1].kernel.numpy(), first)
    predictions = model.predict(x, batch_size=32, verbose=0)
    np.testing.assert_allclose(predictions, model(x).numpy(), rtol=1e-5, atol=1e-6)
    loss = model.evaluate(x, y, batch_size=len(x), verbose=0)
    np.testing.assert_allclose(loss, np.mean((predictions - y) ** 2), rtol=1e-5)


@pytest.fixture
def global_policy(request):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(request.param)
    yield request.param
    keras.config.set_dtype_policy(previous)


@pytest.mark.parametrize("global_policy", ["mixed_float16", "mixed_bfloat16"], indirect=True)
def test_mixed_precision(global_policy):
    compute = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}[global_policy]
    # Last layer in float32, as the Keras mixed precision guide recommends.
    model = all_layers_model(final_dtype="float32")
    ours = [layer for layer in model.layers if type(layer).__module__ == L.GELU.__module__]
    assert len(ours) == len(LAYERS)
    x, y = regression_data()
    # Each tf_ops layer computes in the compute dtype (the op runs in half/bfloat16).
    probe = keras.Model(model.input, [layer.output for layer in ours])
    for layer, out in zip(ours, probe(x[:8])):
        assert layer.compute_dtype == compute and out.dtype == compute, layer.name
    for layer in ours:
        h = tf.constant(sample(dtype="float32"))
        np.testing.assert_array_equal(
            layer(h).numpy(), LAYERS[type(layer).__name__][1](tf.cast(h, compute)).numpy()
        )
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", jit_compile=False)
    if global_policy == "mixed_float16":
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    first = model.layers[1].kernel
    assert first.dtype == "float32"
    before = first.numpy().copy()
    history = model.fit(x, y, epochs=3, batch_size=32, verbose=0)
    losses = history.history["loss"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert not np.allclose(first.numpy(), before)
    predictions = model.predict(x, verbose=0)
    assert predictions.dtype == np.float32 and np.isfinite(predictions).all()
    assert np.isfinite(model.evaluate(x, y, verbose=0))
