"""Loads the compiled op library, once per process, and says what it was built with.

The library is the extension-named file ``tf_ops/_tf_ops.so``. It is located with
``importlib.util.find_spec`` rather than ``os.path.dirname(__file__)`` so that it is
found in the source tree (``make build``), in an installed wheel and in an editable
install alike. Loading the same path again returns TensorFlow's cached module; a
second copy at another path would register every kernel twice, so there is one
loader and it remembers what it loaded.

CMake writes ``_tf_ops.build.json`` next to the library: the TensorFlow version it
was compiled against and whether CUDA kernels and XLA lowerings are in it. The
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

import tensorflow as tf

LIBRARY_MODULE = "tf_ops._tf_ops"
BUILD_INFO_SUFFIX = ".build.json"

# What every loading error tells the user to do.
REBUILD_ADVICE = (
    "Build it against the TensorFlow you run: `make build` in the tf_ops source "
    "tree, or, from the source tree, `pip install --no-build-isolation "
    "--force-reinstall --no-deps .` with that TensorFlow and scikit-build-core "
    "installed (the README's 'Install' section says more)."
)

_lock = threading.Lock()
_library: types.ModuleType | None = None


@dataclasses.dataclass(frozen=True)
class BuildInfo:
    """How the op library was built (from ``_tf_ops.build.json``).

    Attributes:
      tensorflow_version: ``tf.__version__`` of the TensorFlow it was compiled against.
      cuda: whether it contains the CUDA kernels.
      xla: whether it contains the XLA lowerings (without them, the wrappers use
        TensorFlow composites inside ``jit_compile`` functions).
    """

    tensorflow_version: str
    cuda: bool
    xla: bool


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


def build_info(library: str | None = None) -> BuildInfo | None:
    """Returns how the op library was built, or None when it has no build info
    (e.g. a library built by Bazel).

    Raises:
      ImportError: the build info file is unreadable or malformed.

    Example:
      >>> tf_ops.build_info()  # doctest: +SKIP
      BuildInfo(tensorflow_version='2.21.0', cuda=True, xla=True)
    """
    path = build_info_path(library)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return BuildInfo(
            tensorflow_version=str(data["tensorflow_version"]),
            cuda=bool(data["cuda"]),
            xla=bool(data["xla"]),
        )
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ImportError(
            f"tf_ops: cannot read the build info {path}: {err!r}. " + REBUILD_ADVICE
        ) from err


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
    global _library
    with _lock:
        if _library is None:
            path = library_path()
            info = build_info(path)
            _check_tensorflow_version(path, info)
            try:
                _library = tf.load_op_library(path)
            except (tf.errors.OpError, OSError) as err:
                built = info.tensorflow_version if info else "unknown (no build info)"
                raise ImportError(
                    f"tf_ops: cannot load the op library {path} (built against TensorFlow "
                    f"{built}; running TensorFlow {tf.__version__}): {err}. "
                    + REBUILD_ADVICE
                ) from err
        return _library
