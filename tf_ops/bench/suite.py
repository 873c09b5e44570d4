"""Runs the benchmark: every (op, dtype, size, pass) against every candidate.

Candidates, all timed in the same interleaved rounds (timing.py):
  tf_ops        the tf_ops op inside tf.function
  tf            TF's built-in (or composite) inside tf.function   -> "vs TF"
  xla           the same TF code under tf.function(jit_compile=True)
  tf_ops_eager  the tf_ops op called eagerly
  tf_eager      TF's op called eagerly                            -> "eager"
  tf_ops_xla    the tf_ops op under jit_compile (its XLA lowering), when the
                library has one                                   -> "jit vs XLA"
  portable      the tf_ops function traced under tf_ops.portable() inside
                tf.function: the TF built-in composite an exported model runs
                                                                  -> "portable cost"
  copy          tf.raw_ops.DeepCopy of as many bytes as the pass reads and
                writes, inside tf.function: the memory floor ("x floor")
Passes: forward (y = f(x)), grad (the grad op alone), fwd+bwd (y and dy/dx
through a tape, with the upstream gradient given), second (y, dy/dx and d2y/dx2
through nested tapes: the forward, grad and grad-grad ops).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Callable, Iterable

import tensorflow as tf

import tf_ops

from tf_ops.bench.cases import CASES, Case, forward_backward, second_order
from tf_ops.bench.timing import Timing, time_interleaved

PASSES = ("forward", "grad", "fwd+bwd", "second")
DTYPES = {"float32": tf.float32, "float16": tf.float16, "bfloat16": tf.bfloat16}
# Elements each pass reads plus writes, in units of the tensor size, at the
# least (second: x in; y, dy/dx, d2y/dx2 out): the copy reference moves the same
# bytes (it reads and writes half of them each).
_TRAFFIC = {"forward": 2, "grad": 3, "fwd+bwd": 5, "second": 4}


@dataclasses.dataclass
class Config:
    """What to run; the defaults are the full suite."""

    ops: tuple[str, ...] = tuple(CASES)
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    sizes_log2: tuple[int, ...] = (10, 16, 20, 24)
    passes: tuple[str, ...] = PASSES
    min_reps: int = 7
    max_reps: int = 200
    budget_s: float = 2.0  # per configuration, all candidates together
    device: str | None = None  # e.g. "/CPU:0"; None: TF's default placement


def _bind(fn: Callable, *args) -> Callable[[], object]:
    return lambda: fn(*args)


def _tf_ops_jit(fn: Callable, args: tuple) -> Callable | None:
    """The tf_ops op under jit_compile, already compiled for `args`, or None
    when XLA cannot compile it."""
    jitted = tf.function(fn, jit_compile=True)
    try:
        jitted(*args)
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError,
            tf.errors.NotFoundError):
        return None
    return jitted


def _portable(fn: Callable, args: tuple) -> Callable:
    """fn in a tf.function traced under tf_ops.portable() (TF built-in ops only)."""
    traced = tf.function(fn)
    with tf_ops.portable():
        traced.get_concrete_function(*args)
    return traced


def _candidates(case: Case, pass_: str, x, g, v, copy_src) -> dict[str, Callable[[], object]]:
    if pass_ == "forward":
        ours, theirs, args = case.ours, case.theirs, (x,)
    elif pass_ == "grad":
        ours, theirs, args = case.ours_grad, case.theirs_grad, (g, v)
    elif pass_ == "second":
        ours, theirs, args = second_order(case.ours), second_order(case.theirs), (x,)
    else:
        ours, theirs, args = forward_backward(case.ours), forward_backward(case.theirs), (x, g)
    candidates = {
        "tf_ops": _bind(tf.function(ours), *args),
        "tf": _bind(tf.function(theirs), *args),
        "xla": _bind(tf.function(theirs, jit_compile=True), *args),
        "tf_ops_eager": _bind(ours, *args),
        "tf_eager": _bind(theirs, *args),
        "copy": _bind(tf.function(lambda t: tf.raw_ops.DeepCopy(x=t)), copy_src),
        "portable": _bind(_portable(ours, args), *args),
    }
    jitted = _tf_ops_jit(ours, args)
    if jitted is not None:
        candidates["tf_ops_xla"] = _bind(jitted, *args)
    return candidates


def _row(case: Case, dtype: str, size_log2: int, pass_: str, t: dict[str, Timing]) -> dict:
    ms = {name: timing.median * 1e3 for name, timing in t.items()}
    ours = ms["tf_ops"]
    return {
        "op": case.name,
        "reference": case.theirs_label,
        "dtype": dtype,
        "size_log2": size_log2,
        "pass": pass_,
        "ms": ms,
        "spread": {name: timing.spread for name, timing in t.items()},
        "reps": len(t["tf_ops"].samples),
        "vs_tf": ms["tf"] / ours,
        "vs_xla": ms["xla"] / ours,
        "eager_vs_tf": ms["tf_eager"] / ms["tf_ops_eager"],
        "x_floor": ours / ms["copy"],
        "jit_vs_xla": ms["xla"] / ms["tf_ops_xla"] if "tf_ops_xla" in ms else None,
        "portable_cost": ms["portable"] / ours,
    }


def run(config: Config, progress: Callable[[str], None] = lambda s: None) -> Iterable[dict]:
    """Yields one result row per (op, dtype, size, pass), as it is measured.

    Example:
      >>> rows = list(run(Config(ops=("elu",), dtypes=("float32",),
      ...                        sizes_log2=(10,), passes=("forward",), min_reps=3,
      ...                        max_reps=3)))
      >>> rows[0]["op"], rows[0]["vs_tf"] > 0
      ('elu', True)
    """
    device = tf.device(config.device) if config.device else contextlib.nullcontext()
    with device:
        for dtype in config.dtypes:
            for size_log2 in config.sizes_log2:
                n = 2**size_log2
                x = tf.cast(tf.random.stateless_normal([n], seed=(1, 2)) * 3.0, DTYPES[dtype])
                g = tf.cast(tf.random.stateless_normal([n], seed=(3, 4)), DTYPES[dtype])
                for op in config.ops:
                    case = CASES[op]
                    v = case.ours(x) if case.grad_takes_outputs else x
                    for pass_ in config.passes:
                        copy_src = tf.zeros([n * _TRAFFIC[pass_] // 2], DTYPES[dtype])
                        start = time.perf_counter()
                        timings = time_interleaved(
                            _candidates(case, pass_, x, g, v, copy_src),
                            config.min_reps,
                            config.max_reps,
                            config.budget_s,
                        )
                        row = _row(case, dtype, size_log2, pass_, timings)
                        progress(
                            f"{op:<10} {dtype:<8} 2^{size_log2:<2} {pass_:<7} "
                            f"vs TF {row['vs_tf']:5.2f}x  vs XLA {row['vs_xla']:5.2f}x  "
                            f"x floor {row['x_floor']:4.2f}  "
                            f"({time.perf_counter() - start:.1f} s)"
                        )
                        yield row
