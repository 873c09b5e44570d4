"""Whether tf_ops's GPU kernels can run in this process, and why not.

The GPU kernels live in their own library, ``_tf_ops_gpu.so``, with the CUDA runtime
linked statically. A CUDA runtime needs an NVIDIA driver at least as new as its major
release (CUDA 13: driver 580), while TensorFlow's own GPU build runs on older drivers; a
GPU library that TensorFlow picked for an op on such a driver would fail inside a training
step. So the loader (``library.py``) loads it only when TensorFlow sees a GPU, the driver
supports the runtime the kernels were built with, and every visible GPU has code in the
library; otherwise TensorFlow places the ops on the CPU (they have no GPU kernel) and one
warning says why and what to do.

This module holds the facts and the decision, free of side effects so that tests can feed
it any driver and GPU; ``visible_gpus`` and ``driver_cuda_version`` read the real ones.
"""

from __future__ import annotations

import ctypes
import dataclasses
from typing import Sequence

import tensorflow as tf

CudaVersion = tuple[int, int]  # (major, minor), e.g. (13, 0)

# The oldest Linux x86_64 NVIDIA driver for each CUDA release, from NVIDIA's CUDA Toolkit
# release notes ("CUDA Driver") and the CUDA Compatibility guide. A runtime of a major
# release runs on the first driver of that major (minor version compatibility): that is the
# requirement for GPUs that run the compiled code (SASS). PTX the driver must compile at run
# time (GPUs newer than every real architecture built) needs the driver of the toolkit that
# wrote it. The loader decides from cuDriverGetVersion (the newest CUDA version a driver
# supports); these numbers are what messages, the README and docs/gpu.md tell people to install.
MINOR_VERSION_COMPATIBILITY_DRIVERS: dict[int, str] = {
    12: "525.60.13",
    13: "580",
}
TOOLKIT_DRIVERS: dict[CudaVersion, str] = {
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}

# The user-mode driver library: TensorFlow has already loaded it where it found a GPU.
CUDA_DRIVER_LIBRARY = "libcuda.so.1"

# What every message about a build for another toolkit points to.
README_GPU = 'README, section "GPU"'

_NOT_LOADED = "tf_ops: GPU kernels not loaded."
# Added when a GPU is visible: what that means for the user's program.
_ON_THE_CPU = (
    "TensorFlow runs tf_ops ops on the CPU (correct results, but slower than a GPU kernel, "
    "with copies between the devices)."
)


class GpuFallbackWarning(RuntimeWarning):
    """Issued once, at import, when TensorFlow sees a GPU but tf_ops's GPU kernels cannot run
    (its text is `GpuStatus.message`).

    Example (to silence it, before importing tf_ops):
      >>> import warnings
      >>> warnings.filterwarnings(  # doctest: +SKIP
      ...     "ignore", message="tf_ops: GPU kernels not loaded")
    """


@dataclasses.dataclass(frozen=True)
class GpuDevice:
    """A GPU TensorFlow sees: its name and compute capability (None when unknown)."""

    name: str
    compute_capability: CudaVersion | None

    def __str__(self) -> str:
        if self.compute_capability is None:
            return self.name
        return f"{self.name} (compute capability {version_text(self.compute_capability)})"


@dataclasses.dataclass(frozen=True)
class GpuBuild:
    """What the GPU library was built with (from ``_tf_ops_gpu.build.json``)."""

    library: str
    cuda_runtime: CudaVersion
    architectures: tuple[str, ...]  # CMAKE_CUDA_ARCHITECTURES, e.g. ("90-real", "90-virtual")

    @property
    def min_driver(self) -> str | None:
        """The oldest driver the compiled code runs on (minor version compatibility)."""
        return minimum_driver((self.cuda_runtime[0], 0))


@dataclasses.dataclass(frozen=True)
class GpuStatus:
    """Whether tf_ops's GPU kernels are active in this process and, if not, why.

    Attributes:
      active: the GPU kernels are loaded; TensorFlow may place tf_ops ops on GPUs.
      reason: why they are not ("" when active).
      remedy: what to do about it ("" when nothing needs doing).
      gpus: the GPUs TensorFlow sees, e.g. ``("NVIDIA H200 (compute capability 9.0)",)``.
      driver_cuda: the newest CUDA version the NVIDIA driver supports, e.g. ``"12.4"``
        (None when not read: no GPU, no GPU kernels built, or no driver).
      cuda_runtime: the CUDA runtime linked into the GPU kernels, e.g. ``"13.0"`` (None
        when they were not built).
      min_driver: the oldest driver those kernels run on here, e.g. ``"580"``.
      library: the GPU kernel library (None when none was built).

    Example:
      >>> status = tf_ops.gpu_status()
      >>> status.active, status.reason  # doctest: +SKIP
      (False, 'TensorFlow sees no GPU.')
    """

    active: bool
    reason: str = ""
    remedy: str = ""
    gpus: tuple[str, ...] = ()
    driver_cuda: str | None = None
    cuda_runtime: str | None = None
    min_driver: str | None = None
    library: str | None = None

    @property
    def message(self) -> str:
        """One paragraph for people: what runs where, why, and what to do."""
        if self.active:
            return (
                f"tf_ops: GPU kernels active on {', '.join(self.gpus)} ({self.library}: CUDA "
                f"{self.cuda_runtime} runtime; the driver supports CUDA {self.driver_cuda})."
            )
        on_the_cpu = _ON_THE_CPU if self.gpus else ""
        return " ".join(
            part for part in (_NOT_LOADED, on_the_cpu, self.reason, self.remedy) if part
        )

    @property
    def should_warn(self) -> bool:
        """True when a GPU is visible but the GPU kernels are not active: the case the
        warning is for (without a GPU, CPU kernels are simply what runs)."""
        return bool(self.gpus) and not self.active


def version_text(version: CudaVersion) -> str:
    """``(13, 0)`` -> ``"13.0"``."""
    return f"{version[0]}.{version[1]}"


def parse_version(text: str) -> CudaVersion:
    """``"13.0"`` -> ``(13, 0)``; raises ValueError for anything else."""
    major, minor = text.split(".")
    return int(major), int(minor)


def from_driver_api_version(value: int) -> CudaVersion:
    """cuDriverGetVersion's integer (1000 * major + 10 * minor) as (major, minor): 12040 ->
    (12, 4)."""
    return value // 1000, (value % 1000) // 10


def minimum_driver(required: CudaVersion) -> str | None:
    """The oldest Linux driver for CUDA `required`, where the tables know it.

    ``(major, 0)`` is the requirement under minor version compatibility; any other minor is
    the driver of that toolkit (for PTX compiled at run time).

    Example:
      >>> minimum_driver((13, 0))
      '580'
    """
    if required[1] == 0 and required[0] in MINOR_VERSION_COMPATIBILITY_DRIVERS:
        return MINOR_VERSION_COMPATIBILITY_DRIVERS[required[0]]
    return TOOLKIT_DRIVERS.get(required)


def _driver_text(required: CudaVersion) -> str:
    """ "driver 580 or newer (CUDA 13.0)", or just the CUDA version where no number is known."""
    driver = minimum_driver(required)
    cuda = f"CUDA {version_text(required)}"
    return (
        f"NVIDIA driver {driver} or newer ({cuda})"
        if driver
        else f"an NVIDIA driver for {cuda} or newer"
    )


def code_for(compute_capability: CudaVersion, architectures: Sequence[str]) -> str | None:
    """Which code in a build with `architectures` a GPU runs: "sass" (compiled for its
    architecture family), "ptx" (compiled by the driver at first use), "unknown" (the list
    is not explicit, e.g. "native" or "all"), or None (none: kernels cannot launch there).

    SASS for X.Y runs on X.Z with Z >= Y ("a" variants, like 90a, on X.Y only); PTX for X.Y
    on every GPU of compute capability >= X.Y. ("f" variants count as their family.)

    Example:
      >>> code_for((9, 0), ["75-real", "90-real", "90-virtual"])
      'sass'
      >>> code_for((10, 0), ["75-real", "90-real", "90-virtual"])
      'ptx'
      >>> code_for((7, 0), ["75-real", "90-virtual"]) is None
      True
    """
    found = None
    for arch in architectures:
        number, _, kind = arch.partition("-")
        digits = number.rstrip("af")
        if not digits.isdigit() or len(digits) < 2:
            return "unknown"
        arch_cc = (int(digits[:-1]), int(digits[-1]))
        exact_only = number.endswith("a")  # 90a: architecture-specific code
        if kind in ("", "real"):
            same_family = (
                arch_cc[0] == compute_capability[0] and arch_cc[1] <= compute_capability[1]
            )
            if arch_cc == compute_capability or (same_family and not exact_only):
                return "sass"
        if kind in ("", "virtual") and (
            arch_cc == compute_capability or (arch_cc <= compute_capability and not exact_only)
        ):
            found = "ptx"
    return found


def decide(
    build: GpuBuild,
    gpus: Sequence[GpuDevice],
    driver: CudaVersion | None,
    driver_error: str | None = None,
) -> GpuStatus:
    """Whether `build`'s GPU kernels can run with these GPUs and this driver.

    Args:
      build: the GPU library and what it was built with.
      gpus: the GPUs TensorFlow sees.
      driver: the CUDA version the driver supports (cuDriverGetVersion), None when it
        could not be read; `driver_error` then says why.

    Returns:
      A status with ``active=True`` when the library should be loaded (the loader makes it
      inactive if loading then fails), else the reason and the remedy.

    Example:
      >>> build = GpuBuild("_tf_ops_gpu.so", (13, 0), ("90-real", "90-virtual"))
      >>> h200 = GpuDevice("NVIDIA H200", (9, 0))
      >>> decide(build, [h200], (13, 0)).active
      True
      >>> decide(build, [h200], (12, 4)).reason  # doctest: +ELLIPSIS
      'The NVIDIA driver supports CUDA 12.4, but ... needs NVIDIA driver 580 or newer (CUDA 13.0).'
    """
    runtime = build.cuda_runtime
    # Minor version compatibility: the major release's first driver, unless a GPU needs
    # the PTX, which only the toolkit's own driver (or newer) can compile.
    required = (runtime[0], 0)
    for gpu in gpus:
        if gpu.compute_capability is None:
            continue
        code = code_for(gpu.compute_capability, build.architectures)
        if code is None:
            cc = gpu.compute_capability
            remedy = f"Rebuild tf_ops with {cc[0]}{cc[1]}-real added to CMAKE_CUDA_ARCHITECTURES"
            if runtime[0] >= 13 and cc < (7, 5):
                remedy += (
                    " and a CUDA 12 toolkit (CUDA 13 compiles for compute capability 7.5 and newer)"
                )
            return _inactive(
                build,
                gpus,
                driver,
                reason=f"{gpu} has no code in the GPU kernels, which are compiled for "
                f"{';'.join(build.architectures)}.",
                remedy=f"{remedy} ({README_GPU}).",
                required=required,
            )
        if code == "ptx":
            required = max(required, runtime)
    if driver is None:
        return _inactive(
            build,
            gpus,
            driver,
            reason=f"The NVIDIA driver's CUDA version cannot be read ({driver_error}).",
            remedy=f"Check the driver (`nvidia-smi`); the GPU kernels need "
            f"{_driver_text(required)}.",
            required=required,
        )
    if driver < required:
        newer = minimum_driver(required) or f"one for CUDA {version_text(required)}"
        remedy = f"Update the NVIDIA driver to {newer} or newer"
        if driver[0] >= 12 and driver[0] < runtime[0]:
            remedy += (
                f", or build tf_ops with a CUDA {driver[0]} toolkit, which this driver runs "
                f"({README_GPU}: TF_OPS_CUDA=ON with CMAKE_CUDA_COMPILER set to its nvcc)"
            )
        return _inactive(
            build,
            gpus,
            driver,
            reason=f"The NVIDIA driver supports CUDA {version_text(driver)}, but the GPU kernels "
            f"are linked with the CUDA {version_text(runtime)} runtime, which needs "
            f"{_driver_text(required)}.",
            remedy=remedy + ".",
            required=required,
        )
    return GpuStatus(
        active=True,
        gpus=tuple(map(str, gpus)),
        driver_cuda=version_text(driver),
        cuda_runtime=version_text(runtime),
        min_driver=minimum_driver(required),
        library=build.library,
    )


def _inactive(
    build: GpuBuild,
    gpus: Sequence[GpuDevice],
    driver: CudaVersion | None,
    *,
    reason: str,
    remedy: str,
    required: CudaVersion,
) -> GpuStatus:
    return GpuStatus(
        active=False,
        reason=reason,
        remedy=remedy,
        gpus=tuple(map(str, gpus)),
        driver_cuda=None if driver is None else version_text(driver),
        cuda_runtime=version_text(build.cuda_runtime),
        min_driver=minimum_driver(required),
        library=build.library,
    )


def visible_gpus() -> tuple[GpuDevice, ...]:
    """The GPUs TensorFlow sees, without initialising them (so `tf.config` can still
    configure them afterwards)."""
    gpus = []
    for device in tf.config.list_physical_devices("GPU"):
        try:
            details = tf.config.experimental.get_device_details(device)
        except (ValueError, RuntimeError, tf.errors.OpError):
            details = {}
        cc = details.get("compute_capability")
        gpus.append(
            GpuDevice(str(details.get("device_name", device.name)), tuple(cc) if cc else None)
        )
    return tuple(gpus)


def driver_cuda_version(
    library: str = CUDA_DRIVER_LIBRARY,
) -> tuple[CudaVersion | None, str | None]:
    """The newest CUDA version the NVIDIA driver supports (cuDriverGetVersion), or None and
    the reason it could not be read.

    Example:
      >>> driver_cuda_version()  # doctest: +SKIP
      ((13, 0), None)
    """
    try:
        cuda = ctypes.CDLL(library)
    except OSError as err:
        return None, f"{library} cannot be loaded: {err}"
    try:
        get_version = cuda.cuDriverGetVersion
    except AttributeError:
        return None, f"{library} has no cuDriverGetVersion"
    get_version.argtypes = [ctypes.POINTER(ctypes.c_int)]
    get_version.restype = ctypes.c_int
    value = ctypes.c_int(0)
    result = get_version(ctypes.byref(value))
    if result != 0 or value.value <= 0:
        return None, f"cuDriverGetVersion returned error {result}"
    return from_driver_api_version(value.value), None
