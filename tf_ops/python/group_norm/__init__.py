"""The group-norm family: fused group normalization + activation."""
