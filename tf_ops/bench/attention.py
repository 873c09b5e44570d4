"""Benchmark of the fused attention, forward + backward, against Keras's attention on
TensorFlow (``keras.ops.dot_product_attention``) in graph mode and under XLA, against
the path `patch_keras()` took before the fused op (batched matmuls around tf_ops' fused
masked softmax), and against TensorFlow's matmul rate; with each candidate's peak
allocator memory.

  python -m tf_ops.bench.attention [--cases causal2048 full2048 ...] [--dtypes float32]
                                   [--budget-s 20] [--torch]

A case is ``[batch, T, heads, head_dim]`` (keys as many as queries) with causal, none or
a padding mask (keras-hub's ``[batch, 1, T, S]``), or a trainable ``[1, heads, T, S]``
bias (T5's relative-position bias; its gradient taken too: ``TfOps>AttentionBiasGrad``). Candidates are timed in the same
interleaved rounds (timing.py); ratios are a candidate's median time over tf_ops' (> 1:
tf_ops is faster). The FLOP rate counts the work done: 2 products forward and 5 backward
(the weights recomputed) of 2 B N T S D each, the causal half once; "matmul" is a
batched TF matmul of the same operand sizes, timed in the same rounds. Memory: the BFC
allocator's peak during one step above what was in use before it (the command re-runs
itself with ``TF_CPU_ALLOCATOR_USE_BFC=true``, as ``tf_ops.bench.models``). ``--torch``
adds PyTorch's CPU flash attention (``scaled_dot_product_attention``) where torch is
installed, in the same rounds; its memory is its resident set's growth during a step in a
fresh process (`torch_peak_mib`).
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys

_BFC = "TF_CPU_ALLOCATOR_USE_BFC"

# name -> (batch, T, heads, head_dim, kind: "causal", "full", "padding" or "bias")
CASES = {
    "causal2048": (1, 2048, 8, 64, "causal"),
    "full2048": (1, 2048, 8, 64, "full"),
    "full512x4": (4, 512, 12, 64, "full"),
    "padding512x4": (4, 512, 12, 64, "padding"),
    "bias2048": (1, 2048, 8, 64, "bias"),
    "bias512x4": (4, 512, 8, 64, "bias"),
    "causal8192": (1, 8192, 8, 64, "causal"),
}
DTYPES = ("float32", "bfloat16")
# The ops these cases time (tests/bench/test_bench.py: every forward op has a benchmark).
BENCHED_OPS = frozenset({"attention"})


def _inputs(case, dtype: str):
    import numpy as np
    import tensorflow as tf

    b, t, n, d, kind = case
    rng = np.random.default_rng(0)
    q, k, v, dout = (tf.cast(tf.constant(rng.standard_normal((b, t, n, d)), tf.float32),
                             dtype) for _ in range(4))
    mask = bias = None
    if kind == "padding":
        lengths = rng.integers(t // 2, t + 1, size=b)
        mask = tf.constant((np.arange(t)[None, None, None, :] <
                            lengths[:, None, None, None]).repeat(t, axis=2))
    elif kind == "bias":
        bias = tf.cast(tf.constant(rng.standard_normal((1, n, t, t)), tf.float32), dtype)
    return q, k, v, dout, mask, bias


def _step(attention, causal: bool, mask, bias):
    """Forward and backward; with a bias, its gradient too (it is trainable)."""
    import tensorflow as tf

    def step(q, k, v, dout):
        sources = [q, k, v] + ([bias] if bias is not None else [])
        with tf.GradientTape() as tape:
            tape.watch(sources)
            out = attention(q, k, v, mask=mask, causal=causal, bias=bias)
        return tape.gradient(out, sources, output_gradients=dout)

    return step


def keras_attention(q, k, v, mask=None, causal=False, bias=None):
    """Stock Keras 3's TensorFlow attention (never the patched one)."""
    from keras.src.backend.tensorflow import nn as keras_nn

    return keras_nn.dot_product_attention(q, k, v, bias=bias, mask=mask, is_causal=causal)


def softmax_path(q, k, v, mask=None, causal=False, bias=None):
    """What patch_keras() ran before the fused op: heads-first batched matmuls around
    ``tf_ops.softmax(mask=, scale=, causal=)``, the [B, N, T, S] weights kept."""
    import tensorflow as tf

    import tf_ops

    first = functools.partial(tf.transpose, perm=[0, 2, 1, 3])
    logits = tf.matmul(first(q), first(k), transpose_b=True)
    logits = tf.cast(logits, tf.float32)
    if bias is not None:  # scaled here, as the softmax's scale will scale it back
        logits += tf.cast(bias, tf.float32) * math.sqrt(q.shape[-1])
    probs = tf_ops.softmax(logits, mask=mask, scale=1.0 / math.sqrt(q.shape[-1]),
                           causal=causal)
    return first(tf.matmul(tf.cast(probs, v.dtype), first(v)))


def _peak_mib(fn) -> float:
    import tensorflow as tf

    peaks = []
    for _ in range(2):
        before = tf.config.experimental.get_memory_info("CPU:0")["current"]
        tf.config.experimental.reset_memory_stats("CPU:0")
        fn()
        peaks.append(tf.config.experimental.get_memory_info("CPU:0")["peak"] - before)
    return max(max(peaks), 0) / 2**20


def bench_case(name: str, dtype: str, budget_s: float, with_slow: bool,
               with_torch: bool = False) -> dict:
    import tensorflow as tf

    import tf_ops
    from tf_ops.bench.timing import time_interleaved

    case = CASES[name]
    b, t, n, d, kind = case
    q, k, v, dout, mask, bias = _inputs(case, dtype)
    causal = kind == "causal"
    steps = {
        "tf_ops": tf.function(_step(tf_ops.attention, causal, mask, bias)),
        "keras": tf.function(_step(keras_attention, causal, mask, bias)),
        "keras_xla": tf.function(_step(keras_attention, causal, mask, bias),
                                 jit_compile=True),
        "softmax_path": tf.function(_step(softmax_path, causal, mask, bias)),
        "tf_ops_xla": tf.function(_step(tf_ops.attention, causal, mask, bias),
                                  jit_compile=True),
    }
    if not with_slow:  # T = 8192: Keras's T x T tensors take GiBs; XLA's compile minutes
        for slow in ("keras_xla", "tf_ops_xla"):
            steps.pop(slow)
    qh = tf.transpose(q, [0, 2, 1, 3])
    steps["matmul"] = tf.function(lambda: tf.matmul(qh, qh, transpose_b=True))
    calls = {key: (functools.partial(f, q, k, v, dout) if key != "matmul" else f)
             for key, f in steps.items()}
    theirs = torch_step(case, dtype) if with_torch else None
    if theirs is not None:
        calls["torch"] = theirs
    timings = time_interleaved(calls, min_reps=3, max_reps=40, budget_s=budget_s)
    medians = {key: tm.median for key, tm in timings.items()}
    share = 0.5 if causal else 1.0
    product = 2.0 * b * n * t * t * d
    memory = {key: _peak_mib(fn) for key, fn in calls.items()
              if key not in ("matmul", "torch")}
    return {"medians": medians, "memory": memory,
            "gflops": 7 * product * share / medians["tf_ops"] / 1e9,
            "matmul_gflops": product / medians["matmul"] / 1e9}


def torch_step(case, dtype: str):
    """One forward + backward of PyTorch's CPU flash attention
    (``scaled_dot_product_attention``, heads-first) on the case, where torch is installed
    (never a dependency); None without it."""
    try:
        import torch
    except ImportError:
        return None
    b, t, n, d, kind = case
    if kind == "bias":  # a trainable additive mask takes torch's math path, not flash
        return None
    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, n, t, d, dtype=dt, generator=gen, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(b, n, t, d, dtype=dt, generator=gen)
    mask = None
    if kind == "padding":  # the TF candidates' [batch, 1, T, S] mask
        tf_mask = _inputs(case, "float32")[4]
        mask = torch.from_numpy(tf_mask.numpy())

    def run():
        for x in (q, k, v):
            x.grad = None
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=kind == "causal")
        out.backward(dout)

    return run


def torch_peak_mib(name: str, dtype: str) -> float | None:
    """PyTorch's step peak in a fresh process: its resident set's high-water mark during
    two steps (reset before them) above what it held before them, after a first step
    (torch's CPU allocator keeps no statistics of its own). None without torch."""
    import json
    import subprocess

    done = subprocess.run([sys.executable, "-m", "tf_ops.bench.attention", "--torch-probe",
                           name, dtype], capture_output=True, text=True)
    lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
    return json.loads(lines[-1])["mib"] if done.returncode == 0 and lines else None


def _torch_probe(name: str, dtype: str) -> None:
    import json

    def status_kib(field: str) -> int:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith(field))

    run = torch_step(CASES[name], dtype)
    if run is None:
        return
    run()  # its threads, code and caches first: what a step itself takes is the question
    before = status_kib("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:  # the high-water mark from here (Linux)
        f.write("5")
    run()
    run()
    print(json.dumps({"mib": max(status_kib("VmHWM:") - before, 0) / 1024}))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if os.environ.get(_BFC) != "true":  # the allocator statistics need TF's BFC allocator
        os.environ[_BFC] = "true"
        os.execv(sys.executable, [sys.executable, "-m", "tf_ops.bench.attention", *argv])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="*", choices=list(CASES), default=list(CASES))
    parser.add_argument("--dtypes", nargs="*", choices=DTYPES, default=list(DTYPES))
    parser.add_argument("--budget-s", type=float, default=20.0,
                        help="per case, all candidates")
    parser.add_argument("--torch", action="store_true",
                        help="also PyTorch's CPU flash attention, in the same rounds "
                             "(torch installed; never a dependency)")
    parser.add_argument("--torch-probe", nargs=2, metavar=("CASE", "DTYPE"),
                        help=argparse.SUPPRESS)  # torch_peak_mib's fresh process
    args = parser.parse_args(argv)
    if args.torch_probe:
        _torch_probe(*args.torch_probe)
        return 0
    from tf_ops.bench.machine import cpu_name

    print(f"{cpu_name()}, {os.cpu_count()} cores; fwd+bwd medians; ratios = the "
          "candidate's time / tf_ops' (> 1: tf_ops faster); memory: peak MiB of a step")
    for dtype in args.dtypes:
        for name in args.cases:
            r = bench_case(name, dtype, args.budget_s, with_slow=CASES[name][1] <= 2048,
                           with_torch=args.torch)
            m, mem = r["medians"], r["memory"]
            ours = m["tf_ops"]
            parts = [f"{dtype:<8} {name:<13} tf_ops {ours * 1e3:8.1f} ms"]
            for key, label in (("keras", "Keras graph"), ("keras_xla", "Keras XLA"),
                               ("softmax_path", "before"), ("tf_ops_xla", "tf_ops XLA"),
                               ("torch", "torch flash")):
                if key in m:
                    parts.append(f"{label} {m[key] / ours:5.2f}x")
            parts.append(f"{r['gflops']:.0f} GFLOP/s (matmul {r['matmul_gflops']:.0f})")
            parts.append("MiB " + ", ".join(f"{k} {v:.0f}" for k, v in mem.items()))
            if "torch" in m:
                parts.append(f"torch (resident) {torch_peak_mib(name, dtype) or 0:.0f}")
                parts.append(f"torch vs Keras graph {m['keras'] / m['torch']:5.2f}x")
            print("  ".join(parts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
