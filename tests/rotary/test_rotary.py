"""`tf_ops.rotary_embedding` (the rotary family, issue 25): values against a float64 NumPy
reference written from keras-hub 0.32's definitions (every rope type, axis layouts of rank
2 to 4, a start index, [S] and [B, S] positions and their broadcasts, four dtypes), the
portable composite against the same reference, gradients (`tf.test.compute_gradient`, to
the third order), XLA, keras-hub's own layers (`RotaryEmbedding`, `LlamaRotaryEmbedding`)
and their upstream tests' values, and bad input at graph build and at run time. Lean: each
case family is one loop of eager calls."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from fused_refs import op_types
from tf_ops.python.rotary import functions as rotary
from tf_ops.python.rotary.layers import rotary_kwargs

DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
# The output dtype's unit roundoff, and the compute type's (angles, products).
OUT_EPS = {tf.float16: 2.0**-11, tf.bfloat16: 2.0**-8, tf.float32: 2.0**-24, tf.float64: 2.0**-53}


def compute_eps(dtype) -> float:
    return 2.0**-53 if dtype == tf.float64 else 2.0**-24


# ------------------------------------------------------------ the reference ---


def ref_inverse_frequencies(features: int, rope_type: str = "linear", max_wavelength=10000.0,
                            scaling_factor=1.0, denominator_dim=None, beta_fast=32.0,
                            beta_slow=1.0, original_max_position_embeddings=4096,
                            truncate=True, frequency_adjustment_factor=None,
                            low_freq_factor=None, high_freq_factor=None,
                            pretraining_sequence_length=None, **_) -> np.ndarray:
    """keras-hub 0.32's `_get_inverse_freq` (RotaryEmbedding's, with YaRN's, and
    LlamaRotaryEmbedding's for "llama3"), in float64."""
    idx = np.arange(0, features, 2, dtype=np.float64)
    if rope_type in ("linear", "dynamic"):
        inv = max_wavelength ** (-idx / (denominator_dim or features))
        if rope_type == "linear":
            return inv / scaling_factor
        return inv / scaling_factor ** (features / max(1, features - 2))
    pos_freqs = max_wavelength ** (idx / features)
    if rope_type == "yarn":
        def dim_of(rotations):
            return (features * np.log(original_max_position_embeddings /
                                      (rotations * 2 * np.pi))) / (2 * np.log(max_wavelength))
        low, high = dim_of(beta_fast), dim_of(beta_slow)
        if truncate:
            low, high = np.floor(low), np.ceil(high)
        low, high = max(low, 0.0), min(high, features - 1.0)
        ramp = np.clip((np.arange(features // 2) - low) / max(high - low, 0.001), 0, 1)
        extrapolation_factor = 1 - ramp
        return (1.0 / (scaling_factor * pos_freqs) * (1 - extrapolation_factor)
                + 1.0 / pos_freqs * extrapolation_factor)
    inv = 1.0 / pos_freqs  # llama3
    wavelen = 2 * math.pi / inv
    low_wavelen = pretraining_sequence_length / low_freq_factor
    high_wavelen = pretraining_sequence_length / high_freq_factor
    inv = np.where(wavelen > low_wavelen, inv / frequency_adjustment_factor, inv)
    smooth = (pretraining_sequence_length / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * (inv / frequency_adjustment_factor) + smooth * inv
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, smoothed, inv)


def ref_rotary(x, start_index=0, positions=None, sequence_axis=1, feature_axis=-1,
               transpose=False, **kwargs):
    """(y, |angle| broadcast like y) in float64: keras-hub's call (x's axes moved to
    [batch, sequence, ..., features], x * cos + [-x2, x1] * sin, moved back), with YaRN's
    factor 0.1 ln(s) + 1 on both."""
    x = np.asarray(x, np.float64)
    rank = x.ndim
    seq, feat = sequence_axis % rank, feature_axis % rank
    if rank == 2:
        moved = x if (seq, feat) == (0, 1) else x.T
    else:
        moved = np.moveaxis(x, (feat, seq), (-1, 1))
    length = moved.shape[-2] if rank == 2 else moved.shape[1]
    if positions is None:
        pos = (np.arange(length, dtype=np.float64) + float(start_index))[None]
    else:
        pos = np.asarray(positions, np.float64)
        pos = pos[None] if pos.ndim == 1 else pos
    inv = ref_inverse_frequencies(x.shape[feat], **kwargs)
    theta = np.concatenate([pos[..., None] * inv] * 2, axis=-1)  # [B', S', D]
    if rank == 2:
        theta = theta[0]
    for _ in range(rank - 3):
        theta = theta[..., None, :]
    m = 0.1 * np.log(kwargs.get("scaling_factor", 1.0)) + 1 if kwargs.get("rope_type") == "yarn" else 1.0
    x1, x2 = np.split(moved, 2, axis=-1)
    rotated = np.concatenate([-x2, x1], axis=-1)
    y = m * (moved * np.cos(theta) + (-1 if transpose else 1) * rotated * np.sin(theta))
    theta = np.broadcast_to(np.abs(theta), y.shape)
    partner = np.broadcast_to(np.abs(rotated), y.shape)
    if rank == 2:
        back = (lambda a: a) if (seq, feat) == (0, 1) else (lambda a: a.T)
    else:
        back = lambda a: np.moveaxis(a, (-1, 1), (feat, seq))  # noqa: E731
    return back(y), back(theta), back(np.abs(moved) + partner) * m


def assert_rotary_close(got, x, what, dtype, slack=1.0, **kwargs):
    """got within the roundings the op may make of the float64 truth: the angle's
    (a few of |theta| 2^-23 in float32: the frequency's pow, YaRN's and Llama 3.1's
    interpolation of two frequencies, the product's; libm's pow differs by ISA), a few
    of the compute type's, and the output's."""
    want, theta, scale = ref_rotary(x, **kwargs)
    got = np.asarray(tf.cast(got, tf.float64))
    assert got.shape == want.shape, (what, got.shape, want.shape)
    ce = compute_eps(dtype)
    bound = slack * (scale * (4 * ce * theta + 8 * ce) + 2 * OUT_EPS[dtype] * np.abs(want)) + 1e-300
    err = np.abs(got - want)
    bad = ~(err <= bound)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, err / bound, 0)), err.shape)
        raise AssertionError(f"{what}: {int(bad.sum())}/{bad.size} outside; worst at {i}: got "
                             f"{got[i]!r}, want {want[i]!r} (bound {bound[i]:.3g})")


def call(x, start_index=0, positions=None, **kwargs):
    return tf_ops.rotary_embedding(x, start_index, positions, **kwargs)


# Layouts (shape, sequence_axis, feature_axis), positions (start, [S], [B, S] and their
# broadcasts), rope types.
CASES = [
    ((2, 9, 16), dict()),
    ((2, 9, 3, 16), dict(start_index=100)),
    ((2, 9, 3, 130), dict(positions="S", rope_type="dynamic", scaling_factor=4.0)),
    ((3, 7, 2, 64), dict(positions="BS", rope_type="yarn", scaling_factor=8.0)),
    ((3, 7, 2, 64), dict(positions="1S", rope_type="yarn", scaling_factor=4.0, beta_fast=16.0,
                         beta_slow=2.0, original_max_position_embeddings=2048, truncate=False)),
    ((3, 7, 2, 128), dict(positions="B1", rope_type="llama3", max_wavelength=500000.0,
                          frequency_adjustment_factor=8.0, low_freq_factor=1.0,
                          high_freq_factor=4.0, pretraining_sequence_length=8192)),
    ((2, 5, 3, 18), dict(start_index=7, denominator_dim=32, scaling_factor=2.0)),
    ((2, 3, 9, 16), dict(sequence_axis=2, positions="BS")),          # [B, H, S, D]
    ((9, 2, 3, 16), dict(sequence_axis=0, positions="BS")),          # [S, B, H, D]
    ((2, 12, 7), dict(sequence_axis=-1, feature_axis=-2, positions="BS")),  # [B, D, S]
    ((2, 5, 10, 3), dict(feature_axis=2, start_index=3)),            # [B, S, D, H]
    ((7, 4), dict(sequence_axis=0, feature_axis=1, positions="S")),  # [S, D]
    ((4, 7), dict(sequence_axis=1, feature_axis=0)),                 # [D, S]
    ((1, 1, 2), dict(start_index=4095)),
]


def _case(shape, spec, rng):
    """x (float64 values) and the call's keyword arguments for one CASES entry."""
    kwargs = dict(spec)
    rank = len(shape)
    seq = kwargs.get("sequence_axis", 1) % rank
    feat = kwargs.get("feature_axis", -1) % rank
    batch = [a for a in range(rank) if a not in (seq, feat)]
    b, s = (shape[batch[0]] if batch else 1), shape[seq]
    kind = kwargs.pop("positions", None)
    if kind is not None:
        dims = {"S": [s], "BS": [b, s], "1S": [1, s], "B1": [b, 1]}[kind]
        kwargs["positions"] = rng.integers(0, 4096, dims).astype(np.float64) + (
            rng.uniform(0, 1, dims) if kind == "S" else 0.0)  # fractional positions too
    x = rng.normal(size=shape) * 2.0
    return x, kwargs


def test_values_against_float64_reference_and_the_composite():
    rng = np.random.default_rng(25)
    for shape, spec in CASES:
        x64, kwargs = _case(shape, spec, rng)
        for dtype in DTYPES:
            what = f"{dtype.name} {shape} {spec}"
            x = tf.cast(x64, dtype)
            xs = np.asarray(tf.cast(x, tf.float64))  # the stored values
            y = call(x, **kwargs)
            assert y.dtype == dtype and y.shape == shape, what
            assert_rotary_close(y, xs, what, dtype, **kwargs)
            if dtype in (tf.float32, tf.float64):
                with tf_ops.portable():
                    yp = call(x, **kwargs)
                assert_rotary_close(yp, xs, "portable " + what, dtype, **kwargs)
            # The grad op: the rotation by -theta.
            dx = tf_ops.rotary_embedding_grad(x, **kwargs)
            assert_rotary_close(dx, xs, "grad " + what, dtype, transpose=True, **kwargs)


def test_inverse_frequencies_of_the_composite_match_the_reference():
    for shape, spec in CASES:
        kwargs = {k: v for k, v in spec.items() if k not in ("positions", "start_index")}
        attrs = rotary.op_attrs(**kwargs)
        features = shape[kwargs.get("feature_axis", -1)]
        np.testing.assert_allclose(
            rotary.inverse_frequencies(attrs, features),
            ref_inverse_frequencies(features, **{k: float(np.float32(v)) if isinstance(v, float)
                                                  else v for k, v in kwargs.items()}),
            rtol=1e-14, err_msg=str(spec))


def test_large_and_integer_positions():
    """Angles up to ~1e5 rad: the error is the float32 angle's, |theta| 2^-23, and no more;
    integer positions read as their float32 values."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 64, 4, 32))
    positions = rng.integers(0, 100_000, (2, 64)).astype(np.int32)
    for dtype in (tf.float32, tf.float64):
        y = call(tf.cast(x, dtype), positions=positions)
        assert_rotary_close(y, x, f"large positions {dtype.name}", dtype, positions=positions)
    a = call(tf.constant(x, tf.float32), positions=tf.constant(positions, tf.int64))
    b = call(tf.constant(x, tf.float32), positions=positions.astype(np.float32))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    # A start index as an int tensor (cached decoding), and as a Python int.
    a = call(tf.constant(x, tf.float32), start_index=tf.constant(12345))
    b = call(tf.constant(x, tf.float32), start_index=12345)
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_compute_gradient_to_the_third_order():
    rng = np.random.default_rng(7)
    for shape, kwargs in (((2, 3, 2, 4), dict(start_index=3, rope_type="yarn", scaling_factor=2.0)),
                          ((2, 4, 3), dict(sequence_axis=2, feature_axis=1,
                                           positions=np.array([[1.0, 5.0, 9.0], [2.0, 0.5, 7.0]])))):
        x = tf.constant(rng.normal(size=shape))
        u = tf.constant(rng.normal(size=shape))
        v = tf.constant(rng.normal(size=shape))

        def first(x):
            return call(x, **kwargs) * tf.sin(x)  # not linear: the tape's product rule

        def second(dy):  # the grad op's gradient (the forward op)
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = call(x, **kwargs)
            return tape.gradient(y, x, output_gradients=dy * u) * v

        def third(dy):  # through the grad op's gradient once more
            with tf.GradientTape() as tape:
                tape.watch(dy)
                g = second(dy)
            return tape.gradient(g, dy, output_gradients=tf.cos(dy))

        point = tf.constant(rng.normal(size=shape))  # not u or v: the tape watches it
        for fn, arg in ((first, x), (second, point), (third, point)):
            theoretical, numerical = tf.test.compute_gradient(fn, [arg])
            # The numerical side: central differences of step 2^-10 (error ~1e-6).
            np.testing.assert_allclose(theoretical[0], numerical[0], rtol=1e-5, atol=1e-5)
    # compute_gradient_error in graph mode, float32.
    with tf.Graph().as_default():
        xg = tf.constant(rng.normal(size=(2, 4, 8)), tf.float32)
        yg = tf_ops.rotary_embedding(xg, start_index=2)
        with tf.compat.v1.Session():
            err = tf.compat.v1.test.compute_gradient_error(xg, [2, 4, 8], yg, [2, 4, 8])
    assert err < 1e-2


def test_xla_lowering_matches_the_kernels():
    """Positions known when compiling (the rotations folded into constants) and passed
    in (computed in the graph), every kind of layout, positions and rope type."""
    expected = set(rotary.OP_NAMES) if tf_ops.build_info().xla else set()
    assert rotary.XLA_LOWERED == expected
    rng = np.random.default_rng(11)

    def step(x, dy, where, kwargs):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = call(x, **kwargs, **where)
        return y, tape.gradient(y, x, output_gradients=dy)

    picked = [CASES[i] for i in (0, 1, 3, 5, 7, 9, 11, 12)]
    dtypes = [tf.float32, tf.bfloat16, tf.float64] * 3
    for i, ((shape, spec), dtype) in enumerate(zip(picked, dtypes)):
        x64, kwargs = _case(shape, spec, rng)
        x, dy = tf.cast(x64, dtype), tf.cast(rng.normal(size=shape), dtype)
        key = "positions" if "positions" in kwargs else "start_index"
        where = {key: kwargs.pop(key, 0)}
        if i % 2:  # passed in: not a constant while compiling
            jit = tf.function(lambda x, dy, p: step(x, dy, {key: p}, kwargs), jit_compile=True)
            p_dtype = tf.int32 if key == "start_index" else tf.float32
            args = (x, dy, tf.constant(where[key], p_dtype))
        else:
            jit = tf.function(lambda x, dy: step(x, dy, where, kwargs), jit_compile=True)
            args = (x, dy)
        if tf_ops.build_info().xla and dtype == tf.float32:
            graph = jit.get_concrete_function(*args).graph.as_graph_def()
            assert {"TfOps>RotaryEmbedding", "TfOps>RotaryEmbeddingGrad"} <= op_types(graph)
        y, dx = jit(*args)
        xs = np.asarray(tf.cast(x, tf.float64))
        what = f"xla {dtype.name} {shape} {spec} {'passed in' if i % 2 else 'constant'}"
        assert_rotary_close(y, xs, what, dtype, slack=2.0, **where, **kwargs)
        assert_rotary_close(dx, np.asarray(tf.cast(dy, tf.float64)), "grad " + what,
                            dtype, slack=2.0, transpose=True, **where, **kwargs)


def _keras_hub():
    return pytest.importorskip("keras_hub.src.layers.modeling.rotary_embedding")


def test_matches_keras_hub_layers():
    """keras-hub's RotaryEmbedding and LlamaRotaryEmbedding (float32): values within the
    roundings of its own float32 arithmetic, through `rotary_kwargs`."""
    hub = _keras_hub()
    from keras_hub.src.models.llama.llama_rotary_embedding import LlamaRotaryEmbedding

    rng = np.random.default_rng(5)
    layers = [
        hub.RotaryEmbedding(),
        hub.RotaryEmbedding(max_wavelength=1000, scaling_factor=2.0, sequence_axis=1),
        hub.RotaryEmbedding(rope_type="dynamic", scaling_factor=3.0, denominator_dim=24),
        hub.RotaryEmbedding(rope_type="yarn", scaling_factor=8.0, original_max_position_embeddings=512),
        hub.RotaryEmbedding(rope_type="yarn", scaling_factor=4.0, truncate=False, beta_fast=8.0),
        hub.RotaryEmbedding(rope_type="default", scaling_factor=3.0),  # keras-hub: unscaled
        hub.RotaryEmbedding(sequence_axis=-1, feature_axis=-2),
        hub.RotaryEmbedding(sequence_axis=2),
        LlamaRotaryEmbedding(max_wavelength=500000, frequency_adjustment_factor=8.0,
                             low_freq_factor=1.0, high_freq_factor=4.0,
                             pretraining_sequence_length=64),
        LlamaRotaryEmbedding(position_scaling_factor=4.0),  # keras-hub 0.32 ignores it
    ]
    for layer in layers:
        kwargs = rotary_kwargs(layer)
        assert kwargs is not None, layer
        shape = (2, 16, 12) if layer.feature_axis == -2 else (2, 12, 3, 16)
        if layer.sequence_axis == 2:
            shape = (2, 3, 12, 16)
        x = tf.constant(rng.normal(size=shape), tf.float32)
        for call_args in (dict(), dict(start_index=tf.constant(37)),
                          dict(positions=tf.constant(rng.integers(0, 3000, (12,)), tf.int32)),
                          dict(positions=tf.constant(rng.uniform(0, 900, (2, 12)), tf.float32))):
            want = layer(x, **call_args)
            got = tf_ops.rotary_embedding(x, **call_args, **kwargs)
            pos = call_args.get("positions")
            assert_rotary_close(
                got, np.asarray(x, np.float64), f"{layer.name} {call_args.keys()}", tf.float32,
                start_index=int(call_args.get("start_index", 0)),
                positions=None if pos is None else np.asarray(pos, np.float64), **kwargs)
            # keras-hub's float32 cos/sin tables and products: a few ulps of the
            # largest term, plus the float32 angle's rounding (their pow may differ by
            # an ulp of the frequency).
            _, theta, scale = ref_rotary(
                np.asarray(x, np.float64), start_index=int(call_args.get("start_index", 0)),
                positions=None if pos is None else np.asarray(pos, np.float64), **kwargs)
            err = np.abs(got.numpy() - want.numpy())
            assert np.all(err <= scale * (theta * 2.0**-22 + 2.0**-20)), (layer.name, err.max())
    # A LlamaRotaryEmbedding given YaRN: not covered (the op would compute another thing).
    assert rotary_kwargs(LlamaRotaryEmbedding(rope_type="yarn")) is None
    assert rotary_kwargs(tf.keras.layers.Dense(3)) is None


def test_keras_hub_upstream_values():
    """The values of keras-hub's rotary_embedding_test.py (flax's RoPE, HF's linear
    scaling with and without a KV cache, the ones example)."""
    x = np.random.default_rng(0).standard_normal(size=(1, 2, 1, 16)).astype(np.float32)
    got = tf_ops.rotary_embedding(x, positions=tf.constant([0.0, 0.0]))
    np.testing.assert_allclose(got.numpy(), x, rtol=1e-7)  # position 0: identity
    want = [[[[1.0] * 4] * 2, [[0.398157001, 0.994987488, 1.357008100, 1.004987478]] * 2,
             [[-0.301168621, 0.989950180, 1.381773233, 1.009949803]] * 2]]
    np.testing.assert_allclose(tf_ops.rotary_embedding(tf.ones((1, 3, 2, 4)), scaling_factor=2.0),
                               want, rtol=1e-6, atol=1e-6)
    want = [[[[-1.412856817, 0.975714266, -0.061930716, 1.023709655]] * 2]]
    np.testing.assert_allclose(
        tf_ops.rotary_embedding(tf.ones((1, 1, 2, 4)), start_index=12, scaling_factor=5.0),
        want, rtol=1e-6, atol=1e-6)
    got = tf_ops.rotary_embedding(tf.ones([1, 4, 6]))
    np.testing.assert_allclose(got[0, 3], [-1.1311, 0.8515, 0.9935, -0.8489, 1.1291, 1.0064],
                               atol=1e-4)


def test_bad_input_at_graph_build_and_run_time():
    x = tf.zeros([2, 4, 6])
    cases = [
        (lambda x: call(x[..., :5]), r"feature axis must have an even size.*got 5"),
        (lambda x: call(x, sequence_axis=3), r"'sequence_axis' = 3 is out of range for x of rank 3"),
        (lambda x: call(x, feature_axis=-4), r"'feature_axis' = -4 is out of range"),
        (lambda x: call(x, sequence_axis=2), r"sequence_axis and feature_axis must be different"),
        (lambda x: call(x, positions=tf.zeros([3])), r"positions must be .*S = 4.*got positions of shape \[3\]"),
        (lambda x: call(x, positions=tf.zeros([3, 4])), r"positions must be .*B = 2"),
        (lambda x: call(x, positions=tf.zeros([2, 4, 1])), r"positions must be"),
        (lambda x: call(x, max_wavelength=0.0), r"'max_wavelength' must be finite and > 0, got 0"),
        (lambda x: call(x, scaling_factor=-1.0), r"'scaling_factor' must be finite and > 0"),
        (lambda x: call(x, scaling_factor=float("nan")), r"'scaling_factor' must be finite"),
        (lambda x: call(x, rope_type="yarn", beta_slow=0.0), r"'beta_slow' must be finite and > 0"),
        (lambda x: call(x, rope_type="llama3", frequency_adjustment_factor=8.0, low_freq_factor=4.0,
                        high_freq_factor=1.0, pretraining_sequence_length=8192),
         r"'high_freq_factor' must be greater"),
        (lambda x: call(x[0, :, 0]), r"x must have rank >= 2"),
        (lambda x: call(x[0], positions=tf.zeros([1, 4]), sequence_axis=0), r"x has no batch axis"),
    ]
    for fn, msg in cases:
        with pytest.raises(ValueError, match=msg):
            fn(x)  # eager: the op's shape function runs first
        with pytest.raises(ValueError, match=msg):
            tf.function(fn).get_concrete_function(tf.TensorSpec([2, 4, 6]))
    # What only Python sees.
    for kwargs, msg in ((dict(rope_type="ntk"), r"rope_type must be one of"),
                        (dict(rope_type="llama3", low_freq_factor=1.0), r"needs all of"),
                        (dict(low_freq_factor=1.0), r"apply only to rope_type='llama3'"),
                        (dict(denominator_dim=0), r"denominator_dim must be > 0 or None"),
                        (dict(start_index=tf.zeros([2])), r"start_index must be a scalar")):
        with pytest.raises(ValueError, match=msg):
            call(x, **kwargs)
    with pytest.raises(TypeError, match=r"must be half, bfloat16, float32 or float64"):
        call(tf.zeros([2, 4, 6], tf.int32))
    # Shapes unknown at graph build: the kernels' run-time checks.
    spec = tf.TensorSpec([None, None, None], tf.float32)
    lazy = tf.function(lambda x, p: call(x, positions=p),
                       input_signature=[spec, tf.TensorSpec(None, tf.float32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"even size.*got 5"):
        lazy(tf.zeros([2, 4, 5]), tf.zeros([4]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"positions must be .*got positions of shape \[3\]"):
        lazy(tf.zeros([2, 4, 6]), tf.zeros([3]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"positions must be"):
        lazy(tf.zeros([2, 4, 6]), tf.zeros([2, 2, 4]))
    lazy_rank = tf.function(lambda x: call(x), input_signature=[tf.TensorSpec(None, tf.float32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"rank >= 2"):
        lazy_rank(tf.zeros([6]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'sequence_axis' = 2 is out of range"):
        tf.function(lambda x: call(x, sequence_axis=2),
                    input_signature=[tf.TensorSpec(None, tf.float32)])(tf.zeros([4, 6]))
    # The ops called directly: a hand-made dtype mismatch and the grad op's shapes.
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=r"positions' dtype U must be float"):
        rotary.op_fn("RotaryEmbedding")(x, tf.zeros([], tf.float64))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=r"dy must have rank >= 2"):
        rotary.op_fn("RotaryEmbeddingGrad")(tf.zeros([6]), tf.zeros([]))
    # The library still works.
    np.testing.assert_allclose(call(tf.ones([1, 1, 2])).numpy(), [[[1.0, 1.0]]])


def test_portable_graph_has_no_tf_ops_and_gradients_match():
    rng = np.random.default_rng(2)
    x = tf.constant(rng.normal(size=(2, 8, 3, 16)), tf.float32)

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = call(x, start_index=5, rope_type="yarn", scaling_factor=4.0)
            loss = tf.reduce_sum(y * tf.sin(x))
        return y, tape.gradient(loss, x)

    want = step(x)
    with tf_ops.portable():
        concrete = tf.function(step).get_concrete_function(x)
    assert not [t for t in op_types(concrete.graph.as_graph_def()) if t.startswith("TfOps>")]
    for got, w in zip(concrete(x), want):
        np.testing.assert_allclose(got.numpy(), w.numpy(), rtol=1e-5, atol=1e-5)


def test_empty_inputs():
    for shape in ((2, 0, 8), (2, 4, 0), (0, 3, 2)):
        y = call(tf.zeros(shape))
        assert y.shape == shape
        with tf_ops.portable():
            assert call(tf.zeros(shape)).shape == shape
