"""`tf_ops.portable()`: build TensorFlow built-in ops instead of the ``TfOps>`` ops.

While it is active, every tf_ops function and layer builds its op's portable composite
(``activation/table.py``), the same function written with TensorFlow built-in ops in
forms that TFLite's builtin ops and ONNX (through tf2onnx) cover. A model exported then
loads where tf_ops is not installed: TF Serving, a process that never imports tf_ops,
the TFLite converter, tf2onnx. Outside it nothing changes.

Choices:
- The state is per thread (and per asyncio task): a ``contextvars.ContextVar``, like
  TensorFlow's own name and device scopes. A thread started inside the block does not
  inherit it; `model.export`, `tf.saved_model.save` and the TFLite converter trace in
  the calling thread.
- Nesting behaves as a stack: ``portable(False)`` inside a portable block builds the
  fused ops again until it exits, and each exit restores what was active before.
- It acts when a function is *traced*. Keras's ``model.export``,
  ``tf.saved_model.save(model)`` and ``TFLiteConverter.from_keras_model`` trace anew, so
  they see it; a `tf.function` traced before the block keeps its fused trace (TensorFlow
  reuses it): trace inside the block (a fresh `tf.function`, or
  ``get_concrete_function`` there).
"""

from __future__ import annotations

import contextlib
import contextvars

_ACTIVE = contextvars.ContextVar("tf_ops_portable", default=False)


class portable(contextlib.ContextDecorator):  # noqa: N801  (a context manager, named as one)
    """Builds TensorFlow built-in ops instead of the fused ``TfOps>`` ops.

    Use it around whatever traces the model for export: the result runs without the
    tf_ops library (SavedModel in any TensorFlow process, TFLite with builtin ops only,
    ONNX through tf2onnx), computing the same function. Also a decorator.

    Args:
      enabled: False turns it off again inside an enclosing ``portable()`` block.

    Example:
      >>> model = keras.Sequential([keras.Input((4,)), tf_ops.layers.GELU()])
      >>> with tf_ops.portable():
      ...     model.export(export_dir)  # doctest: +SKIP
      >>> with tf_ops.portable():
      ...     tf_ops.is_portable()
      True
    """

    def __init__(self, enabled: bool = True) -> None:
        self._enabled = bool(enabled)
        self._tokens: list[contextvars.Token] = []

    def __enter__(self) -> "portable":
        self._tokens.append(_ACTIVE.set(self._enabled))
        return self

    def __exit__(self, *exc) -> None:
        _ACTIVE.reset(self._tokens.pop())


def is_portable() -> bool:
    """Whether `tf_ops.portable()` is active in this thread.

    Example:
      >>> tf_ops.is_portable()
      False
    """
    return _ACTIVE.get()
