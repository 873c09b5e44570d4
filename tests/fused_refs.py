"""float64 NumPy references of the fused ops (bias + activation, gated), made from
the activation references of `op_specs.SPECS`: nothing here is per activation.

The fused kernels compute x + b, or take the halves a and b, in the compute type
(float32 for half, bfloat16 and float32; float64 for double) and apply the
activation there, rounding once. The references therefore form z = x + b in that
compute type (the kernel's only rounding before the activation, exact for half and
bfloat16 inputs), then evaluate the activation reference in float64.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from op_specs import COMPUTE_EPS, EPS, OpSpec, Tolerance, as_f64, round_attrs

import tf_ops


def compute_np(dtype: tf.DType):
    return np.float64 if dtype == tf.float64 else np.float32


def channel_axis(rank: int, data_format: str) -> int:
    return 1 if data_format == "NCHW" else rank - 1


def broadcast_bias(b64: np.ndarray, rank: int, data_format: str) -> np.ndarray:
    shape = [1] * rank
    shape[channel_axis(rank, data_format)] = -1
    return b64.reshape(shape)


def bias_z(x64, b64, dtype, data_format):
    """x + b as the kernel forms it: in the compute type."""
    c = compute_np(dtype)
    z = x64.astype(c) + broadcast_bias(b64.astype(c), x64.ndim, data_format)
    return z.astype(np.float64)


def bias_forward_ref(spec: OpSpec, x64, b64, attrs, dtype, data_format="NHWC"):
    return spec.ref(bias_z(x64, b64, dtype, data_format), **round_attrs(attrs))


def bias_grad_ref(spec: OpSpec, g64, x64, b64, attrs, dtype, data_format="NHWC"):
    """(dx, db, sum of |dx| per channel: db's error scale)."""
    z = bias_z(x64, b64, dtype, data_format)
    dx = spec.ref_grad(g64, spec.grad_input(z, attrs), **round_attrs(attrs))
    axes = tuple(d for d in range(x64.ndim) if d != channel_axis(x64.ndim, data_format))
    return dx, dx.sum(axis=axes), np.abs(dx).sum(axis=axes)


def gated_forward_ref(spec: OpSpec, x64, attrs):
    a, b = np.split(x64, 2, axis=-1)
    return spec.ref(a, **round_attrs(attrs)) * b


def gated_grad_ref(spec: OpSpec, g64, x64, attrs):
    a, b = np.split(x64, 2, axis=-1)
    ra = round_attrs(attrs)
    da = spec.ref_grad(g64 * b, spec.grad_input(a, attrs), **ra)
    db = g64 * spec.ref(a, **ra)
    return np.concatenate([da, db], axis=-1)


def sum_tolerance(dtype: tf.DType, n: int) -> float:
    """Relative bound, to the sum of |terms|, of a sum of n computed terms accumulated
    in float32 (half, bfloat16) or float64 and rounded once to dtype."""
    acc_eps = 2.0**-24 if dtype in (tf.half, tf.bfloat16) else 2.0**-53
    return 0.5 * EPS[dtype] + 16 * COMPUTE_EPS[dtype] + n * acc_eps


def assert_sum_close(actual, expected, abs_sum, dtype: tf.DType, n: int, what: str):
    a = as_f64(actual)
    assert a.shape == expected.shape, f"{what}: shape {a.shape} != {expected.shape}"
    bound = sum_tolerance(dtype, n) * abs_sum + np.finfo(np.float32).tiny
    err = np.abs(a - expected)
    assert (err <= bound).all(), (
        f"{what}: worst abs err {err.max():.3g} (bound {bound[np.argmax(err - bound)]:.3g}); "
        f"got {a.ravel()[:4]}, expected {expected.ravel()[:4]}"
    )


def function(spec: OpSpec):
    return getattr(tf_ops, tf_ops.python.core.op_info.snake_case(spec.name))


def bias_grad_fn(spec: OpSpec):
    return getattr(tf_ops, f"bias_{tf_ops.python.core.op_info.snake_case(spec.name)}_grad")


def gated_grad_fn(spec: OpSpec):
    return getattr(tf_ops, f"gated_{tf_ops.python.core.op_info.snake_case(spec.name)}_grad")


def gate_name(spec: OpSpec) -> str:
    return tf_ops.python.core.op_info.snake_case(spec.name)


def op_types(graph_def) -> set[str]:
    """Every op type in a GraphDef, its function library included."""
    types = {n.op for n in graph_def.node}
    for f in graph_def.library.function:
        types |= {n.op for n in f.node_def}
    return types


def assert_jit_builds(op: str, graph_def) -> None:
    """Under jit the fused op `op` ("TfOps>BiasGelu") is in the graph when the library has
    its XLA lowering; when it was built without them (TF_OPS_XLA=OFF, or a TensorFlow
    without XLA headers), the graph holds the composite: no TfOps> op at all."""
    from tf_ops.python.fused import functions as fused

    types = op_types(graph_def)
    if op[len("TfOps>"):] in fused.XLA_LOWERED:
        assert op in types, sorted(types)
    else:
        assert not [t for t in types if t.startswith("TfOps>")], sorted(types)


def grad_tolerance(spec, attrs, dtype, g):
    """The grad op's tolerance; for an activation whose derivative is a function of the
    outputs (Elu: y + alpha), the fused op recomputes y = f(z) from its features, and the derivative is
    then accurate to an ulp of y, absolutely (y + alpha cancels as y nears -alpha)."""
    tol = spec.grad_tolerance(dtype, g)
    if not spec.grad_takes_outputs:
        return tol
    g_max = float(np.abs(as_f64(g)).max(initial=0.0))
    scale = max([1.0, *(abs(v) for v in attrs.values() if isinstance(v, float))])
    return type(tol)(rtol=tol.rtol, atol=max(tol.atol, 4 * COMPUTE_EPS[dtype] * g_max * scale))
