"""The activation family's manifest: what it adds to tf_ops (`core.family`)."""

from tf_ops.python.core.family import Family

FAMILY = Family(
    name="activation",
    ops="tf_ops.python.activation.functions:OP_NAMES",
    functions=("tf_ops.python.activation.functions:FUNCTIONS",),
    layers=("tf_ops.python.activation.layers:LAYERS",),
    gradients="tf_ops.python.activation.gradients",
    bench_cases=True,  # tf_ops.bench.cases: one row per activation
    patch=("activation",),
    gpu_selftest=("forward", "backward", "grad-grad"),
    docs="Activations",
)
