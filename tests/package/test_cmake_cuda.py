"""The CUDA part of the CMake configuration (cmake/TfOpsCuda.cmake, CMakeLists.txt) for
toolkits this machine does not have: only nvcc 13 is here, so the version logic runs on
made-up versions (`cmake -P`) and made-up nvcc programs that only print a version banner,
and the real nvcc 13 configures the default path. Without TensorFlow: configuring the
TF-free part is enough, and quick."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CMAKE = shutil.which("cmake")
TOOLKIT_MODULE = ROOT / "cmake" / "TfOpsCuda.cmake"


def _cmake_script(tmp_path: Path, body: str) -> list[str]:
    """Runs `body` with cmake/TfOpsCuda.cmake included; returns its STATUS messages."""
    script = tmp_path / "probe.cmake"
    script.write_text(f'include("{TOOLKIT_MODULE}")\n{body}\n')
    result = subprocess.run([CMAKE, "-P", str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return [line[3:] for line in result.stdout.splitlines() if line.startswith("-- ")]


def _fake_nvcc(tmp_path: Path, release: str | None, name: str = "nvcc") -> Path:
    """A program that answers `--version` like nvcc of `release` ("12.4"); None: prints
    something else. Anything but --version fails."""
    banner = (
        "nvcc: NVIDIA (R) Cuda compiler driver\n"
        f"Cuda compilation tools, release {release}, V{release}.99\n"
        if release
        else "not a compiler\n"
    )
    path = tmp_path / f"{name}-{release}" / "nvcc"
    path.parent.mkdir()
    path.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] || exit 1\ncat <<'EOF'\n{banner}EOF\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize(
    "version, expected",
    [
        ("11.8", ""),
        ("12.0", "60-real;70-real;75-real;80-real;86-real;89-real;90-real;90-virtual"),
        ("12.4", "60-real;70-real;75-real;80-real;86-real;89-real;90-real;90-virtual"),
        ("12.9", "60-real;70-real;75-real;80-real;86-real;89-real;90-real;90-virtual"),
        ("13.0", "75-real;80-real;86-real;89-real;90-real;90-virtual"),
        ("13.2", "75-real;80-real;86-real;89-real;90-real;90-virtual"),
        ("14.0", "75-real;80-real;86-real;89-real;90-real;90-virtual"),
    ],
)
def test_default_architectures_per_toolkit(tmp_path, version, expected):
    (line,) = _cmake_script(
        tmp_path,
        f'tf_ops_default_cuda_architectures({version} archs)\nmessage(STATUS "archs=${{archs}}")',
    )
    assert line == f"archs={expected}"


def test_nvcc_version_is_read_from_its_banner(tmp_path):
    cases = {
        "12.4": _fake_nvcc(tmp_path, "12.4"),
        "13.0": _fake_nvcc(tmp_path, "13.0"),
        "": _fake_nvcc(tmp_path, None),
    }
    body = "".join(
        f'tf_ops_nvcc_version("{path}" v)\nmessage(STATUS "{expected}=${{v}}")\n'
        for expected, path in cases.items()
    )
    body += 'tf_ops_nvcc_version("/nonexistent/nvcc" v)\nmessage(STATUS "missing=${v}")\n'
    lines = _cmake_script(tmp_path, body)
    assert lines == ["12.4=12.4", "13.0=13.0", "=", "missing="]


def _configure(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Configures the TF-free part (the GPU self-test) in a fresh build directory."""
    build = tmp_path / f"build-{len(list(tmp_path.glob('build-*')))}"
    environment = {k: v for k, v in os.environ.items() if k not in ("CUDAARCHS", "CUDACXX")}
    return subprocess.run(
        [CMAKE, "-S", str(ROOT), "-B", str(build), "-DTF_OPS_WITH_TENSORFLOW=OFF", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**environment, **(env or {})},
    )


def test_too_old_toolkit_fails_when_cuda_is_required_and_is_left_out_on_auto(tmp_path):
    nvcc = _fake_nvcc(tmp_path, "11.8")
    required = _configure(tmp_path, "-DTF_OPS_CUDA=ON", f"-DCMAKE_CUDA_COMPILER={nvcc}")
    assert required.returncode != 0
    message = re.sub(r"\s+", " ", required.stderr)
    assert (
        f"TF_OPS_CUDA=ON, but {nvcc} is CUDA 11.8; tf_ops needs CUDA 12.0 or newer." in message
    ), message
    auto = _configure(tmp_path, "-DTF_OPS_CUDA=AUTO", f"-DCMAKE_CUDA_COMPILER={nvcc}")
    assert auto.returncode == 0, auto.stdout + auto.stderr
    assert (
        f"tf_ops: no CUDA kernels: {nvcc} is CUDA 11.8; tf_ops needs CUDA 12.0 or newer"
        in auto.stdout
    )
    assert "tf_ops: CUDA kernels OFF" in auto.stdout


def test_missing_compiler_fails_when_cuda_is_required(tmp_path):
    result = _configure(tmp_path, "-DTF_OPS_CUDA=ON", "-DCMAKE_CUDA_COMPILER=/nonexistent/nvcc")
    assert result.returncode != 0
    assert "TF_OPS_CUDA=ON, but `/nonexistent/nvcc --version` names no CUDA release." in re.sub(
        r"\s+", " ", result.stderr
    )


@pytest.mark.heavy  # a CMake configure with nvcc
def test_this_machines_nvcc_gets_its_default_architectures(tmp_path):
    nvcc = shutil.which("nvcc")
    assert nvcc, "nvcc is needed (CI has it)"
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    release = re.search(r"release (\d+\.\d+)", version).group(1)
    (expected,) = _cmake_script(
        tmp_path,
        f'tf_ops_default_cuda_architectures({release} archs)\nmessage(STATUS "${{archs}}")',
    )
    result = _configure(tmp_path, "-DTF_OPS_CUDA=ON", f"-DCMAKE_CUDA_COMPILER={nvcc}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (
        f"(CUDA {release}), CUDA runtime {release}, architectures {expected}" in result.stdout
    ), result.stdout
    assert "tf_ops: CUDA kernels ON" in result.stdout
    # CMake's own way to choose them, $CUDAARCHS, wins over the default.
    chosen = _configure(
        tmp_path, "-DTF_OPS_CUDA=ON", f"-DCMAKE_CUDA_COMPILER={nvcc}", env={"CUDAARCHS": "90-real"}
    )
    assert chosen.returncode == 0, chosen.stdout[-3000:] + chosen.stderr[-3000:]
    assert (
        f"(CUDA {release}), CUDA runtime {release}, architectures 90-real\n" in chosen.stdout
    ), chosen.stdout
