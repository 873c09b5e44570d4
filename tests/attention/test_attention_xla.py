"""Attention under jit_compile: TfOps>Attention and TfOps>AttentionGrad lowered to XLA
custom calls into the CPU engine (XLA FFI, platform "Host"), and to the composite where
no handler is used (forced here with TF_OPS_XLA_CUSTOM_CALLS=0).

Forward and gradients (the grad op) bit-identical to the non-jit op through the custom
calls, and against a float64 reference on both paths, for every dtype and the attribute
variants (grouped heads, causal with T != S, a broadcast mask with fully masked rows,
bias, window, soft cap); that the compiled HLO holds the custom calls and no
[batch, heads, T, S] array; bad input raising InvalidArgumentError under jit; and that
the FFI lookup core/xla_custom_call.cc declares still matches the wheel's header.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from tf_ops.python.core.library import load_library

TF_CAN_BUILD_LOWERINGS = tuple(int(p) for p in tf.__version__.split(".")[:2]) >= (2, 20)
pytestmark = pytest.mark.skipif(
    not TF_CAN_BUILD_LOWERINGS, reason="TensorFlow < 2.20 builds no XLA lowerings"
)

DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
DTYPE_IDS = ("half", "bfloat16", "float", "double")
# Relative to the largest reference value: the inputs are rounded to the dtype first,
# so what is left is the engine's float (double) math and the output's rounding.
RTOL = {tf.float16: 4e-3, tf.bfloat16: 3e-2, tf.float32: 2e-5, tf.float64: 1e-11}
NEG_INF = -np.inf


def _ops():
    info = tf_ops.build_info()
    assert info is not None and info.xla, f"needs the library built with XLA; {info}"
    return load_library()


# Cases: (B, T, S, N, K, D, Dv), the mask's and bias's shapes (None: none) and attributes.
CASES = {
    "plain": ((2, 5, 7, 4, 2, 8, 6), None, None, dict(causal=False)),
    "causal_t_gt_s_masked": (
        (2, 7, 5, 4, 1, 8, 8), (2, 1, 7, 5), (1, 4, 7, 5), dict(causal=True)),
    "window_softcap": (
        (1, 9, 9, 2, 2, 4, 4), (9, 9), (9,), dict(causal=True, window=3, softcap=2.0)),
    "mask_heads": ((1, 6, 8, 4, 2, 4, 4), (1, 4, 1, 8), None, dict(scale=0.3)),
}


def _inputs(case, dtype, seed=0):
    (b, t, s, n, k, d, dv), mask_shape, bias_shape, attrs = CASES[case]
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(b, t, n, d))
    key = rng.normal(size=(b, s, k, d))
    v = rng.normal(size=(b, s, k, dv))
    dout = rng.normal(size=(b, t, n, dv))
    if mask_shape is None:
        mask = np.array(True)
    else:
        mask = rng.random(mask_shape) > 0.3
        mask.reshape(-1, mask_shape[-1])[0] = False  # a row with no key kept
    bias = np.array(0.0) if bias_shape is None else rng.normal(size=bias_shape)
    # Rounded to the dtype, so that the reference sees what the op sees.
    rounded = [tf.cast(tf.cast(x, dtype), tf.float64).numpy() for x in (q, key, v, bias, dout)]
    q, key, v, bias, dout = rounded
    attrs = dict(attrs)
    attrs.setdefault("scale", 1.0 / np.sqrt(d))
    # The float attributes are float32: the reference takes what the op sees.
    for name in ("scale", "softcap"):
        if name in attrs:
            attrs[name] = float(np.float32(attrs[name]))
    return q, key, v, mask, bias, dout, attrs


def _reference(q, k, v, mask, bias, causal=False, scale=1.0, window=-1, softcap=0.0):
    """Keras's attention in float64 (einsum, masked softmax, einsum); a row with no kept
    key is uniform over all keys. Returns (output, lse)."""
    q, k, v = (tf.constant(x, tf.float64) for x in (q, k, v))
    b, t, n, _ = q.shape
    s, kh = k.shape[1], k.shape[2]
    k = tf.repeat(k, n // kh, axis=2)
    v = tf.repeat(v, n // kh, axis=2)
    logits = tf.einsum("btnd,bsnd->bnts", q, k) * scale
    if np.ndim(bias):
        logits += tf.cast(bias, tf.float64)
    if softcap > 0:
        logits = softcap * tf.tanh(logits / softcap)
    kept = tf.broadcast_to(tf.constant(mask), (b, n, t, s))
    ti = np.arange(t)[:, None]
    si = np.arange(s)[None, :]
    position = np.ones((t, s), bool)
    if causal:
        position &= si <= ti
    if window >= 0:
        position &= np.abs(ti - si) < window
    kept = tf.logical_and(kept, position)
    dead = tf.logical_not(tf.reduce_any(kept, axis=-1, keepdims=True))
    x = tf.where(kept, logits, NEG_INF)
    lse = tf.reduce_logsumexp(x, axis=-1)
    probs = tf.where(dead, 1.0 / s, tf.exp(x - lse[..., None]))
    out = tf.einsum("bnts,bsnd->btnd", probs, v)
    return out, tf.where(dead[..., 0], NEG_INF, lse)


def _reference_grads(q, k, v, mask, bias, dout, **attrs):
    q, k, v = (tf.constant(x, tf.float64) for x in (q, k, v))
    with tf.GradientTape() as tape:
        tape.watch([q, k, v])
        out, _ = _reference(q, k, v, mask, bias, **attrs)
    return tape.gradient(out, [q, k, v], output_gradients=tf.constant(dout, tf.float64))


def _reference_bias_grad(q, k, v, mask, bias, dout, **attrs):
    bias = tf.constant(bias, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(bias)
        out, _ = _reference(q, k, v, mask, bias, **attrs)
    return tape.gradient(out, bias, output_gradients=tf.constant(dout, tf.float64))


def _jit_functions(ops, dtype, attrs):
    lse_type = tf.float64 if dtype == tf.float64 else tf.float32

    def forward(q, k, v, mask, bias):
        return ops.tf_ops_attention(query=q, key=k, value=v, mask=mask, bias=bias, L=lse_type,
                                    **attrs)

    def backward(q, k, v, mask, bias, dout):
        out, lse = forward(q, k, v, mask, bias)
        return ops.tf_ops_attention_grad(query=q, key=k, value=v, mask=mask, bias=bias,
                                         output=out, lse=lse, doutput=dout, **attrs)

    def bias_grad(q, k, v, mask, bias, dout):
        out, lse = forward(q, k, v, mask, bias)
        return ops.tf_ops_attention_bias_grad(query=q, key=k, value=v, mask=mask, bias=bias,
                                              output=out, lse=lse, doutput=dout, **attrs)

    return forward, backward, bias_grad


def _assert_close(actual, expected, dtype, what):
    actual = tf.cast(actual, tf.float64).numpy()
    expected = np.asarray(expected)
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isfinite(actual), finite, err_msg=what)
    np.testing.assert_array_equal(actual[~finite], expected[~finite], err_msg=what)
    scale = max(1.0, float(np.max(np.abs(expected[finite]), initial=0.0)))
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=0,
                               atol=RTOL[dtype] * scale, err_msg=what)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_jit_forward_and_gradients_match_float64_reference(case, dtype, xla_path):
    ops = _ops()
    q, k, v, mask, bias, dout, attrs = _inputs(case, dtype)
    forward, backward, bias_grad = _jit_functions(ops, dtype, attrs)
    args = [tf.constant(x, dtype) for x in (q, k, v)]
    args += [tf.constant(mask), tf.constant(bias, dtype)]
    out, lse = tf.function(forward, jit_compile=True)(*args)
    dq, dk, dv = tf.function(backward, jit_compile=True)(*args, tf.constant(dout, dtype))
    # The non-jit op (the TF kernels over the same engine).
    eager = [*forward(*args), *backward(*args, tf.constant(dout, dtype))]
    jitted = [out, lse, dq, dk, dv]
    if xla_path == "custom_call":
        # The same engine, whose results do not depend on the threads: the same bits.
        for name, got, want in zip(("output", "lse", "dquery", "dkey", "dvalue"), jitted,
                                   eager):
            np.testing.assert_array_equal(tf.cast(got, tf.float64).numpy(),
                                          tf.cast(want, tf.float64).numpy(), err_msg=name)
    ref_out, ref_lse = _reference(q, k, v, mask, bias, **attrs)
    ref_grads = _reference_grads(q, k, v, mask, bias, dout, **attrs)
    assert out.dtype == dtype and lse.dtype == (tf.float64 if dtype == tf.float64
                                                else tf.float32)
    _assert_close(out, ref_out, dtype, "output")
    _assert_close(lse, ref_lse, tf.float32 if dtype != tf.float64 else dtype, "lse")
    for name, got, ref in zip(("dquery", "dkey", "dvalue"), (dq, dk, dv), ref_grads):
        _assert_close(got, ref, dtype, name)
    if np.ndim(bias):  # TfOps>AttentionBiasGrad: dq, dk, dv and dbias
        *grads, d_bias = tf.function(bias_grad, jit_compile=True)(
            *args, tf.constant(dout, dtype))
        if xla_path == "custom_call":
            for name, got, want in zip(("dquery", "dkey", "dvalue", "dbias"),
                                       [*grads, d_bias],
                                       bias_grad(*args, tf.constant(dout, dtype))):
                np.testing.assert_array_equal(tf.cast(got, tf.float64).numpy(),
                                              tf.cast(want, tf.float64).numpy(),
                                              err_msg=name)
            for name, got, want in zip(("dquery", "dkey", "dvalue"), grads, (dq, dk, dv)):
                np.testing.assert_array_equal(tf.cast(got, tf.float64).numpy(),
                                              tf.cast(want, tf.float64).numpy(),
                                              err_msg=f"{name} with the bias gradient")
        for name, got, ref in zip(("dquery", "dkey", "dvalue"), grads, ref_grads):
            _assert_close(got, ref, dtype, f"{name} with the bias gradient")
        assert d_bias.shape == bias.shape
        _assert_close(d_bias, _reference_bias_grad(q, k, v, mask, bias, dout, **attrs),
                      dtype, "dbias")


def _hlo(fn, *args) -> str:
    return tf.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)(stage="hlo")


def _array_sizes(hlo: str) -> list[int]:
    """The element counts of the floating-point and boolean arrays in `hlo` (the u8
    scratch of the Host backward is O(S (D + Dv)) bytes: left out)."""
    sizes = []
    for dims in re.findall(r"\b(?:pred|f16|bf16|f32|f64)\[([0-9,]*)\]", hlo):
        sizes.append(int(np.prod([int(d) for d in dims.split(",") if d])))
    return sizes


@pytest.mark.parametrize("dtype", (tf.float32, tf.bfloat16), ids=("float", "bfloat16"))
def test_hlo_is_custom_calls_without_the_logits(dtype, xla_path):
    """Forward and backward compile to the two custom calls, and no array as large as
    the [B, N, T, S] logits exists (the composite has them: the check can fail)."""
    ops = _ops()
    b, t, s, n, k, d = 1, 16, 24, 2, 1, 4  # B N T S = 768 > every input
    rng = np.random.default_rng(1)
    args = [tf.constant(rng.normal(size=shape), dtype)
            for shape in ((b, t, n, d), (b, s, k, d), (b, s, k, d))]
    args += [tf.constant(rng.random((b, 1, t, s)) > 0.2), tf.constant(0.0, dtype)]
    dout = tf.constant(rng.normal(size=(b, t, n, d)), dtype)
    _, backward, _ = _jit_functions(ops, dtype, dict(scale=0.5, causal=True))
    hlo = _hlo(backward, *args, dout)
    logits = b * n * t * s
    largest = max(_array_sizes(hlo))
    if xla_path == "custom_call":
        assert 'custom_call_target="tf_ops_attention_forward"' in hlo, hlo
        assert 'custom_call_target="tf_ops_attention_backward"' in hlo, hlo
        assert "API_VERSION_TYPED_FFI" in hlo, hlo
        assert largest < logits, (largest, hlo)
    else:
        assert "custom-call" not in hlo, hlo
        assert largest >= logits, (largest, hlo)


def test_bad_input_raises_invalid_argument_under_jit():
    """Shapes unknown when tracing (so the shape function lets them through) are checked
    by the lowering when XLA compiles: heads not divisible, masks that do not broadcast."""
    ops = _ops()
    spec = tf.TensorSpec([None] * 4, tf.float32)

    @tf.function(jit_compile=True, input_signature=[spec, spec, spec,
                                                    tf.TensorSpec(None, tf.bool)])
    def attend(q, k, v, mask):
        return ops.tf_ops_attention(query=q, key=k, value=v, mask=mask, bias=0.0, scale=1.0)

    q = tf.zeros((1, 4, 3, 8))
    kv = tf.zeros((1, 5, 2, 8))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"must divide the query heads"):
        attend(q, kv, kv, tf.constant(True))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"mask of shape \[3,5\]"):
        attend(tf.zeros((1, 4, 2, 8)), kv, kv, tf.ones((3, 5), tf.bool))


def test_ffi_lookup_declaration_matches_the_wheel():
    """core/xla_custom_call.cc declares xla::ffi::FindHandler and HandlerRegistration as
    the wheel's xla/ffi/ffi_api.h does (that header cannot be compiled against the
    wheel); a TensorFlow that changes them must fail here, not at run time."""
    header = Path(tf.sysconfig.get_include(), "xla/ffi/ffi_api.h").read_text()
    assert re.search(r"struct HandlerRegistration \{\s*XLA_FFI_Metadata metadata;\s*"
                     r"XLA_FFI_Handler_Bundle bundle;\s*\};", header)
    assert re.search(r"absl::StatusOr<HandlerRegistration> FindHandler\(absl::string_view name,"
                     r"\s*absl::string_view platform\);", header)
