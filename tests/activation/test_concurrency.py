"""Concurrency: the ops called from many Python threads at once, and many
independent calls inside one graph run in parallel by TensorFlow's executor,
give exactly the results of single-threaded calls, and never change an input
(TF may hand a kernel its input buffer as the output only when nothing else
holds it). Long vectors, which TF's thread pool splits into shards, are right
in every element."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import tensorflow as tf

from checks import assert_close
from op_specs import DTYPE_IDS, DTYPES, SPECS, as_f64, round_attrs, sample, spec_params, to_dtype

N_THREADS = 8
ROUNDS = 3
SMALL, LARGE = 4097, 70001  # LARGE is split over the intra-op pool for most ops

SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 30.0, -30.0])


def _values(n: int, seed: int) -> np.ndarray:
    x = sample((n,), seed, lo=-3, hi=1.3)
    x[: SPECIALS.size] = SPECIALS
    return x


def _bits(t) -> bytes:
    """The result's exact bytes (NaN payloads and signs of zero included)."""
    return t.numpy().tobytes()


# One unit of work: (label, fn, inputs) with fn(*inputs) -> Tensor.
def _work(dtype_sizes=None):
    dtype_sizes = dtype_sizes or {tf.half: (SMALL, LARGE), tf.bfloat16: (SMALL,), tf.float32: (SMALL, LARGE),
                                  tf.float64: (SMALL,)}  # fmt: skip
    work = []
    for dtype in DTYPES:
        for n in dtype_sizes[dtype]:
            x = to_dtype(_values(n, seed=n), dtype)
            g = to_dtype(_values(n, seed=n + 1), dtype)
            for spec in SPECS:
                for attrs in spec.attr_variants:
                    label = f"{spec.op_type}{attrs} {DTYPE_IDS[dtype]} n={n}"
                    work.append((label, lambda x, s=spec, a=attrs: s.forward(x, **a), (x,)))
                    work.append((label + " grad", lambda g, v, s=spec, a=attrs: s.grad_op(g, v, **a), (g, x)))
    return work


def test_threads_on_shared_and_private_inputs_match_single_threaded():
    work = _work()
    shared = [tuple(tf.constant(a) for a in inputs) for _, _, inputs in work]
    expected = [_bits(fn(*args)) for (_, fn, _), args in zip(work, shared)]
    shared_bits = [[_bits(a) for a in args] for args in shared]

    barrier = threading.Barrier(N_THREADS)
    failures: list[str] = []

    def run(thread: int):
        try:
            barrier.wait()
            # Each thread starts at another op, so that different ops overlap.
            order = np.roll(np.arange(len(work)), thread * len(work) // N_THREADS)
            for _ in range(ROUNDS):
                for i in order:
                    label, fn, inputs = work[i]
                    private = tuple(tf.constant(a) for a in inputs)
                    for kind, args in (("shared", shared[i]), ("private", private)):
                        if _bits(fn(*args)) != expected[i]:
                            failures.append(f"thread {thread} {kind} {label}: result differs")
        except Exception as e:  # noqa: BLE001  reported below, with the thread
            failures.append(f"thread {thread}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=run, args=(t,)) for t in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, "\n".join(failures[:20])
    # No kernel wrote into an input that other threads were reading.
    for args, before in zip(shared, shared_bits):
        assert [_bits(a) for a in args] == before


def _independent_calls_graph(work):
    """One tf.function holding every unit of work several times over, none
    depending on another: the executor runs them in parallel. Copies made inside
    the graph (x * 1) have one consumer, so their kernels may run in place."""
    inputs = [tuple(tf.constant(a) for a in args) for _, _, args in work]

    @tf.function
    def graph():
        out = []
        for (_, fn, _), args in zip(work, inputs):
            out.append(fn(*args))  # shared: every call reads the same tensors
            out.append(fn(*args))
            out.append(fn(*[a * tf.ones([], a.dtype) for a in args]))  # private, forwardable
        return out

    return graph, inputs


def test_graph_of_independent_calls_matches_eager():
    work = _work({tf.half: (SMALL,), tf.bfloat16: (SMALL,), tf.float32: (SMALL, LARGE), tf.float64: (SMALL,)})
    graph, inputs = _independent_calls_graph(work)
    expected = [_bits(fn(*args)) for (_, fn, _), args in zip(work, inputs)]
    before = [[_bits(a) for a in args] for args in inputs]

    results: dict[int, list[bytes]] = {}
    errors: list[str] = []

    def run(thread: int):
        try:
            results[thread] = [_bits(t) for t in graph()]
        except Exception as e:  # noqa: BLE001
            errors.append(f"thread {thread}: {type(e).__name__}: {e}")

    run(-1)  # trace once, then the same graph from several threads at once
    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, "\n".join(errors)
    for thread, got in results.items():
        for i, (label, _, _) in enumerate(work):
            for copy in range(3):
                assert got[3 * i + copy] == expected[i], f"thread {thread} {label} call {copy}: result differs"
    assert [[_bits(a) for a in args] for args in inputs] == before, "an input was overwritten"


# Sizes around the shard sizes TF's pool picks for these cost estimates, with
# odd remainders.
LONG_SIZES = (65537, 131071, 262147, 1000003)


@pytest.mark.parametrize("spec", spec_params())
def test_long_vectors_split_over_threads_are_right(spec):
    attrs = dict(spec.attr_variants[-1])
    ra = round_attrs(attrs)
    for i, n in enumerate(LONG_SIZES):
        x = to_dtype(sample((n,), seed=40 + i, lo=-3, hi=1), tf.float32)
        g = to_dtype(sample((n,), seed=50 + i, lo=-1, hi=0.5), tf.float32)
        what = f"{spec.op_type}{attrs} n={n}"
        y = spec.forward(tf.constant(x), **attrs)
        assert_close(y, spec.ref(as_f64(x), **ra), spec.tolerance(tf.float32), what)
        v = as_f64(y) if spec.grad_takes_outputs else as_f64(x)
        dx = spec.grad_op(tf.constant(g), tf.constant(v.astype(np.float32)), **attrs)
        assert_close(dx, spec.ref_grad(as_f64(g), v, **ra), spec.grad_tolerance(tf.float32, g), "grad " + what)
