"""The attention family: fused (flash) attention."""
