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
    """The CPU, its cores and the instruction set tf_ops's CPU kernels run with there
    (`tf_ops.active_cpu_isa()`): what sets the pace of a run (an AMD EPYC whose kernels
    run AVX2 takes ~2.5x an Intel Xeon's time for the test suite)."""
    import os

    import tf_ops

    return f"{cpu_name()}, {os.cpu_count()} cores, CPU kernels: {tf_ops.active_cpu_isa()}"
