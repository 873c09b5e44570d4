"""Under ``jit_compile`` on the CPU: the families whose patched code steps aside for
Keras's own, and how a replacement knows it is being compiled for the CPU.

XLA:CPU fuses Keras's element-wise composites (an activation, a bias + activation, a
norm's normalise-and-scale, a masked softmax) into the loops of the ops around them. A
tf_ops lowering is a fusion boundary of its own, so under XLA it saves nothing and can
cut a fusion XLA would have made. Measured one family patched at a time, every family
was at best even with stock Keras there (docs/benchmarks.md, "Measurements behind code
choices"): so the patch leaves the whole model to XLA, and a patched model compiles to
what the stock one does.
Outside XLA, and under XLA on a GPU, nothing changes. The functions (``tf_ops.gelu``, ...) and the
``tf_ops.layers`` keep their lowerings everywhere: this is the patch's choice for
models nobody wrote for tf_ops, not the ops'.
"""

from __future__ import annotations

import functools
from typing import Callable

import tensorflow as tf

# The patch families that step aside under XLA on the CPU: every one (the measurements:
# docs/benchmarks.md, "Measurements behind code choices").
LEFT: frozenset[str] = frozenset({
    "activation", "batch_norm", "conv", "dense", "norm", "softmax", "loss", "rotary",
    "lm_head", "optimizer",
})


@functools.lru_cache(maxsize=None)
def _has_gpu() -> bool:
    return bool(tf.config.list_logical_devices("GPU"))


def compiling_for_cpu() -> bool:
    """Whether XLA is tracing the code that calls this for the CPU: False outside XLA,
    and on a machine with a GPU (Keras places models there)."""
    return tf.__internal__.get_enclosing_xla_context() is not None and not _has_gpu()


def stepping_aside(replacement: Callable, original: Callable) -> Callable:
    """`replacement`, which calls `original` instead while XLA compiles for the CPU (every
    family is `LEFT` there)."""

    @functools.wraps(replacement)
    def run(*args, **kwargs):
        if compiling_for_cpu():
            return original(*args, **kwargs)
        return replacement(*args, **kwargs)

    return run
