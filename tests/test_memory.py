"""Leaks: 10,000 forward+backward calls of every op (a GradientTape around the
forward op, so the grad op runs through the registered gradient), the dtype
changing every call, leave resident memory (VmRSS) within 5 MB of where it was
after a warm-up; so do thousands of calls that fail (shape mismatches at run
time, rejected attributes; beyond what TensorFlow's own ops keep). Each call's output is 1,000 elements, so leaking
even one buffer per call would show as 20 MB or more."""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest
import tensorflow as tf

from op_specs import DTYPES, SPECS, spec_params, to_dtype

CALLS = 10_000
FAILING_CALLS = 10_000
WARMUP = 500
MAX_GROWTH_MB = 5.0
N = 1000


def rss_mb() -> float:
    """Resident set size of this process, from /proc/self/status."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS in /proc/self/status")


def _release_free_heap() -> None:
    """Returns malloc's free pages to the OS, so that memory freed by earlier tests
    in this process cannot absorb (and hide) new allocations."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def _growth_mb(step, calls: int) -> float:
    """RSS growth over `calls` calls of step(i), after WARMUP calls."""
    for i in range(WARMUP):
        step(i)
    gc.collect()
    _release_free_heap()
    before = rss_mb()
    for i in range(calls):
        step(i)
    gc.collect()
    return rss_mb() - before


def _inputs():
    x = np.linspace(-4.0, 4.0, N)
    return [tf.constant(to_dtype(x, dtype)) for dtype in DTYPES]


@pytest.mark.parametrize("spec", spec_params())
def test_forward_backward_calls_do_not_leak(spec):
    attrs = dict(spec.attr_variants[-1])
    xs = _inputs()

    def step(i):
        x = xs[i % len(xs)]
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = spec.forward(x, **attrs)
        dx = tape.gradient(y, x)
        assert dx.shape == (N,)

    growth = _growth_mb(step, CALLS)
    print(f"{spec.name}: {CALLS} forward+backward calls, RSS growth {growth:.2f} MB")
    assert growth < MAX_GROWTH_MB, f"{spec.name}: RSS grew {growth:.1f} MB over {CALLS} calls"


def test_failing_calls_do_not_leak():
    """Run-time shape mismatches (the kernel runs and refuses) and rejected
    attributes (the kernel is built and refuses), for every op.

    TensorFlow 2.21 itself keeps ~0.7 KB per failed eager op call (its own
    EluGrad or AddV2 on mismatched shapes alike), so the limit applies to the
    growth beyond that of as many failing calls of TF's own EluGrad."""
    g, v = tf.ones([N]), tf.ones([N + 1])
    x = tf.ones([N])
    calls = []
    for spec in SPECS:
        calls.append(lambda s=spec: s.grad_op(g, v))
        for attrs, _ in spec.invalid_attrs:
            calls.append(lambda s=spec, a=attrs: s.forward(x, **a))

    def failing(fns):
        def step(i):
            try:
                fns[i % len(fns)]()
            except tf.errors.InvalidArgumentError:
                return
            raise AssertionError(f"call {i % len(fns)} did not fail")

        return step

    ours = _growth_mb(failing(calls), FAILING_CALLS)
    theirs = _growth_mb(failing([lambda: tf.raw_ops.EluGrad(gradients=g, outputs=v)]), FAILING_CALLS)
    print(f"{FAILING_CALLS} failing calls: RSS growth {ours:.2f} MB (TF's EluGrad: {theirs:.2f} MB)")
    assert ours - theirs < MAX_GROWTH_MB, f"RSS grew {ours:.1f} MB over {FAILING_CALLS} failing calls"


def test_growth_measure_sees_a_leak():
    """The measure is sensitive enough: keeping every output alive (what a leak
    of one buffer per call looks like) grows RSS past the limit."""
    x = tf.ones([N], tf.float32)
    kept = []

    growth = _growth_mb(lambda i: kept.append(SPECS[0].forward(x)), 3_000)
    assert growth > MAX_GROWTH_MB, f"keeping 3,000 outputs of {N} floats grew RSS by only {growth:.1f} MB"
