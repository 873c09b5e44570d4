"""The fused ops of every activation (``TfOps>Bias{Act}``, ``TfOps>Gated{Act}``,
``TfOps>BiasGated{Act}`` and their grad ops): the public functions and their composites
(`functions`), their gradients (`gradients`) and the Keras `Dense` and `GatedDense`
(`dense`)."""
