"""Loads the compiled op library, once per process.

The library is the extension-named file ``tf_ops/_tf_ops.so``. It is located with
``importlib.util.find_spec`` rather than ``os.path.dirname(__file__)`` so that it is
found in the source tree (``make build``), in an installed wheel and in an editable
install alike. Loading the same path again returns TensorFlow's cached module; a
second copy at another path would register every kernel twice, so there is one
loader and it remembers what it loaded.
"""

from __future__ import annotations

import importlib.util
import threading
import types

import tensorflow as tf

LIBRARY_MODULE = "tf_ops._tf_ops"

_lock = threading.Lock()
_library: types.ModuleType | None = None


def library_path() -> str:
    """Returns the path of the compiled op library.

    Raises:
      ImportError: the library has not been built; the message says how to build it.

    Example:
      >>> tf_ops.python.library.library_path()  # doctest: +SKIP
      '/src/tf_ops/tf_ops/_tf_ops.so'
    """
    spec = importlib.util.find_spec(LIBRARY_MODULE)
    if spec is None or spec.origin is None:
        raise ImportError(
            "tf_ops: the op library (tf_ops/_tf_ops.so) is not built. Run `make build` "
            "in the tf_ops source tree, or install the package with "
            "`pip install --no-build-isolation .`."
        )
    return spec.origin


def load_library() -> types.ModuleType:
    """Loads the op library (once; later calls return the same module).

    Returns:
      The module `tf.load_op_library` makes, with one generated function per op,
      e.g. ``tf_ops_leaky_relu`` for ``TfOps>LeakyRelu``.

    Example:
      >>> ops = load_library()
      >>> ops.tf_ops_leaky_relu([-1.0, 2.0], alpha=0.1)  # doctest: +SKIP
    """
    global _library
    with _lock:
        if _library is None:
            _library = tf.load_op_library(library_path())
        return _library
