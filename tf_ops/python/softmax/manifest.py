"""The softmax family's manifest: what it adds to tf_ops (`core.family`)."""

from tf_ops.python.core.family import Family

FAMILY = Family(
    name="softmax",
    ops="tf_ops.python.softmax.functions:OP_NAMES",
    functions=(
        "tf_ops.python.softmax.functions:FUNCTIONS",
        "tf_ops.python.softmax.linear_cross_entropy:linear_cross_entropy",
        "tf_ops.python.softmax.causal_lm:head_cross_entropy",
        "tf_ops.python.softmax.causal_lm:LinearCrossEntropyCausalLM",
        "tf_ops.losses",  # Keras losses: SparseCategoricalCrossentropy
    ),
    layers=("tf_ops.python.softmax.layers:LAYERS",),
    gradients="tf_ops.python.softmax.gradients",
    bench="tf_ops.bench.softmax",
    patch=("softmax", "loss", "lm_head"),
    gpu_selftest=("softmax",),
    docs="Softmax and cross-entropy",
)
