"""Times each tf_ops op against TensorFlow's built-in (or composite) op in the same run.

Prints a Markdown table (median of interleaved repetitions, 2^24 float32 by
default) for the README. Speed is measured here, never in tests.

  .venv/bin/python tools/time_ops.py [--size-log2 24] [--reps 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tensorflow as tf  # noqa: E402

import tf_ops  # noqa: E402


def _composite_mish(x: tf.Tensor) -> tf.Tensor:
    return x * tf.tanh(tf.math.softplus(x))


# name -> (tf_ops forward, TensorFlow's built-in or composite forward)
CASES = {
    "leaky_relu": (lambda x: tf_ops.leaky_relu(x, alpha=0.2), lambda x: tf.nn.leaky_relu(x, 0.2)),
    "elu": (tf_ops.elu, tf.nn.elu),
    "gelu": (tf_ops.gelu, tf.nn.gelu),
    "gelu_tanh": (lambda x: tf_ops.gelu(x, approximate=True), lambda x: tf.nn.gelu(x, True)),
    "swish": (tf_ops.swish, tf.nn.silu),
    "mish": (tf_ops.mish, _composite_mish),
}


def _forward_backward(fn):
    """x -> (y, dy/dx) through a tape: the forward op and the grad op both run."""

    def run(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        return y, tape.gradient(y, x)

    return run



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-log2", type=int, default=24)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()

    x = tf.random.normal([2**args.size_log2], dtype=tf.float32)
    print(f"| op (2^{args.size_log2} float32) | pass | tf_ops ms | TF ms | speed-up |")
    print("|---|---|---|---|---|")
    for (name, (ours, theirs)), pass_ in [
        (case, p) for case in CASES.items() for p in ("forward", "fwd+bwd")
    ]:
        if pass_ == "fwd+bwd":
            ours, theirs = _forward_backward(ours), _forward_backward(theirs)
        fns = {"ours": tf.function(ours), "tf": tf.function(theirs)}
        times: dict[str, list[float]] = {k: [] for k in fns}
        for fn in fns.values():  # warm-up and trace
            tf.nest.map_structure(lambda t: t.numpy(), fn(x))
        for _ in range(args.reps):
            for key, fn in fns.items():  # interleaved, so drift hits both
                start = time.perf_counter()
                tf.nest.map_structure(lambda t: t.numpy(), fn(x))
                times[key].append(time.perf_counter() - start)
        ours_ms = statistics.median(times["ours"]) * 1e3
        tf_ms = statistics.median(times["tf"]) * 1e3
        print(f"| {name} | {pass_} | {ours_ms:.2f} | {tf_ms:.2f} | {tf_ms / ours_ms:.2f}× |")


if __name__ == "__main__":
    main()
