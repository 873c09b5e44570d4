"""`tf_ops.attention` (the attention family, issue 45): values against a float64 NumPy
reference written from the contract (attention_params.h) and against Keras's own
``dot_product_attention`` in float64 (its masks, causal alignment and fully masked rows
are the spec), four dtypes, grouped and multi-query heads, masks with dead rows, bias,
sliding window, soft cap, head dims 1 to 256 and lengths across the tiles; gradients
(`tf.test.compute_gradient`, first and second order, and the fused backward against the
composite's); no [B, N, T, S] tensor in the forward or backward graph; the portable
composite; XLA; bad input at graph build and at run time."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from checks import assert_each_case
from tf_ops.python.attention import functions as attn

DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
# Output tolerance relative to max |value|: the dtype's rounding of the inputs and the
# output (the math runs in float32, float64 for float64).
TOL = {tf.float16: 4e-3, tf.bfloat16: 3e-2, tf.float32: 3e-6, tf.float64: 1e-13}


# ------------------------------------------------------------ the reference ---


def ref_attention(q, k, v, mask=None, bias=None, causal=False, scale=None, window=None,
                  softcap=None):
    """The contract in float64 NumPy: grouped heads by repetition, Keras's causal
    alignment, dead rows uniform over all keys."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    b, t, n, d = q.shape
    s, kh = k.shape[1], k.shape[2]
    k = np.repeat(k, n // kh, axis=2)
    v = np.repeat(v, n // kh, axis=2)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    logits = np.einsum("btnd,bsnd->bnts", q, k) * np.float64(np.float32(scale))
    if bias is not None:
        logits = logits + np.asarray(bias, np.float64)
    if softcap:
        c = np.float64(np.float32(softcap))
        logits = c * np.tanh(logits / c)
    kept = np.ones((b, n, t, s), bool)
    if mask is not None:
        kept &= np.broadcast_to(np.asarray(mask, bool), kept.shape)
    rows, cols = np.arange(t)[:, None], np.arange(s)[None, :]
    if causal:
        kept &= cols <= rows
    if window is not None:
        kept &= np.abs(rows - cols) < window
    dead = ~kept.any(-1, keepdims=True)
    logits = np.where(kept, logits, -np.inf)
    logits = np.where(dead, 0.0, logits)
    if s > 0:
        logits = logits - logits.max(-1, keepdims=True)
    p = np.exp(logits)
    p = p / np.maximum(p.sum(-1, keepdims=True), 1e-300)
    return np.einsum("bnts,bsnd->btnd", p, v)


def rounded(x: np.ndarray, dtype) -> tuple[tf.Tensor, np.ndarray]:
    """x in `dtype`, and those values in float64."""
    t = tf.cast(tf.constant(x, tf.float64), dtype)
    return t, tf.cast(t, tf.float64).numpy()


def random_inputs(rng, b, t, s, n, kh, d, dv=None, dtype=tf.float32):
    dv = d if dv is None else dv
    q = rng.standard_normal((b, t, n, d))
    k = rng.standard_normal((b, s, kh, d))
    v = rng.standard_normal((b, s, kh, dv))
    return [rounded(x, dtype) for x in (q, k, v)]


# Each case: sizes (b, t, s, n, kh, d, dv) and keyword arguments.
CASES = [
    ((1, 5, 5, 2, 2, 8, 8), {}),
    ((2, 17, 17, 4, 2, 16, 16), dict(causal=True)),
    ((1, 130, 130, 2, 1, 64, 64), dict(causal=True)),  # multi-query, across tiles
    ((1, 70, 200, 3, 3, 32, 24), {}),  # T != S, value_dim != head_dim
    ((1, 9, 20, 2, 2, 8, 8), dict(causal=True)),  # T < S: Keras's alignment
    ((1, 20, 9, 2, 2, 8, 8), dict(causal=True)),  # T > S
    ((2, 33, 33, 4, 2, 16, 16), dict(mask="padding")),
    ((2, 66, 66, 2, 2, 16, 16), dict(mask="padding", causal=True)),
    ((1, 40, 40, 2, 2, 16, 16), dict(mask="dead")),  # fully masked rows
    ((1, 150, 150, 2, 2, 16, 16), dict(window=37, causal=True)),
    ((1, 50, 50, 2, 2, 16, 16), dict(window=5)),
    ((1, 30, 30, 2, 1, 16, 16), dict(softcap=2.0, causal=True)),
    ((2, 12, 14, 4, 2, 8, 8), dict(bias="full")),
    ((1, 12, 14, 4, 4, 8, 8), dict(bias="row")),
    ((1, 7, 7, 2, 2, 1, 1), dict(causal=True)),  # head_dim 1
    ((1, 20, 20, 2, 1, 80, 80), {}),
    ((1, 20, 20, 2, 2, 256, 256), dict(causal=True, scale=0.05)),
    ((1, 3, 0, 2, 2, 8, 8), {}),  # no keys: zeros, as Keras's empty sum
]


def case_operands(rng, sizes, kwargs, dtype):
    b, t, s, n, kh, d, dv = sizes
    (q, q64), (k, k64), (v, v64) = random_inputs(rng, b, t, s, n, kh, d, dv, dtype)
    kwargs = dict(kwargs)
    mask = kwargs.pop("mask", None)
    if mask == "padding":  # keras-hub's [B, 1, T, S]: each batch's last keys padded
        lengths = rng.integers(1, s + 1, size=b)
        mask = np.arange(s)[None, None, None, :] < lengths[:, None, None, None]
        mask = np.broadcast_to(mask, (b, 1, t, s))
    elif mask == "dead":  # every third query row keeps nothing
        mask = rng.random((b, n, t, s)) < 0.5
        mask[:, :, ::3, :] = False
    bias = kwargs.pop("bias", None)
    if bias == "full":
        bias = rng.standard_normal((b, n, t, s))
    elif bias == "row":
        bias = rng.standard_normal((1, 1, 1, s))
    elif bias == "heads":  # T5's relative position bias: shared by the batch
        bias = rng.standard_normal((1, n, t, s))
    elif bias == "key":  # a per-key bias of each batch row (ALiBi-like padding)
        bias = rng.standard_normal((b, 1, 1, s))
    bias_t = bias64 = None
    if bias is not None:
        bias_t, bias64 = rounded(bias, dtype)
    return (q, k, v, mask, bias_t, kwargs), (q64, k64, v64, mask, bias64)


def test_values_against_reference():
    rng = np.random.default_rng(0)

    def check(case):
        (sizes, kwargs), dtype = case
        (q, k, v, mask, bias, kw), (q64, k64, v64, mask64, bias64) = case_operands(
            rng, sizes, kwargs, dtype)
        got = tf_ops.attention(q, k, v, mask=None if mask is None else tf.constant(mask),
                               bias=bias, **kw)
        want = ref_attention(q64, k64, v64, mask64, bias64, **kw)
        scale = max(np.abs(v64).max(), 1.0) if v64.size else 1.0
        err = np.abs(tf.cast(got, tf.float64).numpy() - want).max() if want.size else 0.0
        assert got.dtype == dtype and got.shape == want.shape, (got.shape, want.shape)
        assert err <= TOL[dtype] * scale, f"{sizes} {kwargs} {dtype.name}: error {err:.3g}"

    assert_each_case([(c, dt) for c in CASES for dt in DTYPES], check)


def test_against_keras_float64():
    """Keras's own attention (TensorFlow backend) in float64 is the spec where it has the
    feature: masks ([B, 1, T, S] with dead rows), causal with T != S, grouped heads
    (more than one KV head), bias, scale."""
    from keras.src.backend.tensorflow import nn as keras_nn

    rng = np.random.default_rng(1)
    cases = [c for c in CASES if c[0][4] > 1 and c[0][2] > 0
             and not {"window", "softcap"} & set(c[1])]

    def check(case):
        sizes, kwargs = case
        (q, k, v, mask, bias, kw), _ = case_operands(rng, sizes, kwargs, tf.float64)
        mask_t = None if mask is None else tf.constant(mask)
        got = tf_ops.attention(q, k, v, mask=mask_t, bias=bias, **kw)
        want = keras_nn.dot_product_attention(q, k, v, bias=bias, mask=mask_t,
                                              scale=kw.get("scale"),
                                              is_causal=kw.get("causal", False))
        err = np.abs(got.numpy() - want.numpy()).max()
        assert err <= 1e-12, f"{sizes} {kwargs}: error {err:.3g} against Keras"

    assert_each_case(cases, check)


def _grad_case(seed, sizes, kwargs):
    rng = np.random.default_rng(seed)
    (q, k, v, mask, bias, kw), _ = case_operands(rng, sizes, kwargs, tf.float64)
    mask = None if mask is None else tf.constant(mask)
    return q, k, v, mask, bias, kw


GRAD_CASES = [
    ((1, 6, 6, 2, 1, 4, 3), dict(causal=True)),
    ((2, 5, 7, 2, 2, 3, 3), dict(mask="dead")),
    ((1, 5, 5, 4, 2, 3, 3), dict(softcap=1.5, window=2)),
    ((1, 4, 6, 2, 2, 3, 3), dict(bias="full")),
    # TfOps>AttentionBiasGrad summing over what the bias is broadcast along.
    ((3, 5, 6, 4, 2, 3, 3), dict(bias="heads", causal=True)),
    ((2, 4, 5, 2, 1, 3, 2), dict(bias="key", softcap=2.0, mask="dead")),
]


@pytest.mark.parametrize("sizes,kwargs", GRAD_CASES)
def test_gradients_compute_gradient(sizes, kwargs):
    q, k, v, mask, bias, kw = _grad_case(2, sizes, kwargs)
    operands = [q, k, v] + ([bias] if bias is not None else [])

    def f(*xs):
        b = xs[3] if bias is not None else None
        return tf_ops.attention(xs[0], xs[1], xs[2], mask=mask, bias=b, **kw)

    # delta 1e-5: the central difference's error (delta^2 times the third derivative)
    # below 1e-9 in float64.
    theoretical, numerical = tf.test.compute_gradient(f, operands, delta=1e-5)
    for i, (a, n) in enumerate(zip(theoretical, numerical)):
        np.testing.assert_allclose(a, n, atol=1e-8, err_msg=f"operand {i}")


@pytest.mark.parametrize("sizes,kwargs", GRAD_CASES[:3])
def test_second_order_compute_gradient(sizes, kwargs):
    q, k, v, mask, bias, kw = _grad_case(3, sizes, kwargs)
    up = tf.constant(np.random.default_rng(4).standard_normal(
        (sizes[0], sizes[1], sizes[3], sizes[6])))

    def first(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = tf_ops.attention(q, k, v, mask=mask, **kw)
        dq, dk, dv = tape.gradient(out, [q, k, v], output_gradients=up)
        return tf.reduce_sum(dq * dq) + tf.reduce_sum(dk * q[:, :1, :1, :1]) + \
            tf.reduce_sum(dv * dv)

    theoretical, numerical = tf.test.compute_gradient(first, [q, k, v], delta=1e-5)
    for i, (a, n) in enumerate(zip(theoretical, numerical)):
        np.testing.assert_allclose(a, n, atol=1e-7, err_msg=f"operand {i}")


def test_fused_backward_against_composite():
    """dq, dk, dv of the fused backward equal the composite's, every case and dtype."""
    rng = np.random.default_rng(5)

    def check(case):
        (sizes, kwargs), dtype = case
        (q, k, v, mask, bias, kw), _ = case_operands(rng, sizes, kwargs, dtype)
        mask = None if mask is None else tf.constant(mask)
        up = tf.cast(tf.constant(rng.standard_normal(
            (sizes[0], sizes[1], sizes[3], sizes[6]))), dtype)
        attrs = attn.op_attrs(sizes[5], kw.get("scale"), kw.get("causal", False),
                              kw.get("window"), kw.get("softcap"))
        grads = []
        operands = [q, k, v] + ([bias] if bias is not None else [])
        for fused in (True, False):
            xs = operands if fused else [tf.cast(t, tf.float64) for t in operands]
            with tf.GradientTape() as tape:
                tape.watch(xs)
                b = xs[3] if bias is not None else None
                if fused:
                    out = tf_ops.attention(*xs[:3], mask=mask, bias=b, **kw)
                else:
                    out = attn.composite(*xs[:3], mask, b, attrs)
            grads.append(tape.gradient(out, xs, output_gradients=tf.cast(up, out.dtype)))
        for name, a, b in zip(["q", "k", "v", "bias"], *grads):
            b = b.numpy()
            bound = TOL[dtype] * 20 * max(np.abs(b).max(), 1.0)
            err = np.abs(tf.cast(a, tf.float64).numpy() - b).max() if b.size else 0.0
            assert err <= bound, f"{sizes} {kwargs} {dtype.name} d{name}: {err:.3g} > {bound:.3g}"

    cases = [c for c in CASES if c[0][2] > 0]
    assert_each_case([(c, dt) for c in cases for dt in (tf.float32, tf.float64, tf.bfloat16)],
                     check)


def test_deterministic():
    rng = np.random.default_rng(6)
    (q, _), (k, _), (v, _) = random_inputs(rng, 1, 100, 100, 4, 1, 32)

    def run():
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = tf_ops.attention(q, k, v, causal=True)
        return [out] + tape.gradient(out, [q, k, v], output_gradients=tf.ones_like(out))

    first, second = run(), run()
    for a, b in zip(first, second):
        assert np.array_equal(a.numpy(), b.numpy())


def test_bias_gradient_second_order():
    """The bias gradient op's own gradient (composed from the composite) against
    finite differences, through query, key, value and the bias."""
    q, k, v, mask, bias, kw = _grad_case(7, (2, 4, 5, 2, 1, 3, 3), dict(bias="heads"))
    up = tf.constant(np.random.default_rng(8).standard_normal((2, 4, 2, 3)))

    def first(q, k, v, bias):
        with tf.GradientTape() as tape:
            tape.watch(bias)
            out = tf_ops.attention(q, k, v, mask=mask, bias=bias, **kw)
        d_bias = tape.gradient(out, bias, output_gradients=up)
        return tf.reduce_sum(d_bias * d_bias)

    theoretical, numerical = tf.test.compute_gradient(first, [q, k, v, bias], delta=1e-5)
    for i, (a, n) in enumerate(zip(theoretical, numerical)):
        np.testing.assert_allclose(a, n, atol=1e-7, err_msg=f"operand {i}")


def test_bias_gradient_is_fused_deterministic_and_skipped_when_not_asked():
    """A trainable bias broadcast over the batch (T5's) gets its gradient from
    TfOps>AttentionBiasGrad, summed over the batch in a fixed order (the same bits on
    every run); a bias whose gradient nobody asks for costs no bias-gradient op."""
    rng = np.random.default_rng(9)
    (q, k, v, _, bias, kw), _ = case_operands(rng, (3, 40, 40, 4, 2, 16, 16),
                                              dict(bias="heads", causal=True), tf.float32)

    @tf.function
    def step(q, k, v, bias):
        with tf.GradientTape() as tape:
            tape.watch([q, bias])
            out = tf_ops.attention(q, k, v, bias=bias, **kw)
        return tape.gradient(out, [q, bias], output_gradients=tf.ones_like(out) * 0.1)

    @tf.function
    def without(q, k, v, bias):
        with tf.GradientTape() as tape:
            tape.watch(q)
            out = tf_ops.attention(q, k, v, bias=bias, **kw)
        return tape.gradient(out, q)

    types = {op.type for op in step.get_concrete_function(q, k, v, bias).graph
             .get_operations()}
    assert "TfOps>AttentionBiasGrad" in types, types
    types = {op.type for op in without.get_concrete_function(q, k, v, bias).graph
             .get_operations()}
    assert "TfOps>AttentionBiasGrad" not in types and "TfOps>AttentionGrad" in types
    first, second = step(q, k, v, bias), step(q, k, v, bias)
    assert first[1].shape == bias.shape
    for a, b in zip(first, second):
        assert np.array_equal(a.numpy(), b.numpy())


def test_no_t_by_s_tensor_in_graph():
    """Forward and backward of the op hold nothing of size T x S (the memory promise),
    where the composite does."""
    t = 96
    q = tf.TensorSpec([1, t, 2, 16], tf.float32)

    @tf.function
    def step(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = tf_ops.attention(q, k, v, causal=True)
        return tape.gradient(out, [q, k, v])

    graph = step.get_concrete_function(q, q, q).graph
    sizes = [int(np.prod(o.shape.as_list())) for op in graph.get_operations()
             for o in op.outputs if o.shape.is_fully_defined()]
    assert max(sizes) < t * t, max(sizes)
    types = {op.type for op in graph.get_operations()}
    assert {"TfOps>Attention", "TfOps>AttentionGrad"} <= types, types


def test_portable_composite():
    rng = np.random.default_rng(7)
    (q, q64), (k, k64), (v, v64) = random_inputs(rng, 2, 9, 11, 4, 2, 8)
    mask = rng.random((2, 1, 9, 11)) < 0.6
    mask[:, :, 0, :] = False
    with tf_ops.portable():
        graph = tf.function(lambda q, k, v: tf_ops.attention(
            q, k, v, mask=tf.constant(mask), softcap=3.0, window=4)).get_concrete_function(
                q, k, v).graph
        got = tf_ops.attention(q, k, v, mask=tf.constant(mask), softcap=3.0, window=4)
    assert not [op.type for op in graph.get_operations() if op.type.startswith("TfOps>")]
    want = ref_attention(q64, k64, v64, mask, softcap=3.0, window=4)
    np.testing.assert_allclose(got.numpy(), want, atol=3e-6)


def test_jit_compile():
    rng = np.random.default_rng(8)
    (q, q64), (k, k64), (v, v64) = random_inputs(rng, 1, 20, 20, 2, 1, 8)

    @tf.function(jit_compile=True)
    def f(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = tf_ops.attention(q, k, v, causal=True)
        return [out] + tape.gradient(out, [q, k, v])

    got = f(q, k, v)
    want = ref_attention(q64, k64, v64, causal=True)
    np.testing.assert_allclose(got[0].numpy(), want, atol=3e-6)
    with tf.GradientTape() as tape:
        tape.watch([q, k, v])
        out = tf_ops.attention(q, k, v, causal=True)
    eager = tape.gradient(out, [q, k, v])
    for a, b in zip(got[1:], eager):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)


BAD = [
    (([1, 4, 3, 8], [1, 4, 2, 8], [1, 4, 2, 8]), {}, r"key/value heads \(2\) must divide"),
    (([1, 4, 2, 8], [1, 4, 2, 4], [1, 4, 2, 8]), {}, "same head_dim"),
    (([1, 4, 2, 8], [1, 5, 2, 8], [1, 4, 2, 8]), {}, "one length"),
    (([2, 4, 2, 8], [1, 4, 2, 8], [1, 4, 2, 8]), {}, "one batch size"),
    (([1, 4, 2, 8], [1, 4, 2, 8], [1, 4, 2, 8]), dict(mask=[1, 3, 4, 4]),
     r"mask of shape \[1,3,4,4\] does not broadcast"),
    (([1, 4, 2, 8], [1, 4, 2, 8], [1, 4, 2, 8]), dict(bias=[5]), "bias of shape"),
    (([1, 4, 2, 8], [1, 4, 2, 8], [1, 4, 2, 8]), dict(window=-2), "window must be"),
    (([1, 4, 2, 8], [1, 4, 2, 8], [1, 4, 2, 8]), dict(softcap=-1.0), "softcap must be"),
    (([4, 2, 8], [1, 4, 2, 8], [1, 4, 2, 8]), {}, "rank 4"),
]


def _bad_call(shapes, kwargs, make):
    q, k, v = (make(tf.float32, s) for s in shapes)
    kw = dict(kwargs)
    if "mask" in kw:
        kw["mask"] = make(tf.bool, kw["mask"])
    if "bias" in kw:
        kw["bias"] = make(tf.float32, kw["bias"])
    return q, k, v, kw


@pytest.mark.parametrize("shapes,kwargs,match", BAD)
def test_bad_input_at_graph_build(shapes, kwargs, match):
    q, k, v, kw = _bad_call(shapes, kwargs, lambda dt, s: tf.zeros(s, dt))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=match):
        tf_ops.attention(q, k, v, scale=1.0, **kw)


@pytest.mark.parametrize("shapes,kwargs,match", BAD)
def test_bad_input_at_run_time(shapes, kwargs, match):
    """The raw op with unknown static shapes: the kernel's own checks."""
    q, k, v, kw = _bad_call(shapes, kwargs, lambda dt, s: tf.zeros(s, dt))
    mask = kw.pop("mask", tf.constant(True))
    bias = kw.pop("bias", tf.zeros([]))
    attrs = attn.op_attrs(None, 1.0, False, kw.get("window"), kw.get("softcap"))
    specs = [tf.TensorSpec(None, t.dtype) for t in (q, k, v, mask, bias)]
    run = tf.function(lambda *xs: attn.op_fn("Attention")(*xs, **attrs)[0],
                      input_signature=specs)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=match):
        run(q, k, v, mask, bias)
    # The library still works afterwards.
    ok = tf_ops.attention(tf.ones([1, 2, 1, 2]), tf.ones([1, 2, 1, 2]), tf.ones([1, 2, 1, 2]))
    np.testing.assert_allclose(ok.numpy(), 1.0)


def test_wrong_dtypes():
    with pytest.raises(TypeError, match="one dtype"):
        tf_ops.attention(tf.ones([1, 2, 1, 2]), tf.ones([1, 2, 1, 2], tf.float64),
                         tf.ones([1, 2, 1, 2]))
    with pytest.raises(TypeError, match="mask must be bool"):
        tf_ops.attention(tf.ones([1, 2, 1, 2]), tf.ones([1, 2, 1, 2]), tf.ones([1, 2, 1, 2]),
                         mask=tf.ones([1, 1, 2, 2]))


@pytest.mark.slow  # a subprocess runs SavedModel, four TFLite runs and ONNX
def test_portable_export_to_savedmodel_tflite_and_onnx(tmp_path):
    """A causal self-attention model built on tf_ops.attention, exported under
    tf_ops.portable(): SavedModel, TFLite builtins and ONNX run it without tf_ops."""
    import keras
    from export_checks import assert_portable_export_runs

    class SelfAttention(keras.layers.Layer):
        def call(self, x):
            q = tf.reshape(x, [-1, 6, 2, 4])
            return tf.reshape(tf_ops.attention(q, q, q, causal=True, softcap=4.0), [-1, 6, 8])

    keras.utils.set_random_seed(6)
    inp = keras.Input((6, 8))
    h = SelfAttention()(keras.layers.Dense(8)(inp))
    model = keras.Model(inp, keras.layers.Dense(2)(keras.layers.Flatten()(h)))
    x = np.random.default_rng(9).normal(0, 1, (16, 6, 8)).astype(np.float32)
    assert_portable_export_runs(model, x, tmp_path, tol=1e-5)
