"""Under ``jit_compile`` on the CPU: the families whose patched code steps aside for
Keras's own, and how a replacement knows it is being compiled for the CPU.

XLA:CPU fuses Keras's element-wise composites (an activation, a bias + activation, a
norm's normalise-and-scale, a masked softmax) into the loops of the ops around them. A
tf_ops lowering is a fusion boundary of its own, so under XLA it saves nothing and can
cut a fusion XLA would have made. Measured one family patched at a time, those families
were at best even with stock Keras there (docs/benchmarks.md, "Measurements behind code
choices"): they are `LEFT`, and a model of them alone compiles to what the stock one
does. Two are not. Attention's lowering is a custom call into the flash-attention
engine, which XLA has no equivalent of (it computes the [batch, heads, T, S] weights):
faster, and at long contexts a fraction of the memory. Batch norm's training ops are
custom calls into its engine, with the activation after the layer fused in (the graph
runner pairs them under XLA too): a train step's two passes each way where XLA's
reductions take more (the same section).
Outside XLA, and under XLA on a GPU, nothing changes. The functions (``tf_ops.gelu``, ...) and the
``tf_ops.layers`` keep their lowerings everywhere: this is the patch's choice for
models nobody wrote for tf_ops, not the ops'.
"""

from __future__ import annotations

import functools
from typing import Callable

import tensorflow as tf

# The patch families that step aside under XLA on the CPU: all but attention and batch
# norm (the measurements: docs/benchmarks.md, "Measurements behind code choices").
LEFT: frozenset[str] = frozenset({
    "activation", "conv", "dense", "norm", "softmax", "loss", "rotary",
    "lm_head", "optimizer",
})


@functools.lru_cache(maxsize=None)
def _has_gpu() -> bool:
    return bool(tf.config.list_logical_devices("GPU"))


def compiling_for_cpu() -> bool:
    """Whether XLA is tracing the code that calls this for the CPU: False outside XLA,
    and on a machine with a GPU (Keras places models there)."""
    return tf.__internal__.get_enclosing_xla_context() is not None and not _has_gpu()


def steps_aside(families: tuple[str, ...]) -> bool:
    """Whether a patch entry of these families runs Keras's code under XLA on the CPU:
    where all of them are `LEFT`. An entry of several families that runs (the graph
    runner, a convolution's call) asks `LEFT` for each thing it does itself."""
    return all(f in LEFT for f in families)


def stepping_aside(replacement: Callable, original: Callable,
                   families: tuple[str, ...]) -> Callable:
    """`replacement`, which calls `original` instead while XLA compiles for the CPU where
    `families` step aside there (`steps_aside`, asked at each call)."""

    @functools.wraps(replacement)
    def run(*args, **kwargs):
        if compiling_for_cpu() and steps_aside(families):
            return original(*args, **kwargs)
        return replacement(*args, **kwargs)

    return run
