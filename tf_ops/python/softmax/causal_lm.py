"""Training a causal language model whose head is tied to its token embedding with
`linear_cross_entropy`: the logits are never held whole.

Two pieces, the second made of the first:

- `head_cross_entropy(head, hidden, labels, sample_weight)`: Keras's
  ``SparseCategoricalCrossentropy(from_logits=True)`` of ``head(hidden, reverse=True)``
  (its reduction, ``sum_over_batch_size``: the weighted sum over the number of labels, or
  over the labels not ignored with ``ignore_class``), computed by `linear_cross_entropy`
  from the head's weights. `head` is keras-hub's / Keras's ``ReversibleEmbedding`` (tied
  or not), a ``keras.layers.Embedding`` (tied) or a ``keras.layers.Dense`` without
  activation. What `tf_ops.patch_keras()` calls for keras-hub's LM heads.
- `LinearCrossEntropyCausalLM(backbone)`: a ``keras.Model`` for ``model.fit`` whose
  ``call`` returns the backbone's hidden states and whose ``compute_loss`` is the above
  on the backbone's token embedding; ``logits(hidden)`` gives the head's logits where
  they are wanted (generation). Data as keras-hub's ``CausalLM`` preprocessors give it:
  ``x`` the backbone's inputs, ``y`` the next tokens, ``sample_weight`` the padding mask.
"""

from __future__ import annotations

from typing import Optional

import keras
import tensorflow as tf

from tf_ops.python.softmax.linear_cross_entropy import linear_cross_entropy

TensorLike = tf.types.experimental.TensorLike


def head_weights(head: keras.layers.Layer) -> tuple[tf.Variable, bool, Optional[tf.Variable]]:
    """(kernel, transpose_kernel, bias) of an LM head layer, as `linear_cross_entropy`
    takes them: ``[V, H]`` with ``transpose_kernel=True`` for a tied embedding.

    Example:
      >>> import keras
      >>> emb = keras.layers.Embedding(100, 8); emb.build((None,))
      >>> head_weights(emb)[1]
      True
    """
    if getattr(head, "quantization_mode", None):
        raise ValueError(f"head_weights: a quantized head ({head.quantization_mode}) is not "
                         "supported")
    if getattr(head, "logit_soft_cap", None) is not None:
        raise ValueError("head_weights: a head with logit_soft_cap is not supported (the "
                         "soft cap is not part of linear_cross_entropy)")
    if isinstance(head, keras.layers.Embedding):  # ReversibleEmbedding is one
        if getattr(head, "tie_weights", True):
            return head.embeddings, True, None
        return head.reverse_embeddings, False, None
    if isinstance(head, keras.layers.Dense):
        if head.activation not in (None, keras.activations.linear):
            raise ValueError(f"head_weights: a Dense head must have no activation, got "
                             f"{head.activation}")
        return head.kernel, False, head.bias
    raise ValueError(f"head_weights: expected an Embedding (tied head) or a Dense layer, got "
                     f"{type(head).__name__}")


def head_cross_entropy(head: keras.layers.Layer, hidden: TensorLike, labels: TensorLike,
                       sample_weight: Optional[TensorLike] = None, *,
                       ignore_class: Optional[int] = None, label_smoothing: float = 0.0,
                       z_loss: float = 0.0, chunk_size: Optional[int | str] = None,
                       return_argmax: bool = False) -> tf.Tensor | tuple[tf.Tensor, tf.Tensor]:
    """``keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=...)(
    labels, head(hidden, reverse=True), sample_weight)`` without the logits.

    Args:
      head: the LM head (see `head_weights`).
      hidden: ``[..., H]`` hidden states.
      labels: integer ``[...]``.
      sample_weight: optional, broadcastable to the labels' shape (a padding mask).
      ignore_class: labels equal to it count neither in the sum nor in the divisor.
      label_smoothing, z_loss, chunk_size, return_argmax: as `linear_cross_entropy`
        (with ``return_argmax``: ``(loss, argmax)``, what an accuracy metric needs).

    Example:
      >>> import keras, tensorflow as tf, tf_ops
      >>> emb = keras.layers.Embedding(50, 8); emb.build((None,))
      >>> h = tf.zeros([2, 3, 8])  # zero logits: the loss is log(50)
      >>> round(float(tf_ops.head_cross_entropy(emb, h, tf.zeros([2, 3], tf.int32))), 3)
      3.912
    """
    kernel, transpose, bias = head_weights(head)
    h = tf.convert_to_tensor(hidden)
    reverse_dtype = getattr(head, "reverse_dtype", None)
    if reverse_dtype is not None:
        h = tf.cast(h, reverse_dtype)
    kwargs = dict(transpose_kernel=transpose, label_smoothing=label_smoothing, z_loss=z_loss,
                  sample_weight=sample_weight, chunk_size=chunk_size,
                  return_argmax=return_argmax)
    if ignore_class is not None:
        # Keras divides by the labels not ignored: the op's own mean.
        return linear_cross_entropy(h, kernel, labels, bias, ignore_index=ignore_class,
                                    reduction="mean", **kwargs)
    # Keras's sum_over_batch_size: over every label, weights or not. No label is ignored
    # (an index no label can equal).
    result = linear_cross_entropy(h, kernel, labels, bias, ignore_index=-(2**31),
                                  reduction="sum", **kwargs)
    total = result[0] if return_argmax else result
    loss = tf.math.divide_no_nan(total, tf.cast(tf.size(labels), total.dtype))
    return (loss, result[1]) if return_argmax else loss


@keras.saving.register_keras_serializable(package="tf_ops")
class LinearCrossEntropyCausalLM(keras.Model):
    """A causal LM for ``model.fit`` whose tied head and loss are `linear_cross_entropy`.

    Args:
      backbone: a model returning hidden states ``[B, T, H]`` (a keras-hub backbone).
      head: the name of the backbone's attribute that is the LM head (keras-hub:
        ``"token_embedding"``, a ``ReversibleEmbedding``).
      ignore_class, label_smoothing, z_loss, chunk_size: as `head_cross_entropy`.

    ``compile`` it without a loss (the model's own is used); ``fit(x, y, sample_weight)``
    with keras-hub's preprocessed data. The loss equals keras-hub's ``CausalLM`` (logits
    ``token_embedding(h, reverse=True)``, Keras's ``SparseCategoricalCrossentropy(
    from_logits=True)``), without holding ``[B, T, V]`` logits.

    Example:
      >>> import keras_hub
      >>> backbone = keras_hub.models.GPT2Backbone(
      ...     vocabulary_size=1000, num_layers=2, num_heads=2, hidden_dim=64,
      ...     intermediate_dim=128, max_sequence_length=128)
      >>> lm = LinearCrossEntropyCausalLM(backbone)
      >>> lm.compile(keras.optimizers.Adam(1e-3))
      >>> # lm.fit(x={"token_ids": ..., "padding_mask": ...}, y=next_ids, sample_weight=mask)
    """

    def __init__(self, backbone: keras.Model, head: str = "token_embedding",
                 ignore_class: Optional[int] = None, label_smoothing: float = 0.0,
                 z_loss: float = 0.0, chunk_size: Optional[int] = None, **kwargs):
        super().__init__(**kwargs)
        if not hasattr(backbone, head):
            raise ValueError(f"LinearCrossEntropyCausalLM: the backbone has no attribute "
                             f"{head!r} (its LM head)")
        self.backbone = backbone
        self.head = head
        self.ignore_class = ignore_class
        self.label_smoothing = label_smoothing
        self.z_loss = z_loss
        self.chunk_size = chunk_size

    @property
    def head_layer(self) -> keras.layers.Layer:
        return getattr(self.backbone, self.head)

    def call(self, inputs, training=None):
        return self.backbone(inputs, training=training)

    def logits(self, hidden: TensorLike) -> tf.Tensor:
        """The head's logits of `hidden` (materialised: for generation, not training)."""
        layer = self.head_layer
        if isinstance(layer, keras.layers.Dense):
            return layer(hidden)
        return layer(hidden, reverse=True)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = head_cross_entropy(self.head_layer, y_pred, y, sample_weight,
                                  ignore_class=self.ignore_class,
                                  label_smoothing=self.label_smoothing, z_loss=self.z_loss,
                                  chunk_size=self.chunk_size)
        if self.losses:  # regularisers, as Keras adds them
            loss = loss + tf.add_n([tf.cast(r, loss.dtype) for r in self.losses])
        return loss

    def get_config(self) -> dict:
        return {"backbone": keras.saving.serialize_keras_object(self.backbone),
                "head": self.head, "ignore_class": self.ignore_class,
                "label_smoothing": self.label_smoothing, "z_loss": self.z_loss,
                "chunk_size": self.chunk_size, "name": self.name,
                "trainable": self.trainable}

    @classmethod
    def from_config(cls, config: dict) -> "LinearCrossEntropyCausalLM":
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)
