"""Benchmark of the fused ops: bias + activation and gated activations, forward and
backward, against the TensorFlow composites a user writes, and a transformer FFN
training step with tf_ops layers against Keras's.

  python -m tf_ops.bench.fused [--size-log2 24] [--ops gelu swish]
                               [--families bias add gated bias_gated] [--no-ffn]

Cases come from the activation table (each entry's bench cases and TensorFlow
equivalent), nothing per activation:
  bias    ``tf_ops.<act>(x, bias=b)`` vs ``tf_eq(tf.nn.bias_add(x, b))``: forward, then
          the tape's dx and db (TF: the activation's gradient, then BiasAddGrad);
  add     ``tf_ops.add_activation(x, r, act)`` vs ``tf_eq(x + r)``: forward, then the
          tape's dx and dr (a residual block's end: ResNet's add + ReLU);
  gated   ``tf_ops.gated(x, act)`` vs ``split, tf_eq(a) * b``;
  bias+gated  ``tf_ops.gated(x, act, bias=b)`` vs the same on ``tf.nn.bias_add(x, b)``
          (backward: dx and db).
Candidates, timed in the same interleaved rounds (timing.py): tf_ops and the TF
composite in ``tf.function``, each also under ``jit_compile``. Ratios are times of
the reference over tf_ops (> 1: tf_ops is faster).

FFN: one training step (forward, backward, SGD update) of Dense(d_ff, act) ->
Dense(d_model) on [tokens, d_model] float32, the plain (gelu) and gated (SwiGLU:
a projection to 2 d_ff, silu(a) * b) forms, tf_ops layers vs Keras layers, each in
``tf.function`` and under ``jit_compile``.
"""

from __future__ import annotations

import argparse
import functools

import keras
import tensorflow as tf

import tf_ops
from tf_ops.bench.timing import time_interleaved
from tf_ops.python.activation.table import ACTIVATIONS
from tf_ops.python.core.op_info import snake_case


def _cases():
    for entry in ACTIVATIONS:
        if entry.tensorflow is None:
            continue
        for name, attrs in entry.bench_cases().items():
            yield name, entry, dict(attrs)


def _run_with_bias(fn, x, b, g):
    """y = fn(x, b), then dx and db through a tape."""
    with tf.GradientTape() as tape:
        tape.watch([x, b])
        y = fn(x, b)
    return (y, *tape.gradient(y, [x, b], output_gradients=g))


def _bias_pair(entry, attrs):
    ours_fn = functools.partial(tf_ops.__dict__[entry.function], **attrs)
    theirs_fn = functools.partial(entry.tensorflow.forward, **attrs)
    run = _run_with_bias
    ours = lambda x, b, g: run(lambda x, b: ours_fn(x, bias=b), x, b, g)  # noqa: E731
    theirs = lambda x, b, g: run(lambda x, b: theirs_fn(tf.nn.bias_add(x, b)), x, b, g)  # noqa: E731
    return ours, theirs


def _add_pair(entry, attrs):
    theirs_fn = functools.partial(entry.tensorflow.forward, **attrs)
    run = _run_with_bias
    ours = lambda x, r, g: run(  # noqa: E731
        lambda x, r: tf_ops.add_activation(x, r, entry.function, **attrs), x, r, g)
    theirs = lambda x, r, g: run(lambda x, r: theirs_fn(x + r), x, r, g)  # noqa: E731
    return ours, theirs


def _gated_pair(entry, attrs):
    theirs_fn = functools.partial(entry.tensorflow.forward, **attrs)

    def run(fn, x, g):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        return y, tape.gradient(y, x, output_gradients=g)

    def composite(x):
        a, b = tf.split(x, 2, axis=-1)
        return theirs_fn(a) * b

    ours = lambda x, g: run(lambda x: tf_ops.gated(x, entry.function, **attrs), x, g)  # noqa: E731
    theirs = lambda x, g: run(composite, x, g)  # noqa: E731
    return ours, theirs


def _bias_gated_pair(entry, attrs):
    theirs_fn = functools.partial(entry.tensorflow.forward, **attrs)
    run = _run_with_bias

    def composite(x, b):
        a, gate = tf.split(tf.nn.bias_add(x, b), 2, axis=-1)
        return theirs_fn(a) * gate

    ours = lambda x, b, g: run(  # noqa: E731
        lambda x, b: tf_ops.gated(x, entry.function, bias=b, **attrs), x, b, g)
    theirs = lambda x, b, g: run(composite, x, b, g)  # noqa: E731
    return ours, theirs


# The fused op families benchmarked per activation (op-name prefixes: bias_gelu, ...).
FAMILIES = ("bias", "add", "gated", "bias_gated")
# The fused ops these cases time, by their function names (bias_gelu, gated_gelu, ...):
# what the bench coverage test (tests/bench/test_bench.py) reads from the family's manifest.
BENCHED_OPS = frozenset(f"{family}_{snake_case(entry.op)}" for _, entry, _ in _cases()
                        for family in FAMILIES)


def _time(ours, theirs, args, budget_s: float) -> dict[str, float]:
    candidates = {
        "tf_ops": tf.function(ours),
        "tf": tf.function(theirs),
        "tf_ops_xla": tf.function(ours, jit_compile=True),
        "xla": tf.function(theirs, jit_compile=True),
    }
    timings = time_interleaved({k: functools.partial(f, *args) for k, f in candidates.items()},
                               min_reps=5, max_reps=50, budget_s=budget_s)
    return {k: t.median for k, t in timings.items()}


def _ratios_line(label: str, t: dict[str, float]) -> str:
    return (f"{label:<26} tf_ops {t['tf_ops'] * 1e3:8.2f} ms   vs TF graph {t['tf'] / t['tf_ops']:5.2f}x"
            f"   vs XLA composite {t['xla'] / t['tf_ops']:5.2f}x"
            f"   jit: tf_ops_xla vs XLA {t['xla'] / t['tf_ops_xla']:5.2f}x")


def bench_ops(size_log2: int, ops: list[str] | None, budget_s: float,
              families: tuple[str, ...] = FAMILIES) -> None:
    channels = 1024
    rows = 2**size_log2 // channels
    x = tf.random.normal([rows, channels])
    b = tf.random.normal([channels])
    r = tf.random.normal([rows, channels])
    g = tf.random.normal([rows, channels])
    g_half = tf.random.normal([rows, channels // 2])
    print(f"fwd+bwd, float32, 2^{size_log2} elements ([{rows}, {channels}]), times are medians")
    for name, entry, attrs in _cases():
        if ops and name not in ops:
            continue
        if "bias" in families:
            print(_ratios_line(f"bias+{name}", _time(*_bias_pair(entry, attrs), (x, b, g), budget_s)))
        if "add" in families:
            print(_ratios_line(f"add+{name}", _time(*_add_pair(entry, attrs), (x, r, g), budget_s)))
        if "gated" in families:
            print(_ratios_line(f"gated {name}", _time(*_gated_pair(entry, attrs), (x, g_half), budget_s)))
        if "bias_gated" in families:
            print(_ratios_line(f"bias+gated {name}",
                               _time(*_bias_gated_pair(entry, attrs), (x, b, g_half), budget_s)))


def _ffn(tokens: int, d_model: int, d_ff: int, gated: bool, ours: bool):
    """(model, step) for one FFN training step."""
    keras.utils.set_random_seed(0)
    if gated:
        if ours:
            first = tf_ops.layers.GatedDense(d_ff, activation="swish")
        else:
            class SwiGLU(keras.layers.Layer):
                def __init__(self):
                    super().__init__()
                    self.proj = keras.layers.Dense(2 * d_ff)

                def call(self, x):
                    a, b = tf.split(self.proj(x), 2, axis=-1)
                    return tf.nn.silu(a) * b

            first = SwiGLU()
    else:
        first = (tf_ops.layers.Dense(d_ff, activation=tf_ops.gelu) if ours
                 else keras.layers.Dense(d_ff, activation="gelu"))
    model = keras.Sequential([keras.Input((d_model,)), first, keras.layers.Dense(d_model)])
    optimizer = keras.optimizers.SGD(1e-3)
    optimizer.build(model.trainable_variables)

    def step(x, target):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - target))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    return step


def bench_ffn(budget_s: float) -> None:
    print("FFN training step, float32 (forward, backward, SGD): times of Keras / tf_ops")
    for tokens, d_model, d_ff in ((4096, 256, 1024), (2048, 512, 2048)):
        x = tf.random.normal([tokens, d_model])
        target = tf.random.normal([tokens, d_model])
        for gated in (False, True):
            candidates = {}
            for ours in (True, False):
                for jit in (False, True):
                    step = _ffn(tokens, d_model, d_ff, gated, ours)
                    key = ("tf_ops" if ours else "keras") + ("_xla" if jit else "")
                    candidates[key] = functools.partial(tf.function(step, jit_compile=jit), x, target)
            t = {k: v.median for k, v in time_interleaved(candidates, 5, 50, budget_s).items()}
            best_keras = min(t["keras"], t["keras_xla"])
            best_ours = min(t["tf_ops"], t["tf_ops_xla"])
            label = f"{tokens}x{d_model}->{d_ff} {'swiglu' if gated else 'gelu'}"
            print(f"{label:<28} " + "  ".join(f"{k} {v * 1e3:7.2f} ms" for k, v in t.items())
                  + f"   faster Keras / faster tf_ops {best_keras / best_ours:5.2f}x"
                  + f"   faster Keras / tf_ops graph {best_keras / t['tf_ops']:5.2f}x")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-log2", type=int, default=24)
    parser.add_argument("--ops", nargs="*", help="bench case names (default: all)")
    parser.add_argument("--budget-s", type=float, default=4.0, help="per case, all candidates")
    parser.add_argument("--families", nargs="*", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--no-ffn", action="store_true")
    parser.add_argument("--no-ops", action="store_true")
    args = parser.parse_args(argv)
    if not args.no_ops:
        bench_ops(args.size_log2, args.ops, args.budget_s, tuple(args.families))
    if not args.no_ffn:
        bench_ffn(args.budget_s)


if __name__ == "__main__":
    main()
