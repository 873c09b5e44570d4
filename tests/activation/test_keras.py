"""The ops inside small Keras models: one epoch of fit trains through them."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import keras

from op_specs import SPECS


def _params():
    return [pytest.param(spec, kind, id=f"{spec.name}-{kind}") for spec in SPECS for kind in ("lambda", "layer")]


class _Activation(keras.layers.Layer):
    def __init__(self, fn, attrs, **kwargs):
        super().__init__(**kwargs)
        self.fn, self.attrs = fn, attrs

    def call(self, inputs):
        return self.fn(inputs, **self.attrs)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "jit"])
@pytest.mark.parametrize("spec,kind", _params())
def test_fit_one_epoch(spec, kind, jit):
    attrs = dict(spec.attr_variants[0])
    keras.utils.set_random_seed(0)
    if kind == "lambda":
        act = keras.layers.Lambda(lambda t: spec.forward(t, **attrs))
    else:
        act = _Activation(spec.forward, attrs)
    first = keras.layers.Dense(16)
    model = keras.Sequential([keras.Input((8,)), first, act, keras.layers.Dense(1)])
    # jit: the ops' XLA lowerings (or, in a build without them, the composites).
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", jit_compile=jit)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype("float32")
    y = rng.normal(size=(64, 1)).astype("float32")
    before = first.kernel.numpy().copy()
    history = model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    loss = history.history["loss"]
    assert len(loss) == 1 and np.isfinite(loss[0])
    # The gradient flowed back through the activation into the first layer.
    assert not np.allclose(first.kernel.numpy(), before)
    out = model.predict(x[:4], verbose=0)
    assert out.shape == (4, 1) and np.isfinite(out).all()
    # The activation layer computes the op.
    h = first(tf.constant(x[:4]))
    np.testing.assert_allclose(act(h).numpy(), spec.forward(h, **attrs).numpy())
