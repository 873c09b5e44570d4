"""Where a step's time goes: TensorFlow's profiler around a few calls, its trace summed
per op type and per category (matmul/conv, tf_ops's kernels by family, TensorFlow's
element-wise and reduction ops, the optimizer, ...).

The trace's kernel events (``name:Type``) are timed on the executor's threads, each op
from start to end including the intra-op work it waits for, so shares are of summed op
time, not of wall time (ops run concurrently on the inter-op threads).

Example:
  >>> f = tf.function(lambda x: tf.nn.relu(tf.matmul(x, x)))
  >>> x = tf.ones([64, 64]); _ = f(x)
  >>> profile = op_time(lambda: f(x), calls=2)
  >>> sorted(profile.by_type)
  ['MatMul', 'Relu']
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import os
import tempfile
from typing import Callable

import tensorflow as tf

# Category of an op type: the first pattern list it matches (prefix or exact).
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("tf_ops batch norm", ("TfOps>BatchNorm",)),
    ("tf_ops layer/RMS norm", ("TfOps>LayerNorm", "TfOps>AddLayerNorm", "TfOps>RmsNorm",
                               "TfOps>AddRmsNorm")),
    ("tf_ops softmax/loss", ("TfOps>Softmax", "TfOps>LogSoftmax", "TfOps>ScaledMaskedSoftmax",
                             "TfOps>SparseSoftmax", "TfOps>LinearCrossEntropy")),
    ("tf_ops activation", ("TfOps>",)),
    ("matmul/conv", ("MatMul", "BatchMatMul", "Conv2D", "Conv3D", "DepthwiseConv2dNative",
                     "Einsum", "_FusedConv2D", "_FusedMatMul", "_MklMatMul", "_MklConv2D",
                     "_MklFusedConv2D", "_MklFusedMatMul", "_MklNativeConv2D",
                     "_MklNativeFusedConv2D", "_MklNativeFusedMatMul", "_MklNativeMatMul",
                     "_MklBatchMatMul", "_MklNativeBatchMatMul", "_MklEinsum",
                     "_MklNativeConv2DBackprop", "_MklNativePadWithFusedConv2D",
                     "_MklNativeDepthwiseConv2d")),
    ("TF softmax/loss", ("Softmax", "LogSoftmax", "SparseSoftmaxCrossEntropyWithLogits",
                         "SoftmaxCrossEntropyWithLogits")),
    ("TF activation", ("Relu", "Relu6", "Elu", "Selu", "LeakyRelu", "Sigmoid", "Tanh",
                       "Softplus", "Erf", "Erfc")),
    ("TF reductions", ("Mean", "Sum", "Max", "Min", "Prod", "SquaredDifference",
                       "BiasAddGrad", "FusedBatchNorm")),
    ("optimizer/variables", ("ResourceApply", "AssignVariableOp", "AssignAddVariableOp",
                             "AssignSubVariableOp", "ReadVariableOp", "VarHandleOp")),
    ("XLA clusters", ("_XlaRun", "_XlaCompile", "XlaLaunch", "_XlaMerge")),
    ("data movement", ("Transpose", "Reshape", "Pad", "ConcatV2", "Slice", "StridedSlice",
                       "GatherV2", "ResourceGather", "Tile", "BroadcastTo", "Identity",
                       "Cast", "Fill", "Pack", "Unpack", "Split", "SplitV", "Select",
                       "SelectV2", "ZerosLike", "OnesLike", "UnsortedSegmentSum",
                       "TensorScatterAdd", "ScatterNd", "MaxPool", "AvgPool")),
)


def category(op_type: str) -> str:
    for name, patterns in CATEGORIES:
        if any(op_type == p or op_type.startswith(p) for p in patterns):
            return name
    return "TF element-wise/other"


@dataclasses.dataclass(frozen=True)
class OpTime:
    """Summed op time per type and per category, in seconds per call."""

    by_type: dict[str, float]
    by_category: dict[str, float]

    def table(self, top: int = 8) -> str:
        """Categories with their shares, then the `top` op types."""
        total = sum(self.by_category.values()) or 1.0
        lines = [f"    {name:<24} {t * 1e3:9.2f} ms  {t / total:6.1%}"
                 for name, t in sorted(self.by_category.items(), key=lambda kv: -kv[1])]
        lines.append("    top op types: " + ", ".join(
            f"{name} {t / total:.1%}" for name, t in sorted(
                self.by_type.items(), key=lambda kv: -kv[1])[:top]))
        return "\n".join(lines)


def op_time(fn: Callable[[], object], calls: int = 3) -> OpTime:
    """Runs `fn` `calls` times under the profiler (warm it up first) and sums its ops'
    time per type."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        try:
            for _ in range(calls):
                fn()
        finally:
            tf.profiler.experimental.stop()
        paths = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
        space = xplane_pb2.XSpace()
        with open(paths[0], "rb") as f:
            space.ParseFromString(f.read())
    by_type: dict[str, float] = collections.defaultdict(float)
    for plane in space.planes:
        for line in plane.lines:
            if line.name.startswith("python"):
                continue  # the Python thread's events wrap whole calls
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if ":" in name and "::" not in name:
                    by_type[name.rsplit(":", 1)[1]] += event.duration_ps * 1e-12 / calls
    by_category: dict[str, float] = collections.defaultdict(float)
    for op_type, t in by_type.items():
        by_category[category(op_type)] += t
    return OpTime(dict(by_type), dict(by_category))
