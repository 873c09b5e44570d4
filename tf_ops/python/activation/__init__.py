"""The element-wise activations (``TfOps>{Act}``, ``…Grad``, ``…GradGrad``): the table
(`table`), the public functions (`functions`), their composites (`composites`) and the
Keras layers (`layers`); their gradients are registered in `tf_ops.python.activation.gradients`."""
