"""tools/xla_composite_accuracy.py measures what it says: its ulp metric on known
values, and, over every half and bfloat16 value in its range, tf_ops's forward ops
rounded once (≤ 0.5 ulp: computed in float, rounded to the dtype) as docs/ops.md's
accuracy table states."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from subprocesses import REPO_ROOT

_spec = importlib.util.spec_from_file_location(
    "xla_composite_accuracy", REPO_ROOT / "tools" / "xla_composite_accuracy.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


def test_ulp_metric():
    exact = np.array([1.0, 1.0, 3.0, 2.0**-30])
    y = np.array([1.0 + 2.0**-10, 1.0 - 2.0**-11, 3.0, 0.0])
    errors, keep = tool.ulp_errors(y, exact, "float16")
    # One ulp of half at 1 is 2^-10; an error is in ulps at the exact value, not at y.
    np.testing.assert_allclose(errors[:3], [1.0, 0.5, 0.0])
    assert list(keep) == [True, True, True, False]  # 2^-30: below half's smallest normal


@pytest.mark.filterwarnings("error")  # no signalling NaN widened on the way
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_inputs_are_every_value_in_range(dtype):
    x = tool.inputs(dtype, 0)
    assert x.min() == tool.LO and x.max() == tool.HI
    assert np.all(np.diff(x) > 0)
    bits = {"float16": 11, "bfloat16": 8}[dtype]
    # Between 1 and 2 the dtype has 2^(bits - 1) values.
    assert np.count_nonzero((x >= 1) & (x < 2)) == 2 ** (bits - 1)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "swish", "mish"])
def test_tf_ops_rounds_once_in_16_bits(name, dtype):
    forward = dict((row[0], row) for row in tool.measure(name, dtype, 0))["forward"]
    _, xla, ours = forward
    assert ours[0] <= 0.5 + 2.0**-8, ours
    assert np.isfinite(xla[0])
