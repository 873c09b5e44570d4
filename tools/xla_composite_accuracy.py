"""How accurate the XLA composite is, next to tf_ops, in each dtype: the other half
of the benchmark's "vs XLA composite" column.

The benchmark times tf_ops against TensorFlow's equivalent (the built-in op, else the
composite a user would write) compiled with XLA, which is what Keras 3 users get by
default. Where XLA is faster in half or bfloat16, this shows what it gives up for it:
the largest error of each, in units in the last place of the dtype, against the float64
reference (tests/op_specs.py), over every value of the dtype in [LO, HI] (float32: a
dense grid), forward and grad (upstream gradient 1). Results whose exact value is below
the dtype's smallest normal or 2^-110 are left out: there float32 flush-to-zero decides
(docs/ops.md's accuracy table has its own column for that tail).

  .venv/bin/python tools/xla_composite_accuracy.py [--dtypes float16,bfloat16,float32]
      [--ops gelu,swish] [--points 400001]

Both sides come from the benchmark's cases (tf_ops/bench/cases.py), so this measures
exactly what it times. Example output line:

  float16   gelu_tanh  forward  XLA 2040 ulp at -3.883   tf_ops 0.5 ulp at -0.3533
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from tf_ops.bench.cases import CASES  # noqa: E402
from tf_ops.python.activation.table import ACTIVATIONS  # noqa: E402
import op_specs  # noqa: E402

LO, HI = -30.0, 10.0
# (significand bits, smallest normal exponent) of each dtype.
FORMATS = {"float16": (11, -14), "bfloat16": (8, -126), "float32": (24, -126)}


def inputs(dtype: str, points: int) -> np.ndarray:
    """Every value of `dtype` in [LO, HI] (float32: `points` of them, evenly spaced),
    as float64."""
    if dtype == "float32":
        return np.unique(np.linspace(LO, HI, points).astype(np.float32)).astype(np.float64)
    bits = np.arange(1 << 16, dtype=np.uint32)
    # Finite patterns only (exponent not all ones): widening a signalling NaN raises an
    # invalid-operation warning.
    if dtype == "float16":
        bits = bits[(bits & 0x7C00) != 0x7C00]
        values = bits.astype(np.uint16).view(np.float16).astype(np.float64)
    else:
        bits = bits[(bits & 0x7F80) != 0x7F80]
        values = (bits << 16).view(np.float32).astype(np.float64)
    values = values[(values >= LO) & (values <= HI)]
    return np.unique(values)


def ulp_errors(y: np.ndarray, exact: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """|y - exact| in ulps of `dtype` at `exact`, and where that is measured."""
    bits, emin = FORMATS[dtype]
    keep = np.isfinite(exact) & (np.abs(exact) >= max(2.0**emin, 2.0**-110))
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log2(np.maximum(np.abs(exact), 2.0**emin)))
    ulp = 2.0 ** (exponent - (bits - 1))
    return np.abs(y - exact) / ulp, keep


def worst(y: np.ndarray, exact: np.ndarray, x: np.ndarray, dtype: str) -> tuple[float, float]:
    """The largest error in ulps and its input."""
    errors, keep = ulp_errors(y, exact, dtype)
    errors = np.where(keep, np.nan_to_num(errors, nan=np.inf), 0.0)
    i = int(np.argmax(errors))
    return float(errors[i]), float(x[i])


def references() -> dict[str, tuple]:
    """case name -> (float64 f(x), float64 f'(v) * 1, whether v is the output)."""
    specs = {spec.name: spec for spec in op_specs.SPECS}
    refs = {}
    for entry in ACTIVATIONS:
        spec = specs[entry.op]
        for name, attrs in entry.bench_cases().items():
            rounded = op_specs.round_attrs(attrs)
            refs[name] = (
                lambda x, s=spec, a=rounded: s.ref(x, **a),
                lambda v, s=spec, a=rounded: s.ref_grad(np.ones_like(v), v, **a),
                spec.grad_takes_outputs,
            )
    return refs


def measure(name: str, dtype: str, points: int) -> list[tuple]:
    """Rows (pass, XLA worst, tf_ops worst) for one case and dtype."""
    case = CASES[name]
    ref, ref_grad, grad_takes_outputs = references()[name]
    x64 = inputs(dtype, points)
    x = tf.cast(tf.constant(x64), dtype)
    theirs = tf.function(case.theirs, jit_compile=True)
    theirs_grad = tf.function(case.theirs_grad, jit_compile=True)
    rows = []
    exact = ref(x64)
    rows.append(("forward",
                 worst(tf.cast(theirs(x), tf.float64).numpy(), exact, x64, dtype),
                 worst(tf.cast(case.ours(x), tf.float64).numpy(), exact, x64, dtype)))
    # The grad op's v: the features, or (Elu) the outputs rounded to the dtype.
    v = tf.cast(case.ours(x), dtype) if grad_takes_outputs else x
    v64 = tf.cast(v, tf.float64).numpy()
    g = tf.ones_like(v)
    exact = ref_grad(v64)
    rows.append(("grad",
                 worst(tf.cast(theirs_grad(g, v), tf.float64).numpy(), exact, v64, dtype),
                 worst(tf.cast(case.ours_grad(g, v), tf.float64).numpy(), exact, v64, dtype)))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtypes", default="float16,bfloat16,float32")
    p.add_argument("--ops", default=",".join(CASES), help="benchmark case names")
    p.add_argument("--points", type=int, default=400001, help="float32 grid size")
    a = p.parse_args(argv)
    for dtype in a.dtypes.split(","):
        for name in a.ops.split(","):
            for pass_name, (xla_err, xla_at), (ours_err, ours_at) in measure(name, dtype, a.points):
                print(f"{dtype:9s} {name:10s} {pass_name:7s}  XLA {xla_err:.3g} ulp at {xla_at:.4g}"
                      f"   tf_ops {ours_err:.3g} ulp at {ours_at:.4g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
