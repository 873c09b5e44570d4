"""Loads the compiled op libraries, once per process, and says what they were built with.

The op library is the extension-named file ``tf_ops/_tf_ops.so``: every op, its CPU
kernels and XLA lowerings. It is located with ``importlib.util.find_spec`` rather than
``os.path.dirname(__file__)`` so that it is found in the source tree (``make build``),
in an installed wheel and in an editable install alike. Loading the same path again
returns TensorFlow's cached module; a second copy at another path would register every
kernel twice, so there is one loader and it remembers what it loaded.

The GPU kernels are a second library beside it, ``_tf_ops_gpu.so`` (kernels, no ops),
loaded right after it with ``tf.load_library`` only where they can run: TensorFlow sees
a GPU, the NVIDIA driver supports the CUDA runtime linked into them, and every visible
GPU has code in them (``gpu.py`` decides). Elsewhere the ops have CPU kernels only, so
TensorFlow runs them on the CPU, and when a GPU is visible one `GpuFallbackWarning` says
why and what to do. `gpu_status()` tells the outcome.

CMake writes ``_tf_ops.build.json`` next to the library: the TensorFlow version it
was compiled against, whether the GPU library was built and whether XLA lowerings are
in it; ``_tf_ops_gpu.build.json`` gives the GPU library's CUDA runtime and architectures. The
library binds to TensorFlow internals with no stable ABI, so a library built for
another TensorFlow is refused with both versions named, before it is loaded (where
it would fail with an undefined symbol, or worse). A library without that file (one
built by Bazel, say) is loaded unchecked.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import threading
import types
import warnings

import tensorflow as tf

from tf_ops.python.core import gpu

LIBRARY_MODULE = "tf_ops._tf_ops"
BUILD_INFO_SUFFIX = ".build.json"
# The GPU library's name: the op library's with this after its stem.
GPU_LIBRARY_SUFFIX = "_gpu"

# What every loading error tells the user to do.
REBUILD_ADVICE = (
    "Build it against the TensorFlow you run: `make build` in the tf_ops source "
    "tree, or, from the source tree, `pip install --no-build-isolation "
    "--force-reinstall --no-deps .` with that TensorFlow and scikit-build-core "
    "installed (the README's 'Install' section says more)."
)

_lock = threading.Lock()
_library: types.ModuleType | None = None
_gpu_status: gpu.GpuStatus | None = None


@dataclasses.dataclass(frozen=True)
class BuildInfo:
    """How the op library was built (from ``_tf_ops.build.json``).

    Attributes:
      tensorflow_version: ``tf.__version__`` of the TensorFlow it was compiled against.
      cuda: whether the CUDA kernels were built (the GPU library beside it); whether
        they run here is `gpu_status()`'s answer.
      xla: whether it contains the XLA lowerings (without them, the wrappers use
        TensorFlow composites inside ``jit_compile`` functions).
      cuda_runtime: the CUDA runtime linked into the GPU library, e.g. ``"13.0"`` (None
        without one, or without its build info).
      cuda_min_driver: the oldest NVIDIA driver that runtime runs on, e.g. ``"580"``
        (GPUs that run the PTX need the toolkit's own driver; `gpu_status()` checks).
      cuda_architectures: the CUDA architectures compiled, e.g. ``("90-real", "90-virtual")``.
    """

    tensorflow_version: str
    cuda: bool
    xla: bool
    cuda_runtime: str | None = None
    cuda_min_driver: str | None = None
    cuda_architectures: tuple[str, ...] = ()


def library_path() -> str:
    """Returns the path of the compiled op library.

    Raises:
      ImportError: the library has not been built; the message says how to build it.

    Example:
      >>> tf_ops.library_path()  # doctest: +SKIP
      '/src/tf_ops/tf_ops/_tf_ops.so'
    """
    spec = importlib.util.find_spec(LIBRARY_MODULE)
    if spec is None or spec.origin is None:
        raise ImportError(
            "tf_ops: the op library (tf_ops/_tf_ops.so) is not built. " + REBUILD_ADVICE
        )
    return spec.origin


def build_info_path(library: str | None = None) -> str:
    """Returns where the build info of `library` (default: `library_path()`) lives."""
    library = library_path() if library is None else library
    stem = os.path.basename(library).split(".", 1)[0]  # "_tf_ops"
    return os.path.join(os.path.dirname(library), stem + BUILD_INFO_SUFFIX)


def gpu_library_path(library: str | None = None) -> str:
    """Returns where the GPU library of `library` (default: `library_path()`) lives:
    beside it, named after it (``_tf_ops.so`` -> ``_tf_ops_gpu.so``)."""
    library = library_path() if library is None else library
    stem, _, rest = os.path.basename(library).partition(".")
    return os.path.join(os.path.dirname(library), f"{stem}{GPU_LIBRARY_SUFFIX}.{rest}")


def _read_build_info(path: str, keys: tuple[str, ...]) -> dict | None:
    """The JSON object at `path` (None when there is no such file), with `keys` checked."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for key in keys:
            data[key]  # noqa: B018  KeyError when missing
        return data
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ImportError(
            f"tf_ops: cannot read the build info {path}: {err!r}. " + REBUILD_ADVICE
        ) from err


def _op_library_build_info(library: str) -> BuildInfo | None:
    data = _read_build_info(build_info_path(library), ("tensorflow_version", "cuda", "xla"))
    if data is None:
        return None
    return BuildInfo(
        tensorflow_version=str(data["tensorflow_version"]),
        cuda=bool(data["cuda"]),
        xla=bool(data["xla"]),
    )


def _gpu_build(library: str) -> tuple[str, gpu.GpuBuild] | None:
    """The GPU library's TensorFlow version and build, or None without its build info."""
    data = _read_build_info(
        build_info_path(library), ("tensorflow_version", "cuda_runtime", "cuda_architectures")
    )
    if data is None:
        return None
    try:
        build = gpu.GpuBuild(
            library=library,
            cuda_runtime=gpu.parse_version(str(data["cuda_runtime"])),
            architectures=tuple(str(a) for a in data["cuda_architectures"]),
        )
    except (ValueError, TypeError) as err:
        raise ImportError(
            f"tf_ops: cannot read the build info {build_info_path(library)}: {err!r}. "
            + REBUILD_ADVICE
        ) from err
    return str(data["tensorflow_version"]), build


def build_info(library: str | None = None) -> BuildInfo | None:
    """Returns how the op library (and its GPU library) was built, or None when it has
    no build info (e.g. a library built by Bazel).

    Raises:
      ImportError: a build info file is unreadable or malformed.

    Example:
      >>> tf_ops.build_info()  # doctest: +SKIP
      BuildInfo(tensorflow_version='2.21.0', cuda=True, xla=True, cuda_runtime='13.0',
                cuda_min_driver='580', cuda_architectures=('75-real', ..., '90-virtual'))
    """
    library = library_path() if library is None else library
    info = _op_library_build_info(library)
    if info is None or not info.cuda:
        return info
    gpu_build = _gpu_build(gpu_library_path(library))
    if gpu_build is None:
        return info
    build = gpu_build[1]
    return dataclasses.replace(
        info,
        cuda_runtime=gpu.version_text(build.cuda_runtime),
        cuda_min_driver=build.min_driver,
        cuda_architectures=build.architectures,
    )


def _check_tensorflow_version(library: str, info: BuildInfo | None) -> None:
    if info is not None and info.tensorflow_version != tf.__version__:
        raise ImportError(
            f"tf_ops: the op library {library} was built against TensorFlow "
            f"{info.tensorflow_version}, but TensorFlow {tf.__version__} is installed; "
            "it binds to TensorFlow internals and must be rebuilt (a pip-installed tf_ops "
            f"requires TensorFlow {info.tensorflow_version}: `pip check` names it). "
            + REBUILD_ADVICE
        )


def load_library() -> types.ModuleType:
    """Loads the op library (once; later calls return the same module).

    Returns:
      The module `tf.load_op_library` makes, with one generated function per op,
      e.g. ``tf_ops_leaky_relu`` for ``TfOps>LeakyRelu``.

    Raises:
      ImportError: the library is missing, was built against another TensorFlow
        version, or fails to load (e.g. an undefined symbol); the message names
        the versions involved and the command that rebuilds it.

    Example:
      >>> ops = tf_ops.load_library()
      >>> ops.tf_ops_leaky_relu([-1.0, 2.0], alpha=0.1)  # doctest: +SKIP
    """
    global _library, _gpu_status
    with _lock:
        if _library is None:
            path = library_path()
            info = _op_library_build_info(path)
            _check_tensorflow_version(path, info)
            try:
                library = tf.load_op_library(path)
            except (tf.errors.OpError, OSError) as err:
                built = info.tensorflow_version if info else "unknown (no build info)"
                raise ImportError(
                    f"tf_ops: cannot load the op library {path} (built against TensorFlow "
                    f"{built}; running TensorFlow {tf.__version__}): {err}. "
                    + REBUILD_ADVICE
                ) from err
            # The ops exist now; their GPU kernels, where they can run.
            _gpu_status = _load_gpu_kernels(path, info)
            if _gpu_status.should_warn:
                warnings.warn(_gpu_status.message, gpu.GpuFallbackWarning, stacklevel=2)
            _library = library
        return _library


def gpu_status() -> gpu.GpuStatus:
    """Says whether tf_ops's GPU kernels are active in this process and, if not, why.

    Decided once, when the library loads (importing tf_ops loads it): the GPU kernels
    are loaded where TensorFlow sees a GPU, the NVIDIA driver supports the CUDA runtime
    they were built with, and every visible GPU has code in them. Elsewhere TensorFlow
    runs the ops on the CPU.

    Example:
      >>> status = tf_ops.gpu_status()
      >>> print(status.message)  # doctest: +SKIP
      tf_ops: GPU kernels not loaded. TensorFlow runs tf_ops ops on the CPU (correct
      results, but slower than a GPU kernel, with copies between the devices). The
      NVIDIA driver supports CUDA 12.4, but the GPU kernels are linked with the CUDA 13.0
      runtime, which needs NVIDIA driver 580 or newer (CUDA 13.0). Update the NVIDIA
      driver to 580 or newer, or build tf_ops with a CUDA 12 toolkit, ...
    """
    load_library()
    assert _gpu_status is not None
    return _gpu_status


def _load_gpu_kernels(library: str, info: BuildInfo | None) -> gpu.GpuStatus:
    """Loads the GPU library of `library` where its kernels can run; returns the outcome."""
    gpus = gpu.visible_gpus()
    names = tuple(map(str, gpus))

    def unavailable(reason: str, remedy: str = "") -> gpu.GpuStatus:
        return gpu.GpuStatus(active=False, reason=reason, remedy=remedy, gpus=names)

    if info is None:
        return unavailable(
            "The op library has no build info (a Bazel build?); only CMake builds GPU kernels.",
            f"Build with CMake and nvcc: `make build` or `pip install --no-build-isolation .` "
            f"({gpu.README_GPU}).",
        )
    if not info.cuda:
        return unavailable(
            "This tf_ops was built without CUDA kernels (no nvcc was found, or TF_OPS_CUDA=OFF).",
            f"Rebuild it with a CUDA toolkit's nvcc on PATH and TF_OPS_CUDA=ON ({gpu.README_GPU}).",
        )
    path = gpu_library_path(library)
    try:
        found = _gpu_build(path) if os.path.exists(path) else None
    except ImportError as err:
        return unavailable(str(err))
    if found is None:
        missing = path if not os.path.exists(path) else build_info_path(path)
        return unavailable(
            f"tf_ops was built with CUDA kernels, but {missing} is missing.", REBUILD_ADVICE
        )
    built_against, build = found
    if built_against != tf.__version__:
        return unavailable(
            f"The GPU library {path} was built against TensorFlow {built_against}, but "
            f"TensorFlow {tf.__version__} is installed.",
            REBUILD_ADVICE,
        )
    if not gpus:
        return dataclasses.replace(
            unavailable("TensorFlow sees no GPU."),
            cuda_runtime=gpu.version_text(build.cuda_runtime),
            min_driver=build.min_driver,
            library=path,
        )
    driver, driver_error = gpu.driver_cuda_version()
    status = gpu.decide(build, gpus, driver, driver_error)
    if not status.active:
        return status
    try:
        tf.load_library(path)
    except (tf.errors.OpError, OSError) as err:
        return dataclasses.replace(
            status, active=False, reason=f"Loading {path} failed: {err}.", remedy=REBUILD_ADVICE
        )
    return status
