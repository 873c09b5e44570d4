"""The group-norm family's manifest: what it adds to tf_ops (`core.family`)."""

from tf_ops.python.core.family import Family

FAMILY = Family(
    name="group_norm",
    ops="tf_ops.python.group_norm.functions:OPS",
    functions=("tf_ops.python.group_norm.functions:FUNCTIONS",),
    layers=("tf_ops.python.group_norm.layers:LAYERS",),
    gradients="tf_ops.python.group_norm.gradients",
    bench="tf_ops.bench.group_norm",
    patch=("norm",),
    gpu_selftest=("group_norm",),
    docs="Group normalization",
)
