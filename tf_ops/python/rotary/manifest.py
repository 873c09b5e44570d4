"""The rotary family's manifest: what it adds to tf_ops (`core.family`)."""

from tf_ops.python.core.family import Family

FAMILY = Family(
    name="rotary",
    ops="tf_ops.python.rotary.functions:OP_NAMES",
    functions=("tf_ops.python.rotary.functions:FUNCTIONS",),
    layers=("tf_ops.python.rotary.layers:LAYERS",),
    gradients="tf_ops.python.rotary.gradients",
    bench="tf_ops.bench.rotary",
    patch=("rotary",),
    gpu_selftest=("rotary",),
    docs="Rotary embedding",
)
