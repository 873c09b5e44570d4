"""The tf_ops benchmark suite: `python -m tf_ops.bench` (or `make bench`).

Times every op (forward, the grad op alone, and forward+backward through a
tape) against TensorFlow's built-in or composite op in tf.function, the same
under XLA, and eager, with a copy of the same bytes as the memory floor. All
candidates run interleaved in one process; the ratios are the result.

Example:
  $ python -m tf_ops.bench --quick
  $ python -m tf_ops.bench --ops gelu,mish --sizes 20,24 --dtypes float32 --json out.json
"""

from tf_ops.bench.suite import Config, run

__all__ = ["Config", "run"]
