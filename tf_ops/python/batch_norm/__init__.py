"""Fused batch normalization + activation: ops' wrappers, gradients and the Keras layer."""
