"""Inputs the ops do not take: every dtype other than half, bfloat16, float32 and
float64 (integers of every width, unsigned, bool, complex, string, the float8
and 4-bit float types) fails when the op is built, eagerly or at tf.function
tracing, with a message naming the dtype and listing the supported ones;
sparse and ragged tensors fail to convert. The process keeps working.
(int32 and mixed float dtypes are in test_errors.py.)"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

from checks import assert_library_still_works, mode_params
from op_specs import spec_params

_EXPERIMENTAL = tf.dtypes.experimental
UNSUPPORTED = [
    tf.int8, tf.int16, tf.int64, tf.uint8, tf.uint16, tf.uint32, tf.uint64, tf.bool,
    tf.complex64, tf.complex128, tf.string,
] + [
    getattr(_EXPERIMENTAL, name)
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz",
                 "float4_e2m1fn")
    if hasattr(_EXPERIMENTAL, name)
]  # fmt: skip

# Each supported dtype under the names TF's messages may use.
SUPPORTED_NAMES = (("half", "float16"), ("bfloat16",), ("float", "float32"), ("double", "float64"))


def _tensor(dtype: tf.DType) -> tf.Tensor:
    if dtype == tf.string:
        return tf.constant(["1", "-2"])
    if dtype == tf.bool:
        return tf.constant([True, False])
    # Through NumPy: TF has no float -> float8 *fnuz / float4 cast kernel.
    return tf.constant(np.array([1.0, 2.0]).astype(dtype.as_numpy_dtype))


@pytest.mark.parametrize("mode", mode_params())
@pytest.mark.parametrize("dtype", [pytest.param(d, id=d.name) for d in UNSUPPORTED])
@pytest.mark.parametrize("spec", spec_params())
def test_unsupported_dtype_fails_at_construction(spec, dtype, mode):
    x = _tensor(dtype)
    for build in (lambda: spec.forward(x), lambda: spec.grad_op(x, x)):
        with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError)) as info:
            build() if mode == "eager" else tf.function(build).get_concrete_function()
        msg = str(info.value)
        assert re.search(rf"\b{dtype.name}\b", msg), f"dtype {dtype.name} not named: {msg}"
        for names in SUPPORTED_NAMES:
            assert any(re.search(rf"\b{n}\b", msg) for n in names), f"supported {names[0]} not listed: {msg}"
    assert_library_still_works()


@pytest.mark.parametrize("spec", spec_params())
def test_sparse_and_ragged_inputs_are_refused(spec):
    sparse = tf.sparse.from_dense(tf.constant([[1.0, 0.0], [0.0, -2.0]]))
    ragged = tf.ragged.constant([[1.0], [2.0, -3.0]])
    for bad in (sparse, ragged):
        with pytest.raises((TypeError, ValueError)):
            spec.forward(bad)
        with pytest.raises((TypeError, ValueError)):
            spec.grad_op(bad, bad)
    assert_library_still_works()
