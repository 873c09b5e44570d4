"""Benchmark of the softmax family, CPU, interleaved rounds (timing.py), ratios of the
reference's time over tf_ops's (> 1: tf_ops is faster):

  python -m tf_ops.bench.softmax [--budget-s 4] [--no-memory] [--vocab 32000 128000]

- masked softmax forward + backward (the tape's dx) at attention shapes
  [4*8*256, 256] and [4*8*1024, 1024] (as [4, 8, Q, K] with a [4, 1, Q, K] mask),
  float32 and bfloat16: ``tf_ops.softmax(x, mask=m)`` vs ``keras.layers.Softmax()(x, m)``,
  both in ``tf.function``, and each under ``jit_compile``;
- cross-entropy forward + backward over [8192, 32000] float32 logits: with label
  smoothing 0.1 and an ignored class vs Keras's loss (CategoricalCrossentropy on one-hot
  targets with smoothing, the ignored rows weighted 0); plain vs
  ``tf.nn.sparse_softmax_cross_entropy_with_logits``;
- ``linear_cross_entropy`` at 4096 tokens x hidden 512 x vocab V: peak CPU allocator memory
  of forward + backward (``tf.config.experimental.get_memory_info("CPU:0")["peak"]`` after
  ``reset_memory_stats``, in a fresh process per vocabulary with TF's BFC allocator, the
  one that keeps those statistics) and time (with TF's default CPU allocator, and again
  with BFC), vs ``sparse_softmax_cross_entropy_with_logits(hidden @ kernel)``.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys

import keras
import tensorflow as tf

import tf_ops
from tf_ops.bench.timing import time_interleaved

_BFC = "TF_CPU_ALLOCATOR_USE_BFC"

# The library's forward ops this module benchmarks (tests/bench/test_bench.py).
BENCHED_OPS = frozenset({"softmax", "log_softmax", "scaled_masked_softmax",
                         "sparse_softmax_cross_entropy"})


def _fwd_bwd(fn, x, g):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    return y, tape.gradient(y, x, output_gradients=g)


def _time(candidates: dict, args, budget_s: float) -> dict[str, float]:
    timings = time_interleaved({k: functools.partial(f, *args) for k, f in candidates.items()},
                               min_reps=5, max_reps=50, budget_s=budget_s)
    return {k: t.median for k, t in timings.items()}


def bench_masked_softmax(budget_s: float) -> None:
    print("masked softmax fwd+bwd, [4, 8, Q, K] with a [4, 1, Q, K] mask: "
          "Keras Softmax(mask) time / tf_ops time")
    for q in (256, 1024):
        for dtype in (tf.float32, tf.bfloat16):
            layer = keras.layers.Softmax(dtype=dtype.name)  # computes in the inputs' dtype
            x = tf.cast(tf.random.normal([4, 8, q, q]), dtype)
            g = tf.cast(tf.random.normal([4, 8, q, q]), dtype)
            mask = tf.random.uniform([4, 1, q, q]) < 0.8
            ours = lambda x, g: _fwd_bwd(lambda v: tf_ops.softmax(v, mask=mask), x, g)  # noqa: E731
            theirs = lambda x, g: _fwd_bwd(lambda v: layer(v, mask=mask), x, g)  # noqa: E731
            t = _time({"tf_ops": tf.function(ours), "keras": tf.function(theirs),
                       "tf_ops_xla": tf.function(ours, jit_compile=True),
                       "keras_xla": tf.function(theirs, jit_compile=True)}, (x, g), budget_s)
            print(f"  [{4 * 8 * q}, {q}] {dtype.name:<8} tf_ops {t['tf_ops'] * 1e3:8.2f} ms"
                  f"   vs Keras graph {t['keras'] / t['tf_ops']:5.2f}x"
                  f"   vs Keras XLA {t['keras_xla'] / t['tf_ops']:5.2f}x"
                  f"   jit: tf_ops_xla vs Keras XLA {t['keras_xla'] / t['tf_ops_xla']:5.2f}x")


def bench_cross_entropy(budget_s: float, rows: int = 8192, classes: int = 32000) -> None:
    print(f"cross-entropy fwd+bwd, [{rows}, {classes}] float32: reference time / tf_ops time")
    x = tf.random.normal([rows, classes])
    labels = tf.random.uniform([rows], 0, classes, tf.int64)
    ignored = tf.random.uniform([rows]) < 0.1
    labels_ig = tf.where(ignored, tf.constant(-100, tf.int64), labels)
    keras_loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    ours_loss = tf_ops.losses.SparseCategoricalCrossentropy(
        from_logits=True, ignore_class=-100, label_smoothing=0.1)

    def run(fn, x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = fn(x)
        return loss, tape.gradient(loss, x)

    def keras_smooth(v):
        weights = tf.cast(tf.logical_not(ignored), tf.float32)
        onehot = tf.one_hot(tf.where(ignored, tf.zeros_like(labels), labels), classes)
        return keras_loss(onehot, v, sample_weight=weights)

    t = _time({"tf_ops": tf.function(lambda v: run(lambda z: ours_loss(labels_ig, z), v)),
               "keras": tf.function(lambda v: run(keras_smooth, v))}, (x,), budget_s)
    print(f"  smoothing 0.1 + ignored class  tf_ops {t['tf_ops'] * 1e3:8.2f} ms"
          f"   vs Keras {t['keras'] / t['tf_ops']:5.2f}x")
    t = _time({"tf_ops": tf.function(lambda v: run(lambda z: tf.reduce_mean(
                   tf_ops.sparse_softmax_cross_entropy(z, labels)), v)),
               "tf": tf.function(lambda v: run(lambda z: tf.reduce_mean(
                   tf.nn.sparse_softmax_cross_entropy_with_logits(labels, z)), v))},
              (x,), budget_s)
    print(f"  plain                          tf_ops {t['tf_ops'] * 1e3:8.2f} ms"
          f"   vs TF fused op {t['tf'] / t['tf_ops']:5.2f}x")


def linear_cross_entropy_heads(labels: tf.Tensor) -> dict:
    """The heads compared, as tf.functions of (hidden, kernel) returning the loss and its
    gradients: ``default`` and ``fast`` chunks, and ``tf`` (TensorFlow's matmul and fused
    cross-entropy). tests/scripts/linear_cross_entropy_peak.py measures the same ones."""

    def ours(h, k, chunk_size):
        with tf.GradientTape() as tape:
            tape.watch([h, k])
            loss = tf_ops.linear_cross_entropy(h, k, labels, chunk_size=chunk_size)
        return loss, tape.gradient(loss, [h, k])

    def theirs(h, k):
        with tf.GradientTape() as tape:
            tape.watch([h, k])
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels, tf.matmul(h, k)))
        return loss, tape.gradient(loss, [h, k])

    return {"default": tf.function(lambda h, k: ours(h, k, None)),
            "fast": tf.function(lambda h, k: ours(h, k, "fast")),
            "tf": tf.function(theirs)}


def peak_memory(fn, *args) -> int:
    """Peak allocator bytes of one call of `fn`, its outputs read. Needs TF's BFC
    allocator (`TF_CPU_ALLOCATOR_USE_BFC`), which hands a request a free chunk of up to
    twice its size and counts all of it: what earlier calls left free moves the peak by a
    few percent (the bench warms every head first; the memory test measures cold)."""
    tf.config.experimental.reset_memory_stats("CPU:0")
    [t.numpy() for t in tf.nest.flatten(fn(*args))]
    return tf.config.experimental.get_memory_info("CPU:0")["peak"]


def bench_linear_cross_entropy(vocabs, budget_s: float, tokens: int = 4096,
                               hidden: int = 512, memory: bool = False) -> None:
    """Both chunk sizes: the default (least memory) and ``"fast"``. Time always; with
    `memory` (a process with TF's BFC allocator) the peak memory too."""
    allocator = "BFC allocator" if memory else "TF's default CPU allocator"
    print(f"linear_cross_entropy fwd+bwd, {tokens} tokens x hidden {hidden}, float32, "
          f"{allocator}")
    for vocab in vocabs:
        h = tf.random.normal([tokens, hidden])
        k = tf.random.normal([hidden, vocab], stddev=0.02)
        labels = tf.random.uniform([tokens], 0, vocab, tf.int64)
        fns = linear_cross_entropy_heads(labels)
        for f in fns.values():
            f(h, k)  # traced, warm
        peaks = {n: peak_memory(f, h, k) for n, f in fns.items()} if memory else {}
        t = _time(fns, (h, k), budget_s)
        for n in ("default", "fast"):
            peak = (f"peak {peaks[n] / 2**20:8.1f} MiB vs {peaks['tf'] / 2**20:8.1f} MiB "
                    f"({peaks[n] / peaks['tf']:5.1%})   " if memory else "")
            print(f"  vocab {vocab:>6} chunks {n:<7}: {peak}time tf_ops {t[n]:6.3f} s vs "
                  f"{t['tf']:6.3f} s ({t[n] / t['tf']:4.2f}x of TF's)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget-s", type=float, default=4.0, help="per case, all candidates")
    parser.add_argument("--vocab", type=int, nargs="*", default=[32000, 128000])
    parser.add_argument("--no-softmax", action="store_true")
    parser.add_argument("--no-ce", action="store_true")
    parser.add_argument("--no-memory", action="store_true")
    args = parser.parse_args(argv)
    if not args.no_softmax:
        bench_masked_softmax(args.budget_s)
    if not args.no_ce:
        bench_cross_entropy(args.budget_s)
    if args.no_memory:
        return
    if os.environ.get(_BFC) == "true":
        bench_linear_cross_entropy(args.vocab, args.budget_s, memory=True)
        return
    # The time with TF's default CPU allocator, what users get. TF keeps allocator
    # statistics only in its BFC allocator, chosen when TF starts: the memory is measured
    # in a process that has it (the time again there: BFC reuses the unfused head's large
    # buffers, which the default allocator takes fresh from the system each call), one
    # per vocabulary: BFC hands a request a free chunk of up to twice its size and counts
    # all of it, so what an earlier vocabulary's runs left free would move the next one's
    # peak (measured: +56 MiB, 24.6% -> 26.7%, at 128000 after 32000).
    bench_linear_cross_entropy(args.vocab, args.budget_s)
    for vocab in args.vocab:
        subprocess.run([sys.executable, "-m", "tf_ops.bench.softmax", "--no-softmax",
                        "--no-ce", "--budget-s", str(args.budget_s), "--vocab", str(vocab)],
                       env={**os.environ, _BFC: "true"}, check=True)


if __name__ == "__main__":
    main()
