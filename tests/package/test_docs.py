"""docs/ops.md says what the library registers: every
`TfOps>` op and nothing else, with its inputs, output, attributes and defaults,
dtypes, devices with kernels, and gradients. A new op without its rows, or a
changed attribute, fails here."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels, op_def_registry, ops

import tf_ops
from tf_ops.python.core.library import load_library

ROOT = Path(__file__).resolve().parents[2]
DEVICES = {"CPU", "GPU", "XLA_CPU_JIT", "XLA_GPU_JIT"}
DTYPES = {"half", "bfloat16", "float", "double"}


def _table_rows(path: Path, first_header: str) -> list[list[str]]:
    """The cells of the Markdown table whose header row starts with `first_header`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _op_rows() -> dict[str, list[str]]:
    rows = _table_rows(ROOT / "docs" / "ops.md", "Python")
    return {re.sub(r"`", "", row[1]): row for row in rows}


def _all_tf_ops_op_names() -> set[str]:
    module = load_library()
    names = set()
    for attr in dir(module):
        if attr.startswith("tf_ops_") and not attr.endswith("_eager_fallback"):
            camel = "".join(part.capitalize() for part in attr[len("tf_ops_"):].split("_"))
            names.add(f"TfOps>{camel}")
    return names


def _kernel_devices(op: str) -> set[str]:
    return {k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel}


def test_ops_md_lists_exactly_the_registered_ops():
    documented = set(_op_rows())
    registered = _all_tf_ops_op_names()
    assert registered, "no TfOps> ops found on the loaded module"
    assert documented == registered, (
        f"docs/ops.md is missing {sorted(registered - documented)} and lists unknown "
        f"{sorted(documented - registered)}"
    )


def _attr_text(attr) -> str:
    value = attr.default_value
    if attr.type == "float":
        default = repr(float(np.float32(value.f)))
        default = f"{float(default):.6g}"
        if "." not in default and "e" not in default:
            default += ".0"
    elif attr.type == "bool":
        default = "true" if value.b else "false"
    elif attr.type == "string":  # the bias ops' data_format
        default = repr(value.s.decode())
    elif attr.type == "int":  # the cross-entropy's ignore_index
        default = str(value.i)
    elif attr.type == "type":  # the cross-entropy's Tlabels
        from tensorflow.core.framework import types_pb2
        default = types_pb2.DataType.Name(value.type)
    else:
        default = str(value)
    return f"{attr.name}: {attr.type} = {default}"


@pytest.mark.parametrize("op", sorted(_op_rows()))
def test_ops_md_row_matches_the_op_def(op):
    python, name, inputs, outputs, attributes, devices, orders = _op_rows()[op]
    op_def = op_def_registry.get(op)
    assert op_def is not None, f"{op} is not registered"
    # Python function: public in tf_ops and calling this op.
    fn_name = python.strip("`").removeprefix("tf_ops.")
    assert fn_name in tf_ops.__all__, f"{python} is not public in tf_ops"
    assert [a.name for a in op_def.input_arg] == [s.strip() for s in inputs.split(",")]
    assert [a.name for a in op_def.output_arg] == [s.strip() for s in outputs.split(",")]
    # Attributes other than T, with their defaults.
    # Type attributes other than T (the norm ops' U, the cross-entropy's Tlabels) are
    # documented with the inputs they type.
    attrs = [_attr_text(a) for a in op_def.attr if a.name != "T" and a.type != "type"]
    documented = [] if attributes == "—" else [a.strip().strip("`") for a in attributes.split(",")]
    assert documented == attrs, f"{op}: docs say {documented}, the op has {attrs}"
    # T: the four float types, on every device the doc names.
    (t_attr,) = [a for a in op_def.attr if a.name == "T"]
    allowed = {
        {1: "float", 2: "double", 19: "half", 14: "bfloat16"}[t] for t in t_attr.allowed_values.list.type
    }
    assert allowed == DTYPES
    # Devices: what has kernels in this build; a device this build left out (no
    # CUDA, no XLA) may be documented but not registered.
    doc_devices = {d.strip() for d in devices.split(",")}
    assert doc_devices <= DEVICES
    have = _kernel_devices(op)
    assert have <= doc_devices, f"{op} has kernels on {have - doc_devices}, not in docs/ops.md"
    info = tf_ops.build_info()
    if info is not None:
        expected = {"CPU"} | ({"GPU"} if tf_ops.gpu_status().active else set()) | (
            {"XLA_CPU_JIT", "XLA_GPU_JIT"} if info.xla else set())
        assert have == expected & doc_devices, f"{op}: kernels on {have}, expected {expected}"
    # Gradient orders "any": the op and its grad op both have registered gradients;
    # "any (no grad op)": the op's gradient is composed (the cross-entropy's).
    if orders == "any (no grad op)":
        assert ops.gradient_registry.lookup(op) is not None
        return
    assert orders == "any"
    grad_op = op if op.endswith("Grad") else op + "Grad"
    for o in {op, grad_op}:
        assert ops.gradient_registry.lookup(o) is not None
