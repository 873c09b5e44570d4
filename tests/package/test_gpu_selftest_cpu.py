"""tools/gpu_selftest_cpu.sh (`make gpu-selftest-cpu`): its deliberate breaks and its summary.

CI runs the script itself (beside the slow tests: it builds three programs and runs them, minutes
of work); these quick checks are what can go wrong before that: a kernel edited so that a break's
text is no longer in it (the CPU run's build would then stop), and the summary's verdict, read
from logs made up from the lines the programs print."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_selftest_cpu.sh"
BREAKS = ROOT / "tests" / "gpu" / "cuda_on_cpu" / "breaks.cmake"
APPLY = ROOT / "cmake" / "TfOpsApplyBreak.cmake"


def _breaks() -> list[tuple[str, str, str, str]]:
    """(name, build, family, kernel source) of each tf_ops_selftest_break() call."""
    calls = re.findall(
        r"^tf_ops_selftest_break\((\S+) (\S+) (\S+)\s+(\S+)", BREAKS.read_text(), re.M
    )
    assert calls, "breaks.cmake defines no break"
    return calls


def test_six_breaks_one_per_kind_and_build():
    names = [name for name, *_ in _breaks()]
    assert names == ["missing-syncthreads", "grid-stride-tail", "shuffle-offset",
                     "misaligned-load", "attention-tile-tail", "group-norm-row-tail"]
    assert {build for _, build, _, _ in _breaks()} == {"plain", "asan", "tsan"}


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
@pytest.mark.parametrize("name,build,family,source", _breaks())
def test_break_still_applies_to_its_kernel(tmp_path, name, build, family, source):
    out = tmp_path / "patched.cu"
    result = subprocess.run(
        ["cmake", f"-DBREAK={name}", f"-DIN={ROOT / source}", f"-DOUT={out}", "-P", str(APPLY)],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    original = (ROOT / source).read_text()
    patched = out.read_text()
    assert patched != original
    # One hunk changed: the break is one bug, not several.
    assert len(patched.splitlines()) <= len(original.splitlines())


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_a_break_whose_text_is_gone_stops_the_build(tmp_path):
    source = tmp_path / "norm_gpu.cu"
    source.write_text("// a kernel without the text\n")
    result = subprocess.run(
        ["cmake", "-DBREAK=missing-syncthreads", f"-DIN={source}",
         f"-DOUT={tmp_path / 'out.cu'}", "-P", str(APPLY)],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode != 0
    assert "no longer contains the text" in result.stderr


# ------------------------------------------------------------------------- the summary -----

def _selftest_log(failed: int = 0) -> str:
    families = [("forward", 10), ("norm", 132)]
    lines = ['SUMMARY device name="none: CUDA-on-CPU (tests/gpu/cuda_on_cpu)" sm=00 '
             "driver_cuda=13.0 runtime_cuda=13.0"]
    for family, passed in families:
        lines.append(f"SUMMARY checks family={family} passed={passed - failed} failed={failed}")
    total = sum(p for _, p in families)
    lines.append(f"SUMMARY checks total passed={total - 2 * failed} failed={2 * failed} small")
    return "\n".join(lines) + "\n"


def _write_logs(logs: Path, *, build_rc: int = 0, failed: int = 0, race: bool = False,
                caught: bool = True) -> None:
    logs.mkdir(parents=True)
    (logs / "run.txt").write_text("2026-12-01T09:00Z, abc1234\n")
    (logs / "compiler.txt").write_text("c++ (Debian 12.2.0-14) 12.2.0\n")
    (logs / "build.rc").write_text(f"{build_rc}\n")
    (logs / "build.seconds").write_text("120\n")
    (logs / "build.log").write_text("[100%] Built target\n")
    if build_rc:
        return
    for build in ("plain", "asan", "tsan"):
        log = _selftest_log(failed)
        if race and build == "tsan":
            log = "SUMMARY: ThreadSanitizer: data race kernel.cu:7 in K\n" + log
        (logs / f"{build}.log").write_text(log)
        (logs / f"{build}.rc").write_text(f"{1 if failed else 0}\n")
        (logs / f"{build}.seconds").write_text("60\n")
        (logs / f"{build}-layer.log").write_text("layer test: 25 passed, 0 failed\n")
        (logs / f"{build}-layer.rc").write_text("0\n")
        (logs / f"{build}-layer.seconds").write_text("2\n")
    breaks = []
    for name, build, family, _ in _breaks():
        breaks.append(f"{name}\t{build}\t{family}\t^FAIL {family} \tone bug")
        text = f"FAIL {family} float32 case: wrong\n" if caught else _selftest_log()
        (logs / f"break-{name}.log").write_text(text)
        (logs / f"break-{name}.rc").write_text(f"{1 if caught else 0}\n")
    (logs / "breaks.tsv").write_text("\n".join(breaks) + "\n")
    (logs / "breaks.seconds").write_text("30\n")
    (logs / "total.seconds").write_text("400\n")


def _summary(logs: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), "--summary", str(logs)], capture_output=True,
                          text=True, check=False)


def test_summary_of_a_passing_run(tmp_path):
    _write_logs(tmp_path / "logs")
    result = _summary(tmp_path / "logs")
    assert result.returncode == 0, result.stdout
    out = result.stdout
    assert "===== tf_ops GPU self-test on the CPU: 2026-12-01T09:00Z, abc1234 =====" in out
    assert re.search(r"^tsan: +142 passed, 0 failed in 60 s \(exit 0, 0 sanitizer reports; "
                     r"layer test 25 passed, 0 failed; passed/failed per family: forward 10/0, "
                     r"norm 132/0\)$", out, re.M), out
    breaks = len(_breaks())
    assert f"Breaks:       {breaks} of {breaks} caught in 30 s" in out
    assert "Time:         build 120 s, plain 62 s, asan+ubsan 62 s, tsan 62 s, breaks 30 s; " \
           "total 400 s" in out
    assert "Result:       PASS" in out


@pytest.mark.parametrize(
    "kwargs,expected",
    [({"failed": 1}, "140 passed, 2 failed"),
     ({"race": True}, "1 sanitizer reports"),
     ({"caught": False}, "NOT CAUGHT: missing-syncthreads")],
)
def test_summary_fails_on_a_failed_check_a_report_or_an_uncaught_break(tmp_path, kwargs,
                                                                      expected):
    _write_logs(tmp_path / "logs", **kwargs)
    result = _summary(tmp_path / "logs")
    assert result.returncode == 1, result.stdout
    assert expected in result.stdout
    assert "Result:       FAIL" in result.stdout


def test_summary_of_a_failed_build(tmp_path):
    _write_logs(tmp_path / "logs", build_rc=2)
    result = _summary(tmp_path / "logs")
    assert result.returncode == 4
    assert "Result:       FAIL (build)" in result.stdout
