"""The Bazel build: `make bazel-build` gives a working CPU op library.

Runs the real build (it installs Debian's bazel-bootstrap when `bazel` is
missing) in Bazel's fastbuild mode: the same sources, flags and link as the release
(`-c opt`, what `make bazel-build` does) at -O0, which compiles the engines' vector loops
~5x faster (tf_ops/BUILD), then checks build-bazel/_tf_ops.so with tests/check_op_library.py in
a fresh Python process: this process has the CMake library loaded, and two
copies of the same kernels in one process clash.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "build-bazel" / "_tf_ops.so"


def _bazel_servers() -> list[str]:
    """Command lines of running Bazel servers for this workspace (Linux /proc)."""
    servers = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = (Path("/proc", pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:  # the process ended meanwhile
            continue
        args = [a.decode(errors="replace") for a in cmdline]
        if f"--workspace_directory={ROOT}" in args:
            servers.append(" ".join(args[:3]))
    return servers


@pytest.fixture(scope="module")
def bazel_build() -> subprocess.CompletedProcess:
    result = subprocess.run(
        ["make", "bazel-build"], cwd=ROOT, capture_output=True, text=True, timeout=3600,
        env={**os.environ, "TF_OPS_BAZEL_MODE": "fastbuild"},
    )
    assert result.returncode == 0, f"make bazel-build failed:\n{result.stdout[-6000:]}\n{result.stderr[-6000:]}"
    return result


def test_builds_the_library(bazel_build):
    assert LIBRARY.is_file()
    assert "Build completed successfully" in bazel_build.stderr + bazel_build.stdout
    assert "(CPU kernels, fastbuild)" in bazel_build.stdout


def test_bazel_server_is_shut_down(bazel_build):
    assert _bazel_servers() == []


def test_every_op_runs_on_cpu(bazel_build):
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "check_op_library.py"), str(LIBRARY), "--cpu-only"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""},
    )
    summary = result.stdout.strip().splitlines()[-1:] or ["(no output)"]
    assert result.returncode == 0, f"{result.stdout[-8000:]}\n{result.stderr[-4000:]}"
    assert " 0 failed" in summary[0] and " passed" in summary[0], summary


def test_links_tensorflow_by_soname_without_runpath(bazel_build):
    # The framework library comes from the Python process that loads this one;
    # a runpath into Bazel's output tree would point nowhere once copied.
    dynamic = subprocess.run(
        ["readelf", "--dynamic", str(LIBRARY)], capture_output=True, text=True, check=True
    ).stdout
    assert "[libtensorflow_framework.so.2]" in dynamic, dynamic
    assert "RUNPATH" not in dynamic and "RPATH" not in dynamic, dynamic
