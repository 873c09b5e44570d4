"""The attention family's manifest: what it adds to tf_ops (`core.family`)."""

from tf_ops.python.core.family import Family

FAMILY = Family(
    name="attention",
    ops="tf_ops.python.attention.functions:OP_NAMES",
    functions=("tf_ops.python.attention.functions:FUNCTIONS",),
    gradients="tf_ops.python.attention.gradients",
    bench="tf_ops.bench.attention",
    patch=("attention",),
    gpu_selftest=("attention",),
    docs="Attention",
)
