"""Under ``jit_compile`` on the CPU: the families whose patched code steps aside for
Keras's own, and how a replacement knows it is being compiled for the CPU.

XLA:CPU fuses Keras's element-wise composites (an activation, a bias + activation, a
norm's normalise-and-scale, a masked softmax) into the loops of the ops around them. A
tf_ops lowering is a fusion boundary of its own, so under XLA it saves nothing and can
cut a fusion XLA would have made. Measured, train step under ``jit_compile``, one
family patched at a time (``python -m tf_ops.bench.models --modes jit --steps train
--only FAMILY``; stock time over patched, median of interleaved rounds, 2-core AMD
EPYC, 2026-12-03), every family was at best even and at worst 0.92x: there the patch
leaves the whole model to XLA, so a patched model compiles to what the stock one does.
Outside XLA, and under XLA on a GPU, nothing changes. The functions (``tf_ops.gelu``, ...) and the
``tf_ops.layers`` keep their lowerings everywhere: this is the patch's choice for
models nobody wrote for tf_ops, not the ops'.
"""

from __future__ import annotations

import functools
from typing import Callable

import tensorflow as tf

# family -> what was measured (the run in the docstring, one family patched at a time).
LEFT: dict[str, str] = {
    "activation": "ConvNeXtTiny 0.92x, GPT-2 0.98x, EfficientNetB0 0.99x, LLaMA 1.00x",
    "batch_norm": "EfficientNetB0 0.96x (0.93x without the activation fused), "
                  "ResNet50 0.98x",
    "conv": "not measured: under XLA Keras's grouped convolution and the depthwise one "
            "are both XLA's convolution",
    "dense": "ConvNeXtTiny 0.93x, BERT 0.93x, GPT-2 1.01x, LLaMA 1.01x",
    "norm": "ConvNeXtTiny 0.97x, BERT 0.99x, GPT-2 1.00x, LLaMA 1.01x",
    "softmax": "LLaMA 0.98x, BERT 1.00x, GPT-2 1.00x",
    "loss": "GPT-2 0.99x",
    "rotary": "LLaMA 0.99x",
    "lm_head": "LLaMA 0.93x (the chunk loop), GPT-2 0.99x",
    "optimizer": "the whole step is one XLA program already (with ResourceApplyAdam: "
                 "ConvNeXtTiny 0.99x, EfficientNetB0 1.00x)",
}


@functools.lru_cache(maxsize=None)
def _has_gpu() -> bool:
    return bool(tf.config.list_logical_devices("GPU"))


def compiling_for_cpu() -> bool:
    """Whether XLA is tracing the code that calls this for the CPU: False outside XLA,
    and on a machine with a GPU (Keras places models there)."""
    return tf.__internal__.get_enclosing_xla_context() is not None and not _has_gpu()


def stepping_aside(replacement: Callable, original: Callable,
                   families: tuple[str, ...]) -> Callable:
    """`replacement`, which calls `original` instead while XLA compiles for the CPU;
    itself where one of `families` keeps its code there."""
    if not all(f in LEFT for f in families):
        return replacement

    @functools.wraps(replacement)
    def run(*args, **kwargs):
        if compiling_for_cpu():
            return original(*args, **kwargs)
        return replacement(*args, **kwargs)

    return run
