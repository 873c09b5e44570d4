"""Rotary position embedding: `rotary_embedding` and `rotary_embedding_grad`.

One op forward (``TfOps>RotaryEmbedding``) and one backward
(``TfOps>RotaryEmbeddingGrad``, the rotation by the opposite angles), with keras-hub's
``RotaryEmbedding`` semantics: the "rotate half" pairs (j, j + D/2) of the feature axis,
``max_wavelength``, ``scaling_factor``, ``rope_type`` ("linear", "dynamic", "yarn"; and
"llama3", keras-hub's ``LlamaRotaryEmbedding`` with Llama 3.1's frequency adjustment),
``denominator_dim``, any ``sequence_axis`` and ``feature_axis``, ``start_index`` (an int
or a scalar tensor: cached decoding) or custom ``positions`` ([S] or [B, S]). The angles
are computed in the kernels from the positions and frequencies (float32; float64 for
float64 inputs); no cosine or sine table of x's size is made.

Choices:
- Positions are read in the compute dtype (float32, float64 for float64 x), as keras-hub
  casts them to float32: integer positions are cast, and are exact below 2^24.
- A length-1 sequence or batch dimension of ``positions`` broadcasts, as in keras-hub.
- Positions are not differentiable (their gradient is None): they are indices.
- Under `tf_ops.portable()` (and inside XLA if the library had no lowerings) the
  function builds the composite below: keras-hub's math in TensorFlow built-in ops
  (Range, Mul, Sin, Cos, Split, ConcatV2), with the inverse frequencies as a constant;
  it then needs a static feature size.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from tf_ops.python.core.composite import kernel_attrs, use_composite, xla_lowered
from tf_ops.python.core.op_support import check, op_fn

TensorLike = tf.types.experimental.TensorLike

OP_NAMES = ("RotaryEmbedding", "RotaryEmbeddingGrad")
XLA_LOWERED: frozenset[str] = xla_lowered(OP_NAMES)
ROPE_TYPES = ("linear", "dynamic", "yarn", "llama3")
LLAMA3_ARGS = ("frequency_adjustment_factor", "low_freq_factor", "high_freq_factor",
               "pretraining_sequence_length")


def compute_dtype(dtype: tf.DType) -> tf.DType:
    """The angles' and positions' dtype: float64 for float64, else float32."""
    return tf.float64 if dtype == tf.float64 else tf.float32


def op_attrs(max_wavelength=10000, scaling_factor=1.0, rope_type="linear", beta_fast=32.0,
             beta_slow=1.0, original_max_position_embeddings=4096, truncate=True,
             sequence_axis=1, feature_axis=-1, denominator_dim=None,
             frequency_adjustment_factor=None, low_freq_factor=None, high_freq_factor=None,
             pretraining_sequence_length=None) -> dict:
    """keras-hub's arguments as the op's attributes (ValueError for what only Python can
    see: an unknown rope_type, the Llama 3.1 arguments without rope_type="llama3" or
    some of them missing, denominator_dim 0); the op checks the values."""
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"rope_type must be one of {ROPE_TYPES}, got {rope_type!r}")
    llama3 = dict(frequency_adjustment_factor=frequency_adjustment_factor,
                  low_freq_factor=low_freq_factor, high_freq_factor=high_freq_factor,
                  pretraining_sequence_length=pretraining_sequence_length)
    given = [k for k, v in llama3.items() if v is not None]
    if rope_type == "llama3" and len(given) != len(llama3):
        raise ValueError(f"rope_type='llama3' needs all of {LLAMA3_ARGS}; got only {given}")
    if rope_type != "llama3" and given:
        raise ValueError(f"{given} apply only to rope_type='llama3', got rope_type={rope_type!r}")
    if denominator_dim is not None and int(denominator_dim) <= 0:
        raise ValueError(f"denominator_dim must be > 0 or None (the feature size), got "
                         f"{denominator_dim}")
    attrs = dict(max_wavelength=float(max_wavelength), scaling_factor=float(scaling_factor),
                 rope_type=rope_type, beta_fast=float(beta_fast), beta_slow=float(beta_slow),
                 original_max_position_embeddings=int(original_max_position_embeddings),
                 truncate=bool(truncate), sequence_axis=int(sequence_axis),
                 feature_axis=int(feature_axis),
                 denominator_dim=0 if denominator_dim is None else int(denominator_dim))
    if rope_type == "llama3":
        attrs.update(frequency_adjustment_factor=float(frequency_adjustment_factor),
                     low_freq_factor=float(low_freq_factor),
                     high_freq_factor=float(high_freq_factor),
                     pretraining_sequence_length=int(pretraining_sequence_length))
    return attrs


# ------------------------------------------------------------------ composite ---


def inverse_frequencies(attrs: dict, features: int) -> np.ndarray:
    """The D/2 inverse frequencies in float64, from the op's attributes (the portable
    composite's statement of rotary_math.h's InverseFrequency; the tests hold the two to
    each other)."""
    get = kernel_attrs(attrs).__getitem__  # float attributes as the kernels read them
    base, s, kind = get("max_wavelength"), get("scaling_factor"), get("rope_type")
    dim = float(features)
    two_j = 2.0 * np.arange(features // 2, dtype=np.float64)
    if kind in ("linear", "dynamic"):
        d = float(get("denominator_dim") or features)
        w = base ** (-two_j / d)
        return w / s if kind == "linear" else w / s ** (dim / max(1.0, dim - 2.0))
    w = 1.0 / base ** (two_j / dim)
    if kind == "yarn":
        def correction(rotations):
            return dim * math.log(get("original_max_position_embeddings") /
                                  (rotations * 2 * math.pi)) / (2 * math.log(base))
        low, high = correction(get("beta_fast")), correction(get("beta_slow"))
        if get("truncate"):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0.0), min(high, dim - 1.0)
        ramp = np.clip((np.arange(features // 2) - low) / max(high - low, 0.001), 0.0, 1.0)
        return w / s * ramp + w * (1.0 - ramp)
    # llama3
    f, length = get("frequency_adjustment_factor"), get("pretraining_sequence_length")
    low, high = get("low_freq_factor"), get("high_freq_factor")
    wavelength = 2 * math.pi / w
    smooth = (length / wavelength - low) / (high - low)
    medium = (1.0 - smooth) * (w / f) + smooth * w
    return np.where(wavelength > length / low, w / f,
                    np.where(wavelength < length / high, w, medium))


def magnitude(attrs: dict) -> float:
    """YaRN's attention temperature 0.1 ln(s) + 1; 1 otherwise."""
    if attrs["rope_type"] != "yarn":
        return 1.0
    return 0.1 * math.log(kernel_attrs(attrs)["scaling_factor"]) + 1.0


def _axes(rank: int, attrs: dict) -> tuple[int, int]:
    return attrs["sequence_axis"] % rank, attrs["feature_axis"] % rank


def composite(x: tf.Tensor, positions: tf.Tensor, attrs: dict, transpose: bool = False) -> tf.Tensor:
    """keras-hub's RotaryEmbedding math in TensorFlow built-in ops (the portable form),
    computed in float32 (float64 for float64) and rounded once, as the kernels: x's
    feature and sequence axes moved to -1 and 1, angles ``positions * w``, ``x * cos +
    [-x2, x1] * sin``, moved back. `positions` is the op's input (a scalar start, [S] or
    [B, S]); `transpose` turns by the opposite angles (the backward)."""
    rank = x.shape.rank
    seq_axis, feature_axis = _axes(rank, attrs)
    features = x.shape[feature_axis]
    if features is None:
        raise ValueError("the portable rotary embedding needs a static feature size, got "
                         f"x of shape {x.shape}")
    compute = compute_dtype(x.dtype)
    others = [a for a in range(rank) if a not in (seq_axis, feature_axis)]
    perm = others[:1] + [seq_axis] + others[1:] + [feature_axis]
    moved = tf.transpose(x, perm) if perm != list(range(rank)) else x
    xc = tf.cast(moved, compute)
    positions = tf.cast(positions, compute)
    if positions.shape.rank == 0:  # the sequence axis: 1 of [B, S, ..., D], 0 of [S, D]
        positions = tf.range(tf.shape(xc)[min(rank - 2, 1)], dtype=compute) + positions
    if positions.shape.rank == 1:
        positions = positions[tf.newaxis]
    if rank == 2:  # no batch axis: [S, D]
        positions = positions[0]
    w = tf.constant(inverse_frequencies(attrs, features), compute)
    angle = positions[..., tf.newaxis] * w  # [B', S', D/2] ([S', D/2] for rank 2)
    m = tf.constant(magnitude(attrs), compute)
    cos, sin = m * tf.cos(angle), m * tf.sin(angle)
    if transpose:
        sin = -sin
    for _ in range(rank - 3):  # the axes between the sequence and the features
        cos, sin = cos[..., tf.newaxis, :], sin[..., tf.newaxis, :]
    x1, x2 = tf.split(xc, 2, axis=-1)
    y = tf.concat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    y = tf.cast(y, x.dtype)
    if perm != list(range(rank)):
        y = tf.transpose(y, [perm.index(a) for a in range(rank)])
    return y


# ------------------------------------------------------------------ the calls ---


def _positions(x: tf.Tensor, start_index, positions) -> tf.Tensor:
    """The op's positions input: custom positions, else the start index, in the compute
    dtype."""
    compute = compute_dtype(x.dtype)
    if positions is not None:
        return tf.cast(tf.convert_to_tensor(positions), compute)
    start = tf.convert_to_tensor(start_index)
    if start.shape.rank is not None and start.shape.rank != 0:
        raise ValueError(f"start_index must be a scalar, got shape {start.shape}")
    return tf.cast(start, compute)


def _call(op: str, x: TensorLike, start_index, positions, attrs: dict, name: str | None):
    with tf.name_scope(name or op):
        x = tf.convert_to_tensor(x)
        if not x.dtype.is_floating:
            raise TypeError(f"TfOps>{op}: x must be half, bfloat16, float32 or float64, "
                            f"got {x.dtype}")
        p = _positions(x, start_index, positions)
        check(op, (x, p), attrs)  # the op's shape function: its ValueError, at any call
        if use_composite(op, XLA_LOWERED):
            return composite(x, p, attrs, transpose=op.endswith("Grad"))
        return op_fn(op)(x, p, **attrs)


def rotary_embedding(x: TensorLike, start_index: TensorLike = 0,
                     positions: TensorLike | None = None, *, max_wavelength: float = 10000,
                     scaling_factor: float = 1.0, rope_type: str = "linear",
                     beta_fast: float = 32.0, beta_slow: float = 1.0,
                     original_max_position_embeddings: int = 4096, truncate: bool = True,
                     sequence_axis: int = 1, feature_axis: int = -1,
                     denominator_dim: int | None = None,
                     frequency_adjustment_factor: float | None = None,
                     low_freq_factor: float | None = None,
                     high_freq_factor: float | None = None,
                     pretraining_sequence_length: int | None = None,
                     name: str | None = None) -> tf.Tensor:
    """Rotary position embedding, fused: keras-hub's ``RotaryEmbedding`` in one op forward
    and one backward (``TfOps>RotaryEmbedding``).

    Each pair (j, j + D/2) of the feature axis (size D, even) turns by the angle
    ``position * w_j``: ``y = x * cos + [-x2, x1] * sin`` with the frequencies repeated
    over both halves, ``w_j = max_wavelength^(-2j / D)`` scaled as `rope_type` says.

    Args:
      x: a half, bfloat16, float32 or float64 tensor of rank >= 2 with a sequence and a
        feature axis: ``[B, S, D]``, ``[B, S, H, D]``, or any layout the axes name.
      start_index: the position of the first sequence index (an int or a scalar tensor;
        cached decoding); ignored when `positions` is given.
      positions: the position of each sequence index, ``[S]`` or ``[B, S]`` (B: the
        first axis that is neither the sequence nor the feature axis); S or B may be 1.
      max_wavelength: b in ``b^(-2j / D)``; > 0.
      scaling_factor: s: "linear" divides the frequencies by s, "dynamic" by
        ``s^(D / (D - 2))``, "yarn" blends w and w / s; > 0.
      rope_type: "linear", "dynamic", "yarn" (with `beta_fast`, `beta_slow`,
        `original_max_position_embeddings`, `truncate`, as keras-hub's) or "llama3"
        (keras-hub's ``LlamaRotaryEmbedding`` with `frequency_adjustment_factor`,
        `low_freq_factor`, `high_freq_factor`, `pretraining_sequence_length`, all given).
      sequence_axis, feature_axis: the two axes, distinct.
      denominator_dim: d in ``b^(-2j / d)`` ("linear", "dynamic"); None: D.
      name: op name scope.

    Returns:
      x rotated, of x's shape and dtype.

    Example:
      >>> x = tf.ones([1, 3, 4])
      >>> tf_ops.rotary_embedding(x, scaling_factor=2.0).numpy()[0, 2].round(4)
      array([-0.3012,  0.99  ,  1.3818,  1.0099], dtype=float32)
    """
    attrs = op_attrs(max_wavelength, scaling_factor, rope_type, beta_fast, beta_slow,
                     original_max_position_embeddings, truncate, sequence_axis, feature_axis,
                     denominator_dim, frequency_adjustment_factor, low_freq_factor,
                     high_freq_factor, pretraining_sequence_length)
    return _call("RotaryEmbedding", x, start_index, positions, attrs, name)


def rotary_embedding_grad(dy: TensorLike, start_index: TensorLike = 0,
                          positions: TensorLike | None = None, *, name: str | None = None,
                          **kwargs) -> tf.Tensor:
    """The backward of `rotary_embedding` (``TfOps>RotaryEmbeddingGrad``): dy turned by
    the opposite angles, in one pass; same arguments (keyword arguments as
    `rotary_embedding`'s). Its own gradient is `rotary_embedding` of the upstream.

    Example:
      >>> x = tf.constant([[[1.0, 2.0, 3.0, 4.0]]])
      >>> y = tf_ops.rotary_embedding(x, start_index=5)
      >>> tf_ops.rotary_embedding_grad(y, start_index=5).numpy().round(4)
      array([[[1., 2., 3., 4.]]], dtype=float32)
    """
    return _call("RotaryEmbeddingGrad", dy, start_index, positions, op_attrs(**kwargs), name)


FUNCTIONS = {"rotary_embedding": rotary_embedding,
             "rotary_embedding_grad": rotary_embedding_grad}
__all__ = sorted(FUNCTIONS)
