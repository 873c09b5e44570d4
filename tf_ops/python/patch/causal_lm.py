"""keras-hub's ``CausalLM`` trained by ``fit`` without ``[batch, length, vocab]`` logits.

keras-hub's causal LMs (``GPT2CausalLM``, ``LlamaCausalLM``, ``GemmaCausalLM``, ...) are
functional models whose output is the logits ``backbone.token_embedding(backbone(inputs),
reverse=True)`` (its seq2seq LMs, ``BartSeq2SeqLM`` and others, are causal LMs whose head
reads the backbone's ``"decoder_sequence_output"``), and they define no ``compute_loss``:
Keras's ``train_step`` calls the model (the logits), then ``compute_loss(x, y,
y_pred=logits, sample_weight)``, the compiled loss (keras-hub's default
``SparseCategoricalCrossentropy(from_logits=True)``, ``sum_over_batch_size``) weighted by
the preprocessor's padding mask (``sample_weight``), plus the model's added losses. By the
time ``compute_loss`` runs, the logits exist and the tape holds them: replacing it cannot
avoid them. So the patched attribute is ``CausalLM.train_step`` (Keras's TensorFlow
trainer's, which ``CausalLM`` inherits), where the hidden states are still there: the
head's input (the model's own graph up to it), then `tf_ops.head_cross_entropy` of the
head (tied or not) with the compiled loss's ``ignore_class``; the rest is Keras's step
(the loss tracker, loss scaling, gradients, the optimizer, the metrics).

The compiled metrics take the logits (keras-hub's ``compile()`` adds a weighted
``SparseCategoricalAccuracy``). Where every one is such an accuracy (the argmax of the
logits against the labels), `linear_cross_entropy` reads each row's argmax from its chunk
of logits as they pass and the step updates the metrics from it: no logits again. Other
metrics get the logits, computed outside the tape, forward only, before the weights
change, as Keras's step would have them. A step
without logits at all is one of a model compiled without metrics: keras-hub's tasks compile
themselves when made, and Keras's ``compile()`` keeps the metrics of an earlier one, so make
the task with ``compile=False``, then ``compile(..., weighted_metrics=None)``.
``evaluate`` and ``predict`` are Keras's (the logits, no gradient).

Keras's own step runs where the result could differ (`reason_left`): a model whose output
is not ``head(h)``, `h` any tensor of its graph (a soft cap or anything after the head), a
head `head_weights` refuses (quantized, ``logit_soft_cap``, a Dense with an activation), a
compiled loss other than one ``SparseCategoricalCrossentropy(from_logits=True)`` (or the
``LossFunctionWrapper`` of its function) reduced ``sum_over_batch_size`` in float32 without
loss weights, and a class that overrides ``compute_loss``. Per step, the loss is computed
from the logits as Keras does where the labels or the sample weights are not of the shape
the op takes (labels of the hidden states' shape less the features, weights of the labels'
shape) or the hidden states carry a Keras mask.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import keras
import tensorflow as tf
from keras.src import tree
from keras.src.losses import loss as loss_module
from keras.src.losses.losses import LossFunctionWrapper, sparse_categorical_crossentropy
from keras.src.metrics.accuracy_metrics import sparse_categorical_accuracy
from keras.src.metrics.reduction_metrics import MeanMetricWrapper
from keras.src.trainers.compile_utils import CompileMetrics
from keras.src.trainers.data_adapters import data_adapter_utils
from keras.src.trainers.trainer import Trainer

from tf_ops.python.softmax.causal_lm import head_cross_entropy, head_weights

TRAIN_STEP = "keras_hub.src.models.causal_lm:CausalLM.train_step"


def _head(model: keras.Model) -> tuple[Any, keras.layers.Layer, dict] | None:
    """(h, head, the head's call kwargs) where `model`'s only output is ``head(h,
    **kwargs)``: an Embedding head called with ``reverse=True`` or a Dense head, `h` a
    tensor of the functional model's graph (the backbone's output, one of its outputs, a
    seq2seq LM's ``"decoder_sequence_output"``, or what the model computes from it: T5's
    rescaling before its tied head); else None (also for any structure this does not
    know). The step computes `h` by the model's own graph (`_hidden_model`)."""
    try:
        return _functional_head(model)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None


def _functional_head(model: keras.Model) -> tuple[Any, keras.layers.Layer, dict] | None:
    outputs = getattr(model, "outputs", None)
    if not outputs or len(outputs) != 1 or getattr(model, "_outputs_struct", None) is None:
        return None
    history = getattr(outputs[0], "_keras_history", None)
    if history is None:
        return None
    head, node_index, _ = history
    node = head._inbound_nodes[node_index]
    args, kwargs = node.arguments.args, node.arguments.kwargs
    if isinstance(head, keras.layers.Embedding):
        if kwargs != {"reverse": True}:
            return None
    elif not (isinstance(head, keras.layers.Dense) and not kwargs):
        return None
    if len(args) != 1 or getattr(args[0], "_keras_history", None) is None:
        return None
    return args[0], head, dict(kwargs)


_HIDDEN_MODEL = "_tf_ops_hidden_model"  # the model's attribute that keeps it


def _hidden_model(model: keras.Model, hidden: Any) -> keras.Model:
    """The functional model from `model`'s inputs to `hidden` (the head's input): its
    layers, called as `model` calls them. Kept out of Keras's tracking (not a layer of
    `model`, not saved)."""
    kept = model.__dict__.get(_HIDDEN_MODEL)
    if kept is None or kept[0] is not hidden:
        kept = (hidden, keras.Model(model.input, hidden))
        model.__dict__[_HIDDEN_MODEL] = kept
    return kept[1]


def _sparse_ignore_class(model: keras.Model) -> tuple[bool, Any]:
    """(whether the compiled loss is the one the op computes, its ignore_class)."""
    compiled = getattr(model, "_compile_loss", None)
    if compiled is None or compiled._user_loss_weights is not None:
        return False, None
    loss = compiled._user_loss
    if not (isinstance(loss, LossFunctionWrapper) and loss.fn is sparse_categorical_crossentropy):
        return False, None
    kwargs = loss._fn_kwargs
    ok = (kwargs.get("from_logits") is True and kwargs.get("axis", -1) == -1
          and loss.reduction == "sum_over_batch_size" and loss.dtype == "float32"
          and set(kwargs) <= {"from_logits", "ignore_class", "axis"})
    return ok, kwargs.get("ignore_class")


def reason_left(model: keras.Model) -> str | None:
    """Why `model`'s ``fit`` runs Keras's step (the logits and their loss), or None."""
    if type(model).compute_loss is not Trainer.compute_loss:
        return f"{type(model).__name__} overrides compute_loss"
    found = _head(model)
    if found is None:
        return ("its output is not backbone.token_embedding(h, reverse=True) (or a Dense "
                "head of h): something runs after the head, or it is not a functional "
                "model")
    try:
        head_weights(found[1])
    except ValueError as error:
        return str(error).removeprefix("head_weights: ")
    if getattr(model, "_compile_loss", None) is None:
        return "not compiled with a loss"
    if not _sparse_ignore_class(model)[0]:
        return ("its loss is not one SparseCategoricalCrossentropy(from_logits=True), "
                "sum_over_batch_size, float32")
    return None


def _fused_loss(head, hidden, y, sample_weight, ignore_class,
                with_argmax: bool = False) -> tuple[tf.Tensor, tf.Tensor | None] | None:
    """(the compiled loss of ``head(hidden)`` by `head_cross_entropy`, the rows' argmax
    where asked else None), or None where the labels, weights or a Keras mask are not
    what it takes."""
    if getattr(hidden, "_keras_mask", None) is not None or y is None or tree.is_nested(y):
        return None
    y = tf.convert_to_tensor(y)
    if y.shape.rank is None or y.shape.rank != hidden.shape.rank - 1:
        return None
    if sample_weight is not None:
        if tree.is_nested(sample_weight):
            return None
        sample_weight = tf.cast(sample_weight, tf.float32)
        if sample_weight.shape.rank != y.shape.rank:
            return None
    labels = tf.cast(y, tf.int32)
    # A training step's speed is what the patch is for: few large chunks (a chunk's logits
    # at most the kernel gradient's size), the head's memory still bounded.
    loss = head_cross_entropy(head, hidden, labels, sample_weight, ignore_class=ignore_class,
                              chunk_size="fast", return_argmax=with_argmax)
    loss, argmax = loss if with_argmax else (loss, None)
    # Keras's losses divide by the replicas of a tf.distribute strategy (the gradients
    # are summed over them).
    return loss_module.scale_loss_for_distribution(tf.cast(loss, tf.float32)), argmax


def _logits_stand_in(head, hidden) -> keras.KerasTensor:
    """The shape and dtype the head's logits would have (what building the compiled
    metrics reads)."""
    kernel, transpose, _ = head_weights(head)
    vocab = kernel.shape[0] if transpose else kernel.shape[-1]
    dtype = getattr(head, "reverse_dtype", None) or head.compute_dtype
    return keras.KerasTensor(tuple(hidden.shape[:-1]) + (vocab,), dtype=dtype)


def _argmax_metrics(model: keras.Model, y, stand_in) -> list | None:
    """[(metric, weighted)] of the compiled metrics where every one is an accuracy of the
    logits' argmax (``SparseCategoricalAccuracy``, or ``"accuracy"`` resolved to it) and
    the class computes its metrics as Keras does; else None. Builds the compiled metrics
    (from `stand_in`, the logits' shape) where they are not yet."""
    compiled = getattr(model, "_compile_metrics", None)
    if (type(model).compute_metrics is not Trainer.compute_metrics
            or not isinstance(compiled, CompileMetrics) or y is None or tree.is_nested(y)):
        return None
    if not compiled.built:
        compiled.build(y, stand_in)
    found = []
    for lists, weighted in ((compiled._flat_metrics, False),
                            (compiled._flat_weighted_metrics, True)):
        for metrics in lists or ():
            for metric in (metrics.metrics if metrics is not None else ()):
                if not (isinstance(metric, MeanMetricWrapper)
                        and metric._fn is sparse_categorical_accuracy
                        and not metric._fn_kwargs):
                    return None
                found.append((metric, weighted))
    return found


def _update_from_argmax(model, metrics, y, argmax, sample_weight, dtype) -> dict:
    """What ``compute_metrics(x, y, logits, sample_weight)`` does for accuracies: the
    labels and the argmax compared in the logits' dtype, as
    ``sparse_categorical_accuracy`` compares them."""
    predicted = tf.cast(argmax, dtype)
    matches = tf.cast(tf.equal(tf.cast(y, dtype), predicted), keras.backend.floatx())
    for metric, weighted in metrics:
        keras.metrics.Mean.update_state(metric, matches,
                                        sample_weight=sample_weight if weighted else None)
    return model.get_metrics_result()


def make_train_step(original: Callable) -> Callable:
    """Keras's TensorFlow ``train_step`` with the head and its loss in
    `head_cross_entropy`, for the keras-hub causal LMs `reason_left` passes."""

    def train_step(self, data):
        if reason_left(self) is not None:
            return original(self, data)
        hidden_tensor, head, head_kwargs = _head(self)
        hidden_model = _hidden_model(self, hidden_tensor)
        ignore_class = _sparse_ignore_class(self)[1]
        x, y, sample_weight = data_adapter_utils.unpack_x_y_sample_weight(data)

        argmax = metrics = None
        with tf.GradientTape() as tape:
            hidden = hidden_model(x, training=True)
            stand_in = _logits_stand_in(head, hidden)
            if metrics_need_logits(self):
                metrics = _argmax_metrics(self, y, stand_in)
            fused = _fused_loss(head, hidden, y, sample_weight, ignore_class,
                                with_argmax=metrics is not None)
            loss, argmax = fused if fused is not None else (None, None)
            y_pred = None
            if loss is None:  # Keras's own loss of the logits
                y_pred = head(hidden, **head_kwargs)
                loss = self._compute_loss(x=x, y=y, y_pred=y_pred,
                                          sample_weight=sample_weight, training=True)
            else:  # Trainer.compute_loss: the compiled loss, plus the added losses
                losses = [loss] + [self._aggregate_additional_loss(extra)
                                   for extra in self.losses]
                loss = losses[0] if len(losses) == 1 else keras.ops.sum(losses)
            self._loss_tracker.update_state(
                loss_module.unscale_loss_for_distribution(loss),
                sample_weight=tf.shape(next(i for i in tree.flatten(x) if i is not None))[0])
            if self.optimizer is not None:
                loss = self.optimizer.scale_loss(loss)

        trainable_weights = self.trainable_weights
        gradients = tape.gradient(loss, trainable_weights) if trainable_weights else None
        if y_pred is None and argmax is None and metrics_need_logits(self):
            y_pred = head(hidden, **head_kwargs)  # before the update, off the tape
        if trainable_weights:
            self.optimizer.apply_gradients(zip(gradients, trainable_weights))
        else:
            warnings.warn("The model does not have any trainable weights.")
        if argmax is not None:
            return _update_from_argmax(self, metrics, y, argmax, sample_weight,
                                       stand_in.dtype)
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    return train_step


def metrics_need_logits(model: keras.Model) -> bool:
    """Whether `model`'s ``compute_metrics`` may read ``y_pred``: compiled metrics, or a
    class of its own."""
    return (getattr(model, "_compile_metrics", None) is not None
            or type(model).compute_metrics is not Trainer.compute_metrics)
