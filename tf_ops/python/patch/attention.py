"""Attention under `tf_ops.patch_keras()`: Keras's ``dot_product_attention`` (what
``MultiHeadAttention`` and keras-hub's attention layers call) runs ``tf_ops.attention``,
the fused op that keeps no ``[batch, heads, T, S]`` tensor, and keras-hub's layers are
told a fused attention op is available, so they call it.

- ``keras.ops.dot_product_attention`` on TensorFlow: every argument Keras takes, with
  Keras's semantics (its dtype promotion, causal alignment and fully masked rows);
  ``flash_attention=True`` (or ``keras.config.enable_flash_attention()``) no longer
  raises, and ``attn_logits_soft_cap`` (which Keras's TensorFlow backend refuses) is the
  op's `softcap`. Grouped heads are not repeated (Keras repeats them; with one KV head its
  einsum fails, the op's does not). Keras's own code runs for what the op does not take:
  a non-boolean mask, a scale or cap that is a tensor, inputs that are not floating or
  not of rank 4.
- keras-hub: its layers call ``ops.dot_product_attention`` only when
  ``fused_attention_op_available()`` is true (False on TensorFlow), some also ask
  ``self._use_fused_attention_op()`` (False on a CPU). Each module that imports the first
  and each class that defines the second is found in keras-hub's sources (`hub_targets`:
  no list kept by hand); under the patch both say yes for a layer without attention
  dropout (the fused path has none: such a layer keeps keras-hub's own path).
"""

from __future__ import annotations

import functools
import importlib.util
import math
import pathlib
import re
import sys
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tf_ops.python.attention import functions as attention_fn
from tf_ops.python.patch import keras_hub_masks
from tf_ops.python.patch.keras_layers import floating

MODELS = "keras_hub.src.models"


def _static_number(value: Any) -> float | None:
    """A Python float for a number or a constant scalar tensor; None otherwise."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    found = tf.get_static_value(value) if tf.is_tensor(value) else value
    try:
        return float(found) if found is not None and np.ndim(found) == 0 else None
    except (TypeError, ValueError):
        return None


def make_dot_product_attention(original: Callable) -> Callable:
    """Keras's TensorFlow ``dot_product_attention`` as one ``TfOps>Attention`` forward and
    one ``TfOps>AttentionGrad`` backward."""

    @functools.wraps(original)
    def dot_product_attention(query, key, value, bias=None, mask=None, scale=None,
                              is_causal=False, flash_attention=None,
                              attn_logits_soft_cap=None):
        def keras_own():
            return original(query, key, value, bias=bias, mask=mask, scale=scale,
                            is_causal=is_causal, flash_attention=None if flash_attention
                            is None else False, attn_logits_soft_cap=attn_logits_soft_cap)

        q, k, v = (tf.convert_to_tensor(t) for t in (query, key, value))
        if (q.shape.rank != 4 or k.shape.rank != 4 or v.shape.rank != 4
                or not isinstance(is_causal, bool)
                or not all(floating(t) for t in (q, k, v))):
            return keras_own()
        heads, kv_heads, head_dim = q.shape[2], k.shape[2], k.shape[-1]
        if heads is None or kv_heads is None or head_dim is None or heads % kv_heads:
            return keras_own()
        scale_value = 1.0 / math.sqrt(head_dim) if scale is None else _static_number(scale)
        cap = _static_number(attn_logits_soft_cap)
        if scale_value is None or (attn_logits_soft_cap is not None and cap is None):
            return keras_own()
        if mask is not None:
            mask = tf.convert_to_tensor(mask)
            if mask.dtype != tf.bool:
                return keras_own()
            form = keras_hub_masks.causal_and_keys(mask, q, k)
            if form is not None:  # keras-hub's causal (+ padding) mask, without [B, T, S]
                (mask,), is_causal = form, True
        from keras.src import backend  # the dtype rules of the original

        compute = backend.result_type(q.dtype, k.dtype, v.dtype)
        q, k, v = (tf.cast(t, compute) for t in (q, k, v))
        if bias is not None:
            bias = tf.cast(bias, compute)
        return attention_fn.attention(q, k, v, mask=mask, bias=bias, causal=is_causal,
                                      scale=scale_value, softcap=cap or None)

    return dot_product_attention


def ops_namespaces() -> tuple[str, ...]:
    """The modules that hold Keras's ``ops.dot_product_attention`` (``keras.ops``,
    ``keras.ops.nn``, ...): each binds the function object, so each is patched."""
    from keras.src.ops import nn as ops_nn

    found = ops_nn.dot_product_attention
    return tuple(sorted(name for name, module in list(sys.modules.items())
                        if name.startswith("keras.") and module is not None
                        and getattr(module, "dot_product_attention", None) is found))


def make_ops_dot_product_attention(original: Callable) -> Callable:
    """``keras.ops.dot_product_attention``, which refuses ``attn_logits_soft_cap`` on any
    backend but JAX on a TPU before it reaches the backend: with a cap it goes to the
    (patched) backend function, which computes it; otherwise it is Keras's."""

    @functools.wraps(original)
    def dot_product_attention(query, key, value, bias=None, mask=None, scale=None,
                              is_causal=False, flash_attention=None,
                              attn_logits_soft_cap=None):
        from keras.src import backend
        from keras.src.backend import any_symbolic_tensors

        kwargs = dict(bias=bias, mask=mask, scale=scale, is_causal=is_causal,
                      flash_attention=flash_attention)
        if attn_logits_soft_cap is None or backend.backend() != "tensorflow":
            return original(query, key, value, attn_logits_soft_cap=attn_logits_soft_cap,
                            **kwargs)
        if any_symbolic_tensors((query, key, value)):  # shapes only: the cap keeps them
            return original(query, key, value, **kwargs)
        return backend.nn.dot_product_attention(
            query, key, value, attn_logits_soft_cap=attn_logits_soft_cap, **kwargs)

    return dot_product_attention


# ------------------------------------------------------------------- keras-hub ---


def _attention_dropout(layer: Any) -> float:
    for name in ("dropout", "_dropout", "attention_dropout"):
        value = getattr(layer, name, None)
        if isinstance(value, (int, float)):
            return float(value)
    return 0.0


def _calling_layer() -> Any:
    """The keras-hub layer whose method asks: the first caller up the stack whose `self`
    is a Keras layer (the patch's own wrappers are frames in between)."""
    import keras

    frame = sys._getframe(2)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, keras.layers.Layer):
            return owner
        frame = frame.f_back
    return None


def make_fused_available(original: Callable) -> Callable:
    """keras-hub's ``fused_attention_op_available()``: true for the layer asking, unless
    it has attention dropout."""

    @functools.wraps(original)
    def fused_attention_op_available():
        return original() or _attention_dropout(_calling_layer()) == 0.0

    return fused_attention_op_available


def make_use_fused(original: Callable) -> Callable:
    """A keras-hub layer's ``_use_fused_attention_op()``: also true on the CPU, without
    attention dropout."""

    @functools.wraps(original)
    def _use_fused_attention_op(self):
        return original(self) or _attention_dropout(self) == 0.0

    return _use_fused_attention_op


@functools.lru_cache(maxsize=None)
def hub_targets() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(modules whose attention asks ``fused_attention_op_available``, "module:Class"
    targets of ``_use_fused_attention_op``), read from keras-hub's installed sources
    without importing it; empty where keras-hub is not installed."""
    spec = importlib.util.find_spec("keras_hub")
    if spec is None or not spec.submodule_search_locations:
        return (), ()
    root = pathlib.Path(list(spec.submodule_search_locations)[0])
    modules, methods = [], []
    for path in sorted((root / "src" / "models").rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "fused_attention_op_available()" not in text:
            continue
        module = ".".join(("keras_hub",) + path.relative_to(root).with_suffix("").parts)
        modules.append(module)
        classes = list(re.finditer(r"^class (\w+)\(", text, re.M))
        for found in re.finditer(r"^    def _use_fused_attention_op\(self\)", text, re.M):
            owner = [c.group(1) for c in classes if c.start() < found.start()][-1]
            methods.append(f"{module}:{owner}")
    return tuple(modules), tuple(methods)


# ------------------------------------------------------------------- the report ---

FUSED = "flash attention in TfOps>Attention: no [batch, heads, T, S] tensor"


def describe_layer(layer: Any) -> tuple[str, str] | None:
    """("fused" | "left", why) for an attention layer (Keras's MultiHeadAttention, a
    keras-hub layer that asks for the fused op), None for other layers."""
    from tf_ops.python.patch import state

    import keras

    if isinstance(layer, keras.layers.MultiHeadAttention):
        if _attention_dropout(layer) > 0:  # Keras computes the weights to drop them
            if state.active("softmax"):
                return "fused", ("scale + mask + softmax in one op (attention dropout: "
                                 "Keras keeps the weights; its projections are Keras's)")
            return "left", "attention dropout, and the softmax family is not selected"
        if state.active("attention"):
            return "fused", FUSED + " (its projections are Keras's)"
        return "left", "the attention family is not selected"
    module = type(layer).__module__
    if module not in hub_targets()[0]:
        return None
    if not state.active("attention"):
        return "left", "the attention family is not selected"
    if _attention_dropout(layer) > 0:
        return "left", ("attention dropout: keras-hub's own path (einsum, softmax, dropout, "
                        "einsum), which the fused op does not drop from")
    return "fused", FUSED
