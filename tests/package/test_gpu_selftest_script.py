"""tools/gpu_selftest.sh: the summary block it prints, and its run on this machine.

There is no GPU here, so the summary is checked on the logs of runs made up from the very
lines the self-test prints: their `SUMMARY ...` formats are read out of tests/gpu/*.cu, so
a changed format changes these logs too. The script itself then runs for real (it builds
the self-test without TensorFlow) and must say plainly that nothing was tested."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_selftest.sh"
SOURCES = [ROOT / "tests" / "gpu" / "gpu_selftest.cu", ROOT / "tests" / "gpu" / "gpu_bench.cu"]
CONFIGURE_LINE = (
    "-- tf_ops: nvcc /usr/local/cuda/bin/nvcc (CUDA 13.0), CUDA runtime 13.0, architectures 90-real"
)


def _printf_formats() -> list[str]:
    """The format strings of every std::printf in the self-test's sources, with adjacent
    literals joined, C escapes resolved and %lld as %d (C's %s %d %.0f %% mean the same
    in Python)."""
    formats = []
    for source in SOURCES:
        text = source.read_text()
        for call in re.finditer(r'std::printf\(((?:\s*"(?:[^"\\]|\\.)*")+)', text):
            literals = re.findall(r'"((?:[^"\\]|\\.)*)"', call.group(1))
            fmt = "".join(literals).encode().decode("unicode_escape")
            formats.append(re.sub(r"%ll?([di])", r"%\1", fmt))  # C's long long
    return formats


def _format(prefix: str) -> str:
    (fmt,) = [f for f in _printf_formats() if f.lstrip("\n").startswith(prefix)]
    return fmt


def test_summary_lines_are_the_ones_the_script_reads():
    prefixes = sorted(
        re.match(r"SUMMARY \w+ \w+", f).group(0)
        for f in _printf_formats()
        if f.startswith("SUMMARY ")
    )
    assert prefixes == [
        "SUMMARY bench dtype",
        "SUMMARY checks family",
        "SUMMARY checks total",
        "SUMMARY device name",
        "SUMMARY device none",
    ]


def _checks_log(failed: int = 0, quick: bool = False) -> str:
    lines = [_format("SUMMARY device name") % ("NVIDIA H200", 9, 0, 13, 0, 13, 0)]
    for family, passed in [("forward", 810), ("backward", 810)]:
        lines.append(_format("SUMMARY checks family") % (family, passed - failed, failed))
    lines.append(
        _format("SUMMARY checks total") % (1620 - 2 * failed, 2 * failed, " quick" if quick else "")
    )
    return "".join(lines)


def _bench_log(float32_pct: float = 93.0) -> str:
    lines = [_format("%d elements") % (1 << 28)]
    for dtype, pct, target, where in [
        ("float32", float32_pct, 85.0, "Mish backward"),
        ("float16", 88.0, 80.0, "Gelu approximate forward"),
        ("bfloat16", 87.0, 80.0, "Gelu backward"),
        ("float64", 97.0, 0.0, "Mish backward"),
    ]:
        lines.append(_format("SUMMARY bench dtype") % (dtype, pct, target, 4012.0, where))
    return "".join(lines)


SANITIZER_END = {
    "memcheck": "========= ERROR SUMMARY: {n} errors\n",
    "racecheck": "========= RACECHECK SUMMARY: {n} hazards displayed ({n} errors, 0 warnings)\n",
    "initcheck": "========= ERROR SUMMARY: {n} errors\n",
}


def _run_logs(
    tmp_path: Path, *, checks_failed: int = 0, sanitizer: str = "clean", bench_rc: int = 0
) -> Path:
    """The logs folder of a run on a GPU machine; `sanitizer` is "clean", "errors",
    "missing" or "refused" (the tool refuses the device)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "run.txt").write_text("2026-12-01T09:00Z, abc1234\n")
    (logs / "driver.txt").write_text("580.159.03\n")
    (logs / "configure.log").write_text(CONFIGURE_LINE + "\n")
    (logs / "build.rc").write_text("0\n")
    (logs / "checks.log").write_text(_checks_log(checks_failed))
    (logs / "checks.rc").write_text(f"{1 if checks_failed else 0}\n")
    for tool, end in SANITIZER_END.items():
        if sanitizer == "missing":
            (logs / f"{tool}.skipped").write_text(
                "compute-sanitizer not found (set COMPUTE_SANITIZER=/path/to/it)\n"
            )
            continue
        if sanitizer == "refused":
            text, rc = (
                "========= COMPUTE-SANITIZER\n========= Error: Device not supported\ncudaMalloc: unknown error\n",
                1,
            )
        else:
            n = 2 if sanitizer == "errors" and tool == "memcheck" else 0
            text, rc = (
                "========= COMPUTE-SANITIZER\n" + _checks_log(quick=True) + end.format(n=n),
                0,
            )
        (logs / f"{tool}.log").write_text(text)
        (logs / f"{tool}.rc").write_text(f"{rc}\n")
    (logs / "bench.log").write_text(_bench_log(80.0 if bench_rc == 3 else 93.0))
    (logs / "bench.rc").write_text(f"{bench_rc}\n")
    return logs


def _summary(logs: Path) -> tuple[int, list[str]]:
    result = subprocess.run(
        [str(SCRIPT), "--summary", str(logs)], capture_output=True, text=True, timeout=60
    )
    assert result.stderr == "", result.stderr
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("===== tf_ops GPU self-test"))
    assert lines[-1] == "=====", result.stdout
    return result.returncode, lines[start:]


def test_summary_of_a_passing_run(tmp_path):
    logs = _run_logs(tmp_path)
    status, lines = _summary(logs)
    assert status == 0
    assert lines == [
        "===== tf_ops GPU self-test: 2026-12-01T09:00Z, abc1234 =====",
        "GPU:          NVIDIA H200 (sm_90), driver 580.159.03 (supports CUDA 13.0)",
        "CUDA runtime: 13.0, linked statically",
        "Toolkit:      /usr/local/cuda/bin/nvcc (CUDA 13.0), CUDA runtime 13.0, architectures 90-real",
        "Checks:       1620 passed, 0 failed (passed/failed per family: forward 810/0, backward 810/0)",
        "memcheck:     0 errors (1620 cases of the quick set)",
        "racecheck:    0 errors (1620 cases of the quick set)",
        "initcheck:    0 errors (1620 cases of the quick set)",
        "Bandwidth:    268435456 elements; per dtype the slowest kernel, as % of a device-to-device copy of its bytes:",
        "              float32   93% (Mish backward; copy 4012 GB/s), target 85%",
        "              float16   88% (Gelu approximate forward; copy 4012 GB/s), target 80%",
        "              bfloat16  87% (Gelu backward; copy 4012 GB/s), target 80%",
        "              float64   97% (Mish backward; copy 4012 GB/s)",
        "Result:       PASS",
        f"Logs:         {logs}/",
        "=====",
    ]


@pytest.mark.parametrize(
    "kwargs, status, expected",
    [
        (
            dict(checks_failed=3),
            1,
            {
                "Checks:       1614 passed, 6 failed (passed/failed per family: "
                "forward 807/3, backward 807/3)",
                "Result:       FAIL",
            },
        ),
        (dict(sanitizer="errors"), 1, {"Result:       FAIL"}),
        (
            dict(sanitizer="missing"),
            0,
            {
                "memcheck:     NOT RUN: compute-sanitizer not found (set COMPUTE_SANITIZER=/path/to/it)",
                "Result:       PASS (sanitizers not run)",
            },
        ),
        (
            dict(sanitizer="refused"),
            0,
            {
                "racecheck:    NOT RUN: the tool failed (exit 1: Error: Device not supported)",
                "Result:       PASS (sanitizers not run)",
            },
        ),
        (dict(bench_rc=3), 3, {"Result:       PASS, but a bandwidth target was missed"}),
    ],
)
def test_summary_of_failing_or_partial_runs(tmp_path, kwargs, status, expected):
    got_status, lines = _summary(_run_logs(tmp_path, **kwargs))
    assert got_status == status, lines
    assert expected <= set(lines), lines
    if kwargs.get("sanitizer") == "errors":
        assert any(line.startswith("memcheck:     FAILED: 2 errors") for line in lines), lines


@pytest.mark.slow
def test_the_script_on_this_machine_says_nothing_was_tested(tmp_path):
    """Builds the self-test without TensorFlow (~1-2 min here for one architecture). CI's
    architectures ($CUDAARCHS) where set: the same flags as `make build`'s self-test target,
    so the compiler cache already holds every object."""
    assert shutil.which("nvcc"), "nvcc is needed (CI has it)"
    # Beside build/ in the source tree (ccache rewrites the paths under it relative to the
    # build folder: at the same depth the objects are `make build`'s), fresh each run.
    build = ROOT / "build-gpu-selftest-script"
    shutil.rmtree(build, ignore_errors=True)
    env = dict(os.environ, GPU_SELFTEST_BUILD_DIR=str(build))
    env.pop("COMPUTE_SANITIZER", None)
    architectures = os.environ.get("CUDAARCHS") or "75-real"
    result = subprocess.run(
        [str(SCRIPT), f"-DCMAKE_CUDA_ARCHITECTURES={architectures}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=900,
    )
    lines = result.stdout.splitlines()
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no CUDA device: nothing tested" in lines
    toolkit = [line for line in lines if line.startswith("Toolkit:")]
    assert toolkit and re.fullmatch(
        r"Toolkit: +\S+nvcc \(CUDA \d+\.\d+\), CUDA runtime \d+\.\d+, architectures "
        + re.escape(architectures),
        toolkit[0],
    ), toolkit
    assert "Checks:       not run" in lines
    assert "Bandwidth:    not run" in lines
    assert "Result:       NOTHING TESTED (no usable GPU)" in lines
    memcheck = next(line for line in lines if line.startswith("memcheck:"))
    assert memcheck.startswith("memcheck:     NOT RUN: "), memcheck
