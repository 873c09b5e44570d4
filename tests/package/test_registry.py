"""Op and kernel registration, namespacing, loading once, and re-importing."""

from __future__ import annotations

import importlib
import inspect
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session
from tensorflow.python.framework import kernels, op_def_registry

import tf_ops
from checks import assert_close, assert_library_still_works
from op_specs import SPECS, as_f64, round_attrs, sample, spec_params, to_dtype

DTYPE_ENUMS = {tf.half.as_datatype_enum, tf.bfloat16.as_datatype_enum, tf.float32.as_datatype_enum,
               tf.float64.as_datatype_enum}


def _library_op_names() -> set[str]:
    """Names of the ops the .so itself registers (as tf.load_op_library reads them)."""
    handle = pywrap_tf_session.TF_LoadLibrary(tf_ops.library_path())
    try:
        op_list = op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetOpList(handle))
    finally:
        pywrap_tf_session.TF_DeleteLibraryHandle(handle)
    return {op.name for op in op_list.op}


def _op_types():
    return [pytest.param(t, id=t) for spec in SPECS for t in (spec.op_type, spec.grad_op_type)]


@pytest.mark.parametrize("op_type", _op_types())
def test_kernels_registered_for_cpu_and_gpu_all_dtypes(op_type):
    # CPU kernels always; GPU kernels only where they can run (never on a machine
    # without a GPU). test_gpu_loading.py loads them with a faked GPU and driver and
    # checks that they then cover every op and dtype.
    found = {}
    for k in kernels.get_registered_kernels_for_op(op_type).kernel:
        (constraint,) = [c for c in k.constraint if c.name == "T"]
        for dt in constraint.allowed_values.list.type:
            found.setdefault(k.device_type, set()).add(dt)
    assert found.get("CPU") == DTYPE_ENUMS, found
    assert found.get("GPU") == (DTYPE_ENUMS if tf_ops.gpu_status().active else None), found


@pytest.mark.parametrize("spec", spec_params())
def test_op_names_are_namespaced(spec):
    lib_ops = _library_op_names()
    assert all(name.startswith("TfOps>") for name in lib_ops), lib_ops
    assert {spec.op_type, spec.grad_op_type} <= lib_ops
    for op_type in (spec.op_type, spec.grad_op_type):
        op_def = op_def_registry.get(op_type)
        assert op_def is not None
        allowed = set(next(a for a in op_def.attr if a.name == "T").allowed_values.list.type)
        assert allowed == DTYPE_ENUMS
    # TF's own op of the bare name (if it has one) is untouched: its registered definition
    # is still the one TF's generated tf.raw_ops function was made from (TF's inputs and
    # attributes, none of ours), not this library's op of that name.
    bare = op_def_registry.get(spec.name)
    if bare is not None:
        tf_params = set(inspect.signature(getattr(tf.raw_ops, spec.name)).parameters) - {"name"}
        inferred = {a.type_attr for a in bare.input_arg} | {a.number_attr for a in bare.input_arg}
        names = {a.name for a in bare.input_arg} | {a.name for a in bare.attr} - inferred
        assert names == tf_params, (spec.name, sorted(names), sorted(tf_params))
    # Graph nodes carry the namespaced type.
    with tf.Graph().as_default():
        x = tf.constant([1.0, -1.0])
        y = spec.forward(x)
        dx = tf.gradients(y, x)[0]
        assert y.op.type == spec.op_type
        assert dx.op.type == spec.grad_op_type


def test_library_path_and_load_once():
    path = tf_ops.library_path()
    assert os.path.isfile(path)
    assert os.path.basename(path).startswith("_tf_ops") and path.endswith(".so")
    first = tf_ops.load_library()
    assert tf_ops.load_library() is first
    assert_library_still_works()


def test_load_op_library_same_path_again_is_harmless():
    assert tf.load_op_library(tf_ops.library_path()) is tf_ops.load_library()
    assert_library_still_works()


def _assert_gradients_correct():
    for spec in SPECS:
        attrs = dict(spec.attr_variants[-1])
        x = tf.constant(to_dtype(sample((33,), seed=20), tf.float32))
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = spec.forward(x, **attrs)
        dx = tape.gradient(y, x)
        v = as_f64(y) if spec.grad_takes_outputs else as_f64(x)
        assert_close(dx, spec.ref_grad(np.ones(33), v, **round_attrs(attrs)), spec.tolerance(tf.float32), spec.name)


def test_import_twice_and_reload():
    import tf_ops as again  # noqa: F401

    assert importlib.import_module("tf_ops") is tf_ops
    importlib.reload(importlib.import_module("tf_ops.python.activation.gradients"))
    importlib.reload(tf_ops)
    importlib.reload(importlib.import_module("tf_ops.python.activation.gradients"))
    importlib.reload(tf_ops)
    assert tf_ops.load_library() is tf_ops.load_library()
    _assert_gradients_correct()
    # The reloaded module's functions work too.
    assert tf_ops.leaky_relu([-1.0], alpha=0.5).numpy().tolist() == [-0.5]
    assert_library_still_works()
