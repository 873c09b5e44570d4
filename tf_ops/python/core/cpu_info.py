"""Which vector instruction set the CPU kernels use (chosen when the library loads).

The library's CPU loops are compiled for a baseline (AVX on x86-64), AVX2+FMA
and AVX-512, and the widest this CPU supports runs. ``TF_OPS_CPU_ISA=baseline``,
``avx2`` or ``avx512`` in the environment before the library loads caps the
choice (for tests and benchmarks). On top of AVX-512, a CPU with AVX512-BF16 runs the
attention engine's bfloat16 products with its dot products; ``avx512`` turns them off
(``avx512_bf16`` names that widest choice; ``active_cpu_isa`` reports it as 'avx512', and
``active_cpu_extensions`` says whether the bfloat16 products are on).
"""

from __future__ import annotations

import ctypes

from tf_ops.python.core.library import library_path, load_library


def _library_string(symbol: str) -> str:
    """The string the library's exported C function `symbol` returns."""
    load_library()  # the same loaded copy: dlopen of a loaded path returns it
    fn = getattr(ctypes.CDLL(library_path()), symbol)
    fn.restype = ctypes.c_char_p
    return fn().decode()


def active_cpu_isa() -> str:
    """The instruction set the CPU kernels run with: 'baseline', 'avx2' or 'avx512'.

    Example:
      >>> tf_ops.active_cpu_isa()  # doctest: +SKIP
      'avx512'
    """
    return _library_string("TfOpsActiveCpuIsa")


def active_cpu_extensions() -> tuple[str, ...]:
    """The instruction-set extensions the engines use on top of ``active_cpu_isa()``:
    ``('avx512_bf16',)`` where the attention engine's bfloat16 products run (a CPU with
    AVX512-BF16, not capped by ``TF_OPS_CPU_ISA``), else ``()``.

    Example:
      >>> tf_ops.active_cpu_extensions()  # doctest: +SKIP
      ('avx512_bf16',)
    """
    return tuple(name for name in _library_string("TfOpsActiveCpuExtensions").split(",")
                 if name)
