"""keras-hub's decoder masks as what they are: causal, and which keys are padding.

keras-hub's decoders build their self-attention mask as a ``[batch, T, S]`` tensor,
``minimum(merge_padding_and_attention_mask(x, padding_mask, None),
compute_causal_mask(batch, S, T))``, one per layer, and the attention layer expands it to
``[batch, 1, T, S]`` and casts it to bool for ``ops.dot_product_attention``. The fused op
never needs that tensor: it takes ``causal`` and a ``[batch, 1, 1, S]`` key mask. Under
the patch:

- ``compute_causal_mask`` (with no cache offset) and ``merge_padding_and_attention_mask``
  (with a padding mask and no attention mask) mark what they return (`MARK`), in every
  keras-hub module that imports them (found in the sources: `discover`);
- the patched ``dot_product_attention`` reads the graph back from its mask
  (`causal_and_keys`): only casts, one expand at the head axis, and the ``minimum`` of a
  marked padding mask and a marked causal mask are accepted, so the mask is that by how it
  was computed; then the op gets ``causal=True`` and the padding as its key mask, and the
  ``[batch, T, S]`` tensors are never computed (a graph prunes what nothing reads).

A key is kept where ``int32(padding_mask) > 0``: the values keras-hub's own attention on
TensorFlow (its masked ``Softmax``) keeps; the boolean cast of the ``minimum`` agrees for
every padding mask with no negative entry. In eager execution there is no graph to read:
the mask is used as it is.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import pathlib
from typing import Any, Callable

import tensorflow as tf

UTILS = "keras_hub.src.layers.modeling.transformer_layer_utils"
FUNCTIONS = ("compute_causal_mask", "merge_padding_and_attention_mask")
# The attribute a marked graph tensor carries: ("causal", T, S) or ("keys", padding_mask).
MARK = "_tf_ops_mask"
TARGET = "keras_hub.src:decoder masks (causal, padding)"


def _mark(tensor: Any, value: tuple) -> None:
    if isinstance(tensor, tf.Tensor) and not tf.executing_eagerly():
        try:
            setattr(tensor, MARK, value)
        except AttributeError:  # a tensor type without a __dict__: left unmarked
            pass


def _is_zero(value: Any) -> bool:
    found = tf.get_static_value(value) if tf.is_tensor(value) else value
    try:
        return found is not None and float(found) == 0.0
    except (TypeError, ValueError):
        return False


def make_compute_causal_mask(original: Callable) -> Callable:
    @functools.wraps(original)
    def compute_causal_mask(batch_size, input_length, output_length, cache_index=0):
        mask = original(batch_size, input_length, output_length, cache_index)
        if _is_zero(cache_index):  # query t sees keys s <= t: the op's causal
            _mark(mask, ("causal", output_length, input_length))
        return mask

    return compute_causal_mask


def make_merge_padding_and_attention_mask(original: Callable) -> Callable:
    @functools.wraps(original)
    def merge_padding_and_attention_mask(inputs, padding_mask, attention_mask):
        mask = original(inputs, padding_mask, attention_mask)
        if mask is not None and attention_mask is None and padding_mask is not None:
            _mark(mask, ("keys", padding_mask))
        return mask

    return merge_padding_and_attention_mask


FACTORIES = {"compute_causal_mask": make_compute_causal_mask,
             "merge_padding_and_attention_mask": make_merge_padding_and_attention_mask}


def replacement(original: Callable) -> Callable:
    """The marking version of whichever of the two functions `original` is."""
    return FACTORIES[original.__name__](original)


@functools.lru_cache(maxsize=None)
def discover() -> tuple[str, ...]:
    """``"module:function"`` for the two functions where keras-hub defines them and in
    every module of its sources that imports them by name (each binds its own copy),
    read without importing keras-hub."""
    spec = importlib.util.find_spec("keras_hub")
    if spec is None or not spec.submodule_search_locations:
        return ()
    root = pathlib.Path(list(spec.submodule_search_locations)[0])
    found = [f"{UTILS}:{name}" for name in FUNCTIONS]
    for path in sorted((root / "src").rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if not any(name in text for name in FUNCTIONS) or path.stem.endswith("_test"):
            continue
        module = ".".join(("keras_hub",) + path.relative_to(root).with_suffix("").parts)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module == UTILS:
                found += [f"{module}:{a.asname or a.name}" for a in node.names
                          if a.name in FUNCTIONS and (a.asname or a.name) == a.name]
    return tuple(dict.fromkeys(found))


# ------------------------------------------------------------- reading the graph ---


def _through_casts(tensor: Any) -> Any:
    while getattr(tensor, "op", None) is not None and tensor.op.type in ("Cast", "Identity"):
        tensor = tensor.op.inputs[0]
    return tensor


def _marked(tensor: Any, kind: str) -> tuple | None:
    mark = getattr(tensor, MARK, None)
    return mark if mark is not None and mark[0] == kind else None


def _length(value: Any) -> int | None:
    found = tf.get_static_value(value) if tf.is_tensor(value) else value
    try:
        return int(found) if found is not None else None
    except (TypeError, ValueError):
        return None


def causal_and_keys(mask: Any, query: tf.Tensor, key: tf.Tensor
                    ) -> tuple[tf.Tensor | None] | None:
    """``(keys,)`` where `mask` (bool, ``[batch, 1, T, S]``) is, by how it was computed,
    keras-hub's causal mask with (``keys``: ``[batch, 1, 1, S]`` bool) or without
    (``keys`` None) its padding mask; None for any other mask, or in eager execution."""
    if tf.executing_eagerly() or getattr(mask, "op", None) is None or mask.shape.rank != 4:
        return None
    expanded = _through_casts(mask)
    if expanded.op.type != "ExpandDims" or expanded.op.inputs[0].shape.rank != 3:
        return None
    if _length(expanded.op.inputs[1]) not in (1, -3):
        return None
    inner = _through_casts(expanded.op.inputs[0])
    causal, padding = _marked(inner, "causal"), None
    if causal is None and inner.op.type == "Minimum":
        a, b = (_through_casts(t) for t in inner.op.inputs)
        for first, second in ((a, b), (b, a)):
            if _marked(first, "causal") and _marked(second, "keys"):
                causal, padding = _marked(first, "causal"), _marked(second, "keys")[1]
    if causal is None:
        return None
    _, t, s = causal
    for mine, theirs in ((_length(t), query.shape[1]), (_length(s), key.shape[1])):
        if mine is not None and theirs is not None and mine != theirs:
            return None  # Keras's broadcast raises: leave the mask as it is
    if padding is None:
        return (None,)
    keys = tf.cast(padding, tf.int32) > 0
    return (keys[:, None, None, :],)
