"""One line of the patch table (`table.py`): an attribute of Keras or keras-hub that
`tf_ops.patch_keras()` replaces, the family it belongs to, and what runs instead."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

# The families `patch_keras(only=...)` selects, and what each one patches.
FAMILIES: dict[str, str] = {
    "activation": "activations by name, function or layer (keras.activations, Activation, "
                  "ReLU, LeakyReLU, ELU), and an Add with the ReLU after it in one op",
    "dense": "Dense's bias + activation in one op: its own activation, or an activation "
             "layer right after it; EinsumDense's bias of several axes in one BiasAdd",
    "batch_norm": "BatchNormalization, fused with an activation layer right after it; at "
                  "inference folded into a convolution right before it",
    "conv": "Conv2D with one group per input channel (ConvNeXt's) as TensorFlow's "
            "depthwise convolution, not the XLA program Keras runs grouped convolutions as",
    "norm": "LayerNormalization, RMSNormalization, keras-hub's RMS and layer norms, and "
            "GroupNormalization (with the activation after it)",
    "softmax": "softmax: the Softmax layer (masks), the softmax activation",
    "attention": "attention without the [batch, heads, T, S] tensors: "
                 "keras.ops.dot_product_attention (MultiHeadAttention) and keras-hub's "
                 "attention layers",
    "loss": "sparse categorical cross-entropy",
    "rotary": "keras-hub's rotary position embedding (RotaryEmbedding, LlamaRotaryEmbedding)",
    "lm_head": "keras-hub's causal LMs' head (tied or not) and its loss, in fit",
    "optimizer": "Adam's (and AdamW's) update of each variable in one fused loop "
                 "(Keras's own update, compiled by XLA)",
}


@dataclasses.dataclass(frozen=True)
class Entry:
    """One replaced attribute.

    Attributes:
      target: ``"module:Class.attribute"`` (or ``"module:function"``) of what is
        replaced, as the patch imports it.
      families: the families it serves; installed while any of them is active.
      replacement: ``original -> replacement``: makes what is installed from what was
        there (the replacement falls back to it for what tf_ops does not cover). None
        for an entry that is not patched yet (`pending`).
      does: what runs instead, in a line (the report's text).
      label: how the report names the target (default: from `target`).
      requires: the package that must be importable (``"keras_hub"``); otherwise the
        entry is left, and the report says so.
      pending: for an entry not patched yet: why, and what will land it.
      discover: for an entry that stands for classes found when it is installed (their
        ``target`` is then a name, not an attribute): returns the targets
        (``"module:Class.call"``), each replaced by `replacement` of its own original.
    """

    target: str
    families: tuple[str, ...]
    replacement: Callable[[Any], Any] | None
    does: str
    label: str = ""
    requires: str = "keras"
    pending: str = ""
    discover: Callable[[], tuple[str, ...]] | None = None

    def __post_init__(self):
        unknown = set(self.families) - set(FAMILIES)
        if unknown:
            raise ValueError(f"unknown families {sorted(unknown)} in patch entry {self.target}")

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        module, _, path = self.target.partition(":")
        package = module.split(".")[0]
        return f"{package}.{path}"
