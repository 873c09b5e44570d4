"""The norm family's manifest: what it adds to tf_ops (`core.family`)."""

from tf_ops.python.core.family import Family

FAMILY = Family(
    name="norm",
    ops="tf_ops.python.norm.functions:OP_NAMES",
    functions=("tf_ops.python.norm.functions:FUNCTIONS",),
    layers=("tf_ops.python.norm.layers:NORM_LAYERS",),
    gradients="tf_ops.python.norm.gradients",
    bench="tf_ops.bench.norm",
    patch=("norm",),
    gpu_selftest=("norm",),
    docs="Layer and RMS normalization",
)
