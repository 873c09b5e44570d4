"""Running a Keras model stock and under `tf_ops.patch_keras()` from the same state, and
comparing what comes out: the patch tests' shared harness."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

import tf_ops


def snapshot(model: keras.Model) -> list[np.ndarray]:
    """Every variable (weights, moving statistics, dropout seeds), to start runs alike."""
    return [v.numpy() for v in model.variables]


def restore(model: keras.Model, values: list[np.ndarray]) -> None:
    for v, a in zip(model.variables, values):
        v.assign(a)


def step(model: keras.Model, x, y=None, loss=None, training=True) -> dict[str, np.ndarray]:
    """One forward and backward pass, eager: the outputs, the loss (or the sum of the
    outputs weighted by fixed random numbers), the gradients of every trainable weight
    and the non-trainable variables after it (moving statistics), by path."""
    with tf.GradientTape() as tape:
        out = model(x, training=training)
        if loss is not None:
            value = loss(y, out)
        else:
            w = np.random.default_rng(1).normal(size=out.shape).astype(out.dtype.name)
            value = tf.reduce_sum(tf.cast(out, tf.float32) * w)
    grads = tape.gradient(value, model.trainable_weights)
    result = {"output": tf.convert_to_tensor(out).numpy(), "loss": np.asarray(value)}
    for i, (v, g) in enumerate(zip(model.trainable_weights, grads)):
        assert g is not None, f"no gradient for {v.path}"
        result[f"grad {i} {v.path}"] = tf.convert_to_tensor(g).numpy()
    for i, v in enumerate(model.non_trainable_weights):
        result[f"state {i} {v.path}"] = np.asarray(v.numpy())
    return result


def relative_errors(result: dict, reference: dict) -> dict[str, float]:
    """Per kind (output, loss, grad, state): the L2 norm of the difference from
    `reference` (a run of the same model in float64: its keys may name other paths)
    over the reference's norm, all arrays of the kind together."""
    kinds: dict[str, list[float]] = {}
    for (key, a), b in zip(result.items(), reference.values()):
        diff, norm = kinds.setdefault(key.split()[0], [0.0, 0.0]), None
        b = b.astype(np.float64)
        diff[0] += float(np.sum((a.astype(np.float64) - b) ** 2))
        diff[1] += float(np.sum(b * b))
        del norm
    return {kind: (d / max(n, 1e-300)) ** 0.5 for kind, (d, n) in kinds.items()}


def stock_and_patched(model, x, y=None, loss=None, training=True, **patch_kwargs):
    """`step` of `model` stock, then patched, from the same variables."""
    start = snapshot(model)
    stock = step(model, x, y, loss, training)
    restore(model, start)
    with tf_ops.patch_keras(**patch_kwargs):
        patched = step(model, x, y, loss, training)
    restore(model, start)
    return stock, patched


def assert_close(stock: dict, patched: dict, rtol: float = 2e-5, atol: float = 2e-6) -> None:
    """Each array within `rtol` of the other, plus `atol` times the largest magnitude of
    its kind (outputs, gradients, state): float32 rounding, where a gradient that is 0
    in exact arithmetic (a bias before a batch norm) is rounding noise on that scale."""
    assert stock.keys() == patched.keys()
    scale = {kind: max(float(np.max(np.abs(a))) for k, a in stock.items() if k.split()[0] == kind)
             for kind in {k.split()[0] for k in stock}}
    # The loss sums outputs (weighted): its rounding is on the outputs' scale, however
    # much the sum cancels.
    scale["loss"] = max(scale.get("loss", 0.0), scale.get("output", 0.0))
    for key, a in stock.items():
        np.testing.assert_allclose(patched[key], a, rtol=rtol,
                                   atol=atol * scale[key.split()[0]] + 1e-30, err_msg=key)


def fused_op_types(model, x, training=True, **patch_kwargs) -> set[str]:
    """The TfOps> op types in the graph of `model`'s forward and backward pass, traced
    under `tf_ops.patch_keras(**patch_kwargs)`."""
    x = tf.nest.map_structure(tf.convert_to_tensor, x)

    @tf.function
    def run(x):
        with tf.GradientTape() as tape:
            out = model(x, training=training)
            total = tf.reduce_sum(tf.cast(out, tf.float32))
        return tape.gradient(total, model.trainable_weights)

    with tf_ops.patch_keras(**patch_kwargs):
        graph = run.get_concrete_function(x).graph
    return {op.type for op in graph.get_operations() if op.type.startswith("TfOps>")}
