"""The batch norm family's manifest: what it adds to tf_ops (`core.family`)."""

from tf_ops.python.core.family import Family

FAMILY = Family(
    name="batch_norm",
    ops="tf_ops.python.batch_norm.functions:OPS",
    functions=("tf_ops.python.batch_norm.functions:FUNCTIONS",),
    layers=("tf_ops.python.batch_norm.layers:LAYERS",),
    gradients="tf_ops.python.batch_norm.gradients",
    bench="tf_ops.bench.batch_norm",
    patch=("batch_norm", "conv"),
    gpu_selftest=("batch_norm",),
    docs="Batch normalization",
)
