"""Benchmark of the normalisation ops: layer norm and RMS norm, each also with the
residual add, forward + backward, against Keras's composite.

  python -m tf_ops.bench.norm [--shapes 4096x512 ...] [--dtypes float32 bfloat16]
                              [--kinds layer_norm rms_norm add_layer_norm add_rms_norm]
                              [--budget-s 3]

Each case is one ``tf.function`` computing y (and h) and the tape's gradients of x (and
the residual), gamma and beta: ``tf_ops.layer_norm`` / ``tf_ops.rms_norm`` against
``keras.ops.layer_normalization`` / ``keras.ops.rms_normalization`` (what Keras's layers
run: ``tf.nn.moments``, Rsqrt, ... and casts for 16-bit inputs), the latter in graph mode
and under ``jit_compile``. gamma and beta are float32, as Keras keeps them under mixed
precision. Candidates are timed in the same interleaved rounds (timing.py); ratios are
the reference's median time over tf_ops' (> 1: tf_ops is faster).

The memory floor, timed in the same rounds: a copy of one [rows, cols] tensor (``x *
2``: one read, one write) scaled to the case's least traffic, ``PASSES`` full-tensor
reads and writes (a norm: x and the output forward, dy, x and dx backward; with the
residual, x, r, h and y forward, dy, h and one dx for both inputs backward). Where the
tensors do not fit in the caches (the last shapes), tf_ops' time over the floor is what
a faster kernel could still gain, and Keras's time over it bounds any kernel's ratio
against Keras. Where they fit, the copy (TensorFlow's Mul, a fresh output like every
op here) is no floor: a fused kernel beats it.
"""

from __future__ import annotations

import argparse
import functools

import keras
import tensorflow as tf

import tf_ops
from tf_ops.bench.timing import time_interleaved

SHAPES = ((4096, 512), (4096, 768), (2048, 4096), (1024, 16384))
DTYPES = ("float32", "bfloat16")
KINDS = ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm")
# The ops these cases time (tests/bench/test_bench.py: every forward op has a benchmark).
BENCHED_OPS = frozenset(KINDS)
# Full-tensor reads and writes a fused forward + backward must do (the module docstring).
PASSES = {"layer_norm": 5, "rms_norm": 5, "add_layer_norm": 7, "add_rms_norm": 7}


def _ours(kind: str):
    centered = "layer" in kind
    residual = kind.startswith("add_")

    def fn(x, r, gamma, beta):
        if centered:
            return tf_ops.layer_norm(x, gamma, beta, epsilon=1e-5, residual=r if residual else None)
        return tf_ops.rms_norm(x, gamma, epsilon=1e-5, residual=r if residual else None)

    return fn


def _keras(kind: str):
    centered = "layer" in kind
    residual = kind.startswith("add_")

    def fn(x, r, gamma, beta):
        h = x + r if residual else x
        if centered:
            y = keras.ops.layer_normalization(h, gamma, beta, axis=-1, epsilon=1e-5)
        else:
            y = keras.ops.rms_normalization(h, gamma, axis=-1, epsilon=1e-5)
        return (h, y) if residual else y

    return fn


def _step(fn, residual: bool, centered: bool):
    def step(x, r, gamma, beta, dy):
        with tf.GradientTape() as tape:
            watched = [x, gamma] + ([beta] if centered else []) + ([r] if residual else [])
            tape.watch(watched)
            out = fn(x, r, gamma, beta)
        targets = list(out) if residual else [out]
        grads = [dy, dy] if residual else [dy]
        return [out, tape.gradient(targets, watched, output_gradients=grads)]

    return step


def bench_case(kind: str, rows: int, cols: int, dtype: str, budget_s: float) -> dict[str, float]:
    residual, centered = kind.startswith("add_"), "layer" in kind
    x = tf.cast(tf.random.normal([rows, cols]), dtype)
    r = tf.cast(tf.random.normal([rows, cols]), dtype)
    dy = tf.cast(tf.random.normal([rows, cols]), dtype)
    gamma = tf.random.uniform([cols], 0.5, 1.5)
    beta = tf.random.normal([cols])
    args = (x, r, gamma, beta, dy)
    ours, theirs = _step(_ours(kind), residual, centered), _step(_keras(kind), residual, centered)
    candidates = {
        "tf_ops": tf.function(ours),
        "keras": tf.function(theirs),
        "xla": tf.function(theirs, jit_compile=True),
        "copy": tf.function(lambda x, *_: x * 2),
    }
    timings = time_interleaved({k: functools.partial(f, *args) for k, f in candidates.items()},
                               min_reps=5, max_reps=60, budget_s=budget_s)
    times = {k: t.median for k, t in timings.items()}
    times["floor"] = times.pop("copy") * PASSES[kind] / 2
    return times


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="*", default=[f"{r}x{c}" for r, c in SHAPES])
    parser.add_argument("--dtypes", nargs="*", choices=DTYPES, default=list(DTYPES))
    parser.add_argument("--kinds", nargs="*", choices=KINDS, default=list(KINDS))
    parser.add_argument("--budget-s", type=float, default=3.0, help="per case, all candidates")
    args = parser.parse_args(argv)
    print("fwd+bwd, medians; ratios = reference time / tf_ops time (> 1: tf_ops faster);"
          " floor: the case's least memory traffic at the copy's speed")
    for kind in args.kinds:
        for dtype in args.dtypes:
            for shape in args.shapes:
                rows, cols = (int(v) for v in shape.split("x"))
                t = bench_case(kind, rows, cols, dtype, args.budget_s)
                label = f"{kind} {dtype} [{rows}, {cols}]"
                print(f"{label:<36} tf_ops {t['tf_ops'] * 1e3:8.2f} ms"
                      f"   vs Keras graph {t['keras'] / t['tf_ops']:5.2f}x"
                      f"   vs XLA composite {t['xla'] / t['tf_ops']:5.2f}x"
                      f"   floor {t['floor'] * 1e3:7.2f} ms: tf_ops {t['tf_ops'] / t['floor']:4.2f}x"
                      f" it, Keras graph {t['keras'] / t['floor']:4.2f}x", flush=True)


if __name__ == "__main__":
    main()
