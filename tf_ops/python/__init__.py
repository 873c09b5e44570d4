"""Implementation of the tf_ops Python API; import the public names from `tf_ops`."""
