"""Leaks: memory that grows with the number of calls.

Measured in the allocators' own counts of live allocations, not in the resident set size:
- C heap: the bytes glibc holds for live allocations (mallinfo2: in-use heap chunks plus
  mmapped chunks, over all arenas), where TensorFlow's CPU allocator, its tensor handles and
  our kernels' buffers live;
- Python objects: the blocks Python's allocator has handed out (sys.getallocatedblocks()).
RSS also moves with pages malloc keeps or returns after frees, new thread arenas and page-ins,
none of which scale with calls: under load it grew 8.4 MB over 10,000 calls of a non-leaking
op, and 9 to 22 MB for every op in a full run against TensorFlow 2.20, where the counts above
grow by 0 to 2 bytes and 0.03 blocks per call.

After a warm-up (caches, first traces), two windows of CALLS calls each; the growth is the
smaller of the two windows' growth per call, so a one-off growth that lands in one window does
not count, while a leak grows in both. Limits: MAX_BYTES_PER_CALL, a tenth of the smallest
output buffer (1,000 half elements, 2,000 bytes), and MAX_BLOCKS_PER_CALL, half a Python object
per call. Three deliberately leaking doubles show that the check fails on such leaks: one keeps
every output alive (a reference leak), one mallocs an output-sized buffer per call and never
frees it (what a kernel that forgets a buffer looks like), one keeps a small Python object per
call (a registry that grows with every call).
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import re
import sys
from typing import Callable

import numpy as np
import pytest
import tensorflow as tf

from op_specs import DTYPES, SPECS, spec_params, to_dtype

WARMUP = 300
CALLS = 1_500
N = 1000  # elements per output: 2,000 to 8,000 bytes across DTYPES
MAX_BYTES_PER_CALL = 200.0
MAX_BLOCKS_PER_CALL = 0.5

Step = Callable[[int], None]


class _Mallinfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (glibc >= 2.33)."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                     "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
    ]  # fmt: skip


_libc = ctypes.CDLL("libc.so.6")
_libc.mallinfo2.restype = _Mallinfo2
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]


def live_heap_bytes() -> int:
    """Bytes in live malloc allocations: heap chunks in use plus mmapped chunks."""
    info = _libc.mallinfo2()
    return info.uordblks + info.hblkhd


def _counts() -> tuple[int, int]:
    gc.collect()
    return live_heap_bytes(), sys.getallocatedblocks()


@dataclasses.dataclass(frozen=True)
class Growth:
    """Growth per call in each window, and the smaller of the windows' (the leak rate)."""

    windows: tuple[tuple[float, float], ...]  # (heap bytes, Python blocks) per call

    @property
    def heap_bytes(self) -> float:
        return min(w[0] for w in self.windows)

    @property
    def python_blocks(self) -> float:
        return min(w[1] for w in self.windows)

    def __str__(self) -> str:
        return (f"{self.heap_bytes:.1f} heap bytes and {self.python_blocks:.3f} Python blocks per call "
                f"(windows: {', '.join(f'{b:.1f} B, {k:.3f}' for b, k in self.windows)})")


def growth_per_call(step: Step, calls: int = CALLS, warmup: int = WARMUP) -> Growth:
    """Live-allocation growth per call of step(i), in two windows of `calls` calls after
    `warmup` calls."""
    for i in range(warmup):
        step(i)
    before = _counts()
    windows = []
    for w in range(2):
        for i in range(calls):
            step(warmup + w * calls + i)
        after = _counts()
        windows.append(((after[0] - before[0]) / calls, (after[1] - before[1]) / calls))
        before = after
    return Growth(tuple(windows))


def assert_no_leak(step: Step, what: str, baseline: Step | None = None) -> None:
    """Fails when step(i) leaks: its growth per call (beyond that of `baseline`, when given)
    reaches MAX_BYTES_PER_CALL heap bytes or MAX_BLOCKS_PER_CALL Python blocks."""
    ours = growth_per_call(step)
    heap, blocks = ours.heap_bytes, ours.python_blocks
    detail = f"{what}: {ours}"
    if baseline is not None:
        theirs = growth_per_call(baseline)
        heap, blocks = heap - theirs.heap_bytes, blocks - theirs.python_blocks
        detail += f"; baseline {theirs}; beyond it {heap:.1f} B and {blocks:.3f} blocks per call"
    print(detail)
    assert heap < MAX_BYTES_PER_CALL and blocks < MAX_BLOCKS_PER_CALL, (
        f"leak: {detail}; limits {MAX_BYTES_PER_CALL:.0f} bytes and {MAX_BLOCKS_PER_CALL} blocks per call"
    )


def _inputs() -> list[tf.Tensor]:
    x = np.linspace(-4.0, 4.0, N)
    return [tf.constant(to_dtype(x, dtype)) for dtype in DTYPES]


def _forward_backward(spec, after: Callable[[tf.Tensor], object] = lambda y: None) -> Step:
    """A forward call under a tape and its gradient (the grad op through the registered
    gradient), the dtype changing every call; `after(y)` sees each output."""
    attrs = dict(spec.attr_variants[-1])
    xs = _inputs()

    def step(i: int) -> None:
        x = xs[i % len(xs)]
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = spec.forward(x, **attrs)
        dx = tape.gradient(y, x)
        assert dx.shape == (N,)
        after(y)

    return step


@pytest.mark.parametrize("spec", spec_params())
def test_forward_backward_calls_do_not_leak(spec):
    assert_no_leak(_forward_backward(spec), f"{spec.name} forward+backward")


def test_failing_calls_do_not_leak():
    """Run-time shape mismatches (the kernel runs and refuses) and rejected
    attributes (the kernel is built and refuses), for every op.

    TensorFlow itself keeps ~0.7 KB per failed eager op call (its own EluGrad or
    AddV2 on mismatched shapes alike), so the limit applies to the growth beyond
    that of as many failing calls of TF's own EluGrad."""
    g, v = tf.ones([N]), tf.ones([N + 1])
    x = tf.ones([N])
    calls = []
    for spec in SPECS:
        calls.append(lambda s=spec: s.grad_op(g, v))
        for attrs, _ in spec.invalid_attrs:
            calls.append(lambda s=spec, a=attrs: s.forward(x, **a))

    def failing(fns) -> Step:
        def step(i: int) -> None:
            try:
                fns[i % len(fns)]()
            except tf.errors.InvalidArgumentError:
                return
            raise AssertionError(f"call {i % len(fns)} did not fail")

        return step

    tf_elu_grad = failing([lambda: tf.raw_ops.EluGrad(gradients=g, outputs=v)])
    assert_no_leak(failing(calls), "failing calls", baseline=tf_elu_grad)


@pytest.mark.parametrize("leak", ["kept outputs", "malloc per call", "Python object per call"])
def test_check_catches_a_leak_per_call(leak):
    """The same check on leaking doubles of a real op fails, having measured about what
    each double leaks per call."""
    spec = SPECS[0]
    kept = []
    if leak == "kept outputs":
        after = kept.append  # every output stays alive
    elif leak == "malloc per call":
        def after(y):  # an output-sized buffer, never freed
            assert _libc.malloc(y.shape.num_elements() * y.dtype.size)
    else:
        def after(y):  # one small object per call
            kept.append(object())

    with pytest.raises(AssertionError, match="^leak: ") as failure:
        assert_no_leak(_forward_backward(spec, after), f"{spec.name} leaking ({leak})")
    message = str(failure.value)
    heap, blocks = map(float, re.search(r": (\S+) heap bytes and (\S+) Python blocks per call", message).groups())
    smallest_output = N * min(dtype.size for dtype in DTYPES)
    if leak == "Python object per call":
        assert blocks >= 0.9 and heap < MAX_BYTES_PER_CALL, message
    else:
        assert heap > 0.9 * smallest_output, message
