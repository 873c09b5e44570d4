"""When a family's wrapper builds its op's composite of TensorFlow built-in ops instead of
the ``TfOps>`` op, and what it runs first. Shared by every op family (``activation/``,
``fused/``).

A wrapper builds the composite in two cases:
- under `tf_ops.portable()`, so that an exported model runs without the library;
- while XLA traces it and the library has no XLA lowering for the op (a library built
  with ``-DTF_OPS_XLA=OFF``, or by Bazel).
Before building a composite, the op's own C++ checks run on it (`check`, from
``op_support``): the same
errors for bad attributes and mismatched shapes either way. Composites take float
attributes as the kernels see them (`kernel_attrs`).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import kernels

from tf_ops.python.core import op_info
from tf_ops.python.core.op_support import check  # noqa: F401  (the families import it here)
from tf_ops.python.core.portable import is_portable


def has_xla_kernel(op: str) -> bool:
    """Asked of TF's kernel registry: the truth whatever built the library."""
    registered = kernels.get_registered_kernels_for_op(op_info.NAMESPACE + op).kernel
    return any(k.device_type == "XLA_CPU_JIT" for k in registered)


def xla_lowered(op_names: Iterable[str]) -> frozenset[str]:
    """The op names ("Gelu", "GeluGrad", ...) among these that XLA can compile."""
    return frozenset(op for op in op_names if has_xla_kernel(op))


def use_composite(op: str, lowered: frozenset[str]) -> bool:
    """Whether a call of ``TfOps>{op}`` builds its composite: under `tf_ops.portable()`,
    or while XLA is tracing it and `op` is not among the `lowered` ones."""
    return is_portable() or (
        op not in lowered and tf.__internal__.get_enclosing_xla_context() is not None
    )


def kernel_attrs(attrs: dict) -> dict:
    """Float attributes as the kernels see them: float32 values."""
    return {k: float(np.float32(v)) if isinstance(v, float) else v for k, v in attrs.items()}
