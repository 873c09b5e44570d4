"""What the benchmarks say about the machine they ran on."""

from __future__ import annotations

import platform


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def describe() -> str:
    """The CPU, its cores and whether it has AVX-512: what sets the pace of a run
    (an AMD EPYC without AVX-512 runs the suite ~2.5x slower than an Intel Xeon)."""
    import os

    try:
        with open("/proc/cpuinfo") as f:
            avx512 = "yes" if " avx512f" in f.read() else "no"
    except OSError:
        avx512 = "unknown"
    return f"{cpu_name()}, {os.cpu_count()} cores, AVX-512: {avx512}"
