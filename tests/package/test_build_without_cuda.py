"""The CPU-only build (-DTF_OPS_CUDA=OFF; what pip builds where no nvcc is found), from
conftest.py's `cpu_only_build`, checked in fresh Python processes: no GPU library is built
and a stale one is removed; every op runs on CPU kernels alone (tests/check_op_library.py
--cpu-only); and where TensorFlow sees a GPU (faked, tests/fake_gpu.py) one warning says
that this build has no CUDA kernels, and the ops still run, on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import subprocesses

pytestmark = pytest.mark.slow  # shares a real build with test_build_without_xla.py

TESTS = str(subprocesses.TESTS)  # the shared helpers (check_op_library.py, fake_gpu.py, ...)

_WITH_A_GPU = textwrap.dedent("""
    import json, sys, warnings
    src, tests = sys.argv[1], sys.argv[2]
    sys.path[:0] = [src, tests]
    import tensorflow as tf
    import fake_gpu
    fake_gpu.install([("NVIDIA H200", (9, 0))], driver=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import tf_ops
        tf_ops.load_library()
    assert tf_ops.library_path().startswith(src), tf_ops.library_path()
    with tf.device("/GPU:0"):
        y = tf_ops.gelu([-1.0, 1.0])
        dx = tf_ops.gelu_grad([1.0, 1.0], [-1.0, 1.0])
    print(json.dumps({
        "status": {**tf_ops.gpu_status().__dict__, "message": tf_ops.gpu_status().message},
        "build_info": tf_ops.build_info().__dict__,
        "warnings": [str(w.message) for w in caught if issubclass(w.category, tf_ops.GpuFallbackWarning)],
        "devices": sorted({y.device.split(":")[-2].split("/")[-1], dx.device.split(":")[-2].split("/")[-1]}),
    }))
    """)


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def test_no_gpu_library_is_built_and_a_stale_one_is_removed(cpu_only_build):
    package = cpu_only_build.src / "tf_ops"
    assert "tf_ops: CUDA kernels OFF" in cpu_only_build.configure.stdout
    assert "activation_gpu" not in cpu_only_build.build.stdout
    assert (package / "_tf_ops.so").is_file()
    assert not (package / "_tf_ops_gpu.so").exists()
    assert not (package / "_tf_ops_gpu.build.json").exists()
    with open(package / "_tf_ops.build.json") as f:
        assert json.load(f)["cuda"] is False


def test_every_op_runs_on_cpu_kernels_alone(cpu_only_build):
    library = cpu_only_build.src / "tf_ops" / "_tf_ops.so"
    result = subprocess.run(
        [sys.executable, os.path.join(TESTS, "check_op_library.py"), str(library), "--cpu-only"],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
        cwd=str(cpu_only_build.tmp),
    )
    summary = result.stdout.strip().splitlines()[-1:] or ["(no output)"]
    assert result.returncode == 0, f"{result.stdout[-8000:]}\n{result.stderr[-4000:]}"
    assert " 0 failed" in summary[0], summary


def test_with_a_gpu_visible_one_warning_says_there_are_no_cuda_kernels(cpu_only_build):
    result = subprocess.run(
        [sys.executable, "-c", _WITH_A_GPU, str(cpu_only_build.src), TESTS],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
        cwd=str(cpu_only_build.tmp),
    )
    assert result.returncode == 0, result.stdout + result.stderr[-6000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    status = out["status"]
    assert not status["active"]
    assert (
        status["reason"]
        == "This tf_ops was built without CUDA kernels (no nvcc was found, or TF_OPS_CUDA=OFF)."
    )
    assert status["gpus"] == ["NVIDIA H200 (compute capability 9.0)"]
    assert out["warnings"] == [status["message"]]
    assert out["build_info"]["cuda"] is False and out["build_info"]["cuda_runtime"] is None
    assert out["devices"] == ["CPU"]
