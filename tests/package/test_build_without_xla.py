"""A real build with -DTF_OPS_XLA=OFF, in a temporary copy of the source tree
(CPU only: ~20 s on two idle cores; conftest.py's `cpu_only_build`, shared with
test_build_without_cuda.py), imported by a fresh Python process: the build
info says so, no op has an XLA kernel, and under jit_compile the wrappers use the
composites, with the same checks as test_xla.py's and test_grad_grad.py's
'composite' backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import subprocesses

# Builds the whole CPU library (conftest.cpu_only_build): make test only, not test-quick.
pytestmark = pytest.mark.heavy

TESTS = str(subprocesses.TESTS)  # the shared helpers (check_op_library.py, fake_gpu.py, ...)

_CHECKS = textwrap.dedent(
    """
    import sys
    src, tests = sys.argv[1], sys.argv[2]
    sys.path[:0] = [src, tests, tests + "/activation"]  # the helpers; test_xla.py, test_grad_grad.py
    import tensorflow as tf
    import tf_ops
    from tf_ops.python.activation import functions as activations
    assert tf_ops.library_path().startswith(src), tf_ops.library_path()
    info = tf_ops.build_info()
    assert info.xla is False and info.tensorflow_version == tf.__version__, info
    assert not activations.XLA_LOWERED, activations.XLA_LOWERED

    import op_specs
    import test_grad_grad
    import test_xla
    backend = "composite (library built without XLA)"
    for spec in op_specs.SPECS:
        first = spec.attr_variants[:1]  # every dtype and the special values
        test_xla.test_jit_matches_non_jit_reference_and_special_values(spec, backend, first)
        test_grad_grad.test_jit_matches_reference_kernel_and_special_values(spec, backend, first)
        test_xla.test_hlo_comes_from_the_lowerings(spec, "composite")
    model, loss, _, _ = test_xla._fit(op_specs.SPECS[2], jit_compile=True)
    assert model.jit_compile is True and all(l == l for l in loss), loss
    print("OK")
    """
)


def test_library_built_without_xla_falls_back_to_composites(cpu_only_build):
    src = cpu_only_build.src
    assert "tf_ops: XLA lowerings OFF" in cpu_only_build.configure.stdout
    assert "activation_xla" not in cpu_only_build.build.stdout
    with open(src / "tf_ops" / "_tf_ops.build.json") as f:
        assert json.load(f)["xla"] is False

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    checks = subprocess.run(
        [sys.executable, "-c", _CHECKS, str(src), TESTS], capture_output=True, text=True, env=env,
        cwd=str(cpu_only_build.tmp), timeout=600,
    )
    assert checks.returncode == 0 and checks.stdout.strip().endswith("OK"), checks.stdout[-4000:] + checks.stderr[-8000:]
