"""Benchmark of the rotary position embedding, forward + backward, against keras-hub's
``RotaryEmbedding`` layer.

  python -m tf_ops.bench.rotary [--shapes 4x256x8x64 4x1024x32x128] [--dtypes float32 bfloat16]
                                [--budget-s 3]

Each case is one ``tf.function`` computing y and the tape's gradient of x for LLaMA's
query/key shapes [B, S, H, D]: `tf_ops.rotary_embedding` (its op and its grad op) against
keras-hub's layer (Split, Neg, Pack, Mul, Mul, AddV2 per call, and the cos/sin tables) in
graph mode and under ``jit_compile``; tf_ops under ``jit_compile`` (its XLA lowering) too.
Where keras-hub is not installed the reference is the portable composite (keras-hub's math
in TensorFlow ops), and the output says so. Candidates are timed in the same interleaved
rounds (timing.py); ratios are the reference's median time over tf_ops' (> 1: tf_ops is
faster).
"""

from __future__ import annotations

import argparse
import functools

import tensorflow as tf

import tf_ops
from tf_ops.bench.timing import time_interleaved

SHAPES = ((4, 256, 8, 64), (4, 1024, 32, 128))
DTYPES = ("float32", "bfloat16")
# The ops these cases time (tests/bench/test_bench.py: every forward op has a benchmark).
BENCHED_OPS = frozenset({"rotary_embedding"})


def reference_layer(dtype: str):
    """keras-hub's RotaryEmbedding computing in `dtype` (as under a mixed precision policy:
    a float32 layer would return float32 for bfloat16 input), or None where keras-hub is
    not installed."""
    try:
        from keras_hub.src.layers.modeling.rotary_embedding import RotaryEmbedding
    except ImportError:
        return None
    return RotaryEmbedding(dtype=dtype)


def _portable(x, start_index=0):
    with tf_ops.portable():
        return tf_ops.rotary_embedding(x, start_index)


def _step(fn):
    def step(x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x, start_index=7)
        return y, tape.gradient(y, x, output_gradients=dy)

    return step


def bench_case(shape, dtype: str, budget_s: float) -> dict[str, float]:
    layer = reference_layer(dtype)
    x = tf.cast(tf.random.normal(shape), dtype)
    dy = tf.cast(tf.random.normal(shape), dtype)
    reference = layer if layer is not None else _portable
    ours, theirs = _step(tf_ops.rotary_embedding), _step(reference)
    candidates = {
        "tf_ops": tf.function(ours),
        "tf_ops_xla": tf.function(ours, jit_compile=True),
        "reference": tf.function(theirs),
        "reference_xla": tf.function(theirs, jit_compile=True),
    }
    timings = time_interleaved({k: functools.partial(f, x, dy) for k, f in candidates.items()},
                               min_reps=5, max_reps=60, budget_s=budget_s)
    return {k: t.median for k, t in timings.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="*", default=["x".join(map(str, s)) for s in SHAPES])
    parser.add_argument("--dtypes", nargs="*", choices=DTYPES, default=list(DTYPES))
    parser.add_argument("--budget-s", type=float, default=3.0, help="per case, all candidates")
    args = parser.parse_args(argv)
    name = "keras-hub's RotaryEmbedding" if reference_layer("float32") is not None else (
        "the portable composite (keras-hub is not installed)")
    print(f"fwd+bwd, medians; ratios = {name}'s time / tf_ops' time (> 1: tf_ops faster)")
    for dtype in args.dtypes:
        for text in args.shapes:
            shape = tuple(int(v) for v in text.split("x"))
            t = bench_case(shape, dtype, args.budget_s)
            label = f"{dtype} {list(shape)}"
            print(f"{label:<28} tf_ops {t['tf_ops'] * 1e3:8.2f} ms"
                  f"   vs graph {t['reference'] / t['tf_ops']:5.2f}x"
                  f"   vs XLA {t['reference_xla'] / t['tf_ops']:5.2f}x"
                  f"   (tf_ops under XLA {t['reference_xla'] / t['tf_ops_xla']:5.2f}x"
                  f" the XLA reference)", flush=True)


if __name__ == "__main__":
    main()
