"""Size: an op over a half tensor of more than 2^31 elements (4 GiB), checked at
its start, its middle, across element 2^31 (where 32-bit indexing would wrap)
and at its end. The tensor is built and consumed inside one graph, so the op
runs in place (TF forwards the input buffer) and the process peaks near 5 GiB
resident; the test runs in a subprocess so that the peak is measured alone.
Takes ~15 s on the 2-core reference machine (LeakyRelu; GELU would take ~2 min)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from checks import assert_close
from op_specs import SPECS, round_attrs
from subprocesses import REPO_ROOT

ROOT = str(REPO_ROOT)
PERIOD = 1031  # a prime: element i holds pattern[i % PERIOD]
# In-place, the 4 GiB tensor is the only large buffer: a second one would take
# the peak past 8 GiB.
MAX_PEAK_GIB = 6.5

_CHILD = textwrap.dedent(
    r"""
    import json, math, sys
    import numpy as np
    import tensorflow as tf
    import tf_ops

    op_name, attrs, period = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    repeats = math.ceil(2**31 / period) + 4
    n = period * repeats
    assert n > 2**31
    pattern = tf.constant(np.linspace(-6.0, 6.0, period), tf.half)
    windows = {"start": 0, "middle": n // 2 - period, "2^31": 2**31 - period, "end": n - 2 * period}

    @tf.function
    def run():
        x = tf.tile(pattern, [repeats])  # n elements, 4 GiB, consumed only by the op
        y = getattr(tf_ops, op_name)(x, **attrs)
        return tf.shape(y, out_type=tf.int64), [y[s : s + 2 * period] for s in windows.values()]

    shape, slices = run()
    peak_gib = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 2**20
    print(json.dumps({
        "n": n,
        "shape": shape.numpy().tolist(),
        "windows": {k: [s, slices[i].numpy().astype(np.float64).tolist()] for i, (k, s) in enumerate(windows.items())},
        "pattern": pattern.numpy().astype(np.float64).tolist(),
        "peak_gib": peak_gib,
    }))
    """
)


@pytest.mark.slow
def test_op_over_more_than_2_pow_31_half_elements():
    spec = next(s for s in SPECS if s.name == "LeakyRelu")
    attrs = {"alpha": 0.3}
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, spec.forward.__name__, json.dumps(attrs), str(PERIOD)],
        capture_output=True, text=True, timeout=900, cwd=ROOT, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-5000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    n = out["n"]
    assert n > 2**31 and out["shape"] == [n]
    pattern = np.asarray(out["pattern"])
    expected_pattern = spec.ref(pattern, **round_attrs(attrs))
    for where, (start, values) in out["windows"].items():
        index = np.arange(start, start + len(values))
        expected = expected_pattern[index % PERIOD]
        assert_close(np.asarray(values), expected, spec.tolerance(tf.half), f"{where} (from {start})")
    print(f"{spec.op_type} over {n} half elements; peak RSS {out['peak_gib']:.2f} GiB")
    assert out["peak_gib"] < MAX_PEAK_GIB, f"peak {out['peak_gib']:.2f} GiB: the op did not run in place"
