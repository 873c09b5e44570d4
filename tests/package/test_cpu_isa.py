"""The CPU kernels are compiled for several instruction sets (baseline AVX,
AVX2+FMA, AVX-512) and the widest the CPU has runs; the rest of the suite
therefore tests only that one. Here the value tests run again with each
narrower path forced through TF_OPS_CPU_ISA, in a fresh process each (the
choice is made when the library loads)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from subprocesses import REPO_ROOT, python_env

import tf_ops

ISAS = ("baseline", "avx2", "avx512")


def _env(isa: str) -> dict:
    return python_env(TF_OPS_CPU_ISA=isa)


def test_native_is_the_widest_supported():
    assert tf_ops.active_cpu_isa() in ISAS
    if "TF_OPS_CPU_ISA" not in os.environ:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
        if " avx512bw " in flags and " avx512vl " in flags:
            assert tf_ops.active_cpu_isa() == "avx512"


def test_extensions_follow_the_cap():
    """active_cpu_extensions() names the bfloat16 products where the CPU has them and
    nothing caps them, and is empty under TF_OPS_CPU_ISA=avx512 (a fresh process)."""
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    has_bf16 = " avx512_bf16 " in flags and tf_ops.active_cpu_isa() == "avx512"
    if "TF_OPS_CPU_ISA" not in os.environ:
        assert tf_ops.active_cpu_extensions() == (("avx512_bf16",) if has_bf16 else ())
    capped = subprocess.run(
        [sys.executable, "-c", "import tf_ops; print(tf_ops.active_cpu_extensions())"],
        env=_env("avx512"), capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert capped == "()"


@pytest.mark.heavy  # a pytest run per instruction set
@pytest.mark.parametrize("isa", [i for i in ISAS if i != "avx512"])
def test_values_with_narrower_instruction_set(isa):
    native = tf_ops.active_cpu_isa()
    expected = isa if ISAS.index(isa) <= ISAS.index(native) else native
    got = subprocess.run(
        [sys.executable, "-c", "import tf_ops; print(tf_ops.active_cpu_isa())"],
        env=_env(isa), capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert got == expected, f"TF_OPS_CPU_ISA={isa} gave {got}"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(REPO_ROOT / "tests" / "activation" / "test_values.py"), "-k", "reference or special"],
        env=_env(isa), capture_output=True, text=True, cwd=REPO_ROOT, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


@pytest.mark.heavy  # a pytest run
def test_attention_values_without_bf16_products():
    """Where the CPU has AVX512-BF16, the native run tests the attention's bfloat16
    products (vdpbf16ps); TF_OPS_CPU_ISA=avx512 turns them off, and the AVX-512 path
    that widens bfloat16 to float is tested here."""
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    if " avx512_bf16 " not in flags:
        pytest.skip("no AVX512-BF16: the native run takes the widening path")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(REPO_ROOT / "tests" / "attention" / "test_attention.py"),
         "-k", "values_against_reference or fused_backward"],
        env=_env("avx512"), capture_output=True, text=True, cwd=REPO_ROOT, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
