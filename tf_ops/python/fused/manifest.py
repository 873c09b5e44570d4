"""The fused family's manifest: what it adds to tf_ops (`core.family`)."""

from tf_ops.python.core.family import Family

FAMILY = Family(
    name="fused",
    ops="tf_ops.python.fused.functions:OP_NAMES",
    functions=("tf_ops.python.fused.functions:FUNCTIONS",),
    layers=("tf_ops.python.fused.dense:DENSE_LAYERS",),
    gradients="tf_ops.python.fused.gradients",
    bench="tf_ops.bench.fused",
    patch=("dense",),
    gpu_selftest=("add-forward", "gated-forward", "gated-grad", "bias-gated-forward", "bias-gated-grad"),
    docs="Fused bias and gated activations",
)
