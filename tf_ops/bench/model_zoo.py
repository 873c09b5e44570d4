"""The models the model benchmark and the patch tests run: keras.applications CNNs and
keras-hub transformers, with random weights (nothing is downloaded), their inputs and
labels, at two sizes: ``"bench"`` (what ``python -m tf_ops.bench.models`` times) and
``"test"`` (tiny: what tests/test_patch_models.py runs on every model).

Each `Case` builds a compiled-ready Keras model (`Built`): the CNNs as keras.applications
builds them (``weights=None``) with a classifier; GPT-2 and LLaMA as keras-hub's causal
LMs (the backbone, then logits from the tied embedding, or LLaMA's untied one, over the
whole vocabulary) trained on next tokens; BERT as keras-hub's text classifier. Dropout
is 0 so that runs are comparable step by step.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Callable

import keras
import numpy as np

SIZES = ("bench", "test")


@dataclasses.dataclass
class Built:
    """A model, one batch of its inputs and labels, and its loss."""

    model: keras.Model
    x: object
    y: np.ndarray
    loss: keras.losses.Loss


@dataclasses.dataclass(frozen=True)
class Case:
    """One model of the benchmark.

    Attributes:
      name: as the table names it.
      build: size -> Built (a fresh model; the same weights for the same seed).
      target: the issue's CPU graph-mode train-step speed-up (stock time / patched).
      keras_hub: needs keras-hub.
      memory_target: the patched step's peak memory, at most this fraction of stock's.
    """

    name: str
    build: Callable[[str], Built]
    target: float
    keras_hub: bool = False
    memory_target: float | None = None


def keras_hub_available() -> bool:
    return importlib.util.find_spec("keras_hub") is not None


def _images(size: str, bench_shape: tuple[int, int]) -> tuple[int, int, int]:
    """(batch, side, classes)."""
    return (bench_shape[0], bench_shape[1], 1000) if size == "bench" else (2, 32, 10)


def _application(factory: str, bench_shape: tuple[int, int], **kwargs) -> Callable[[str], Built]:
    def build(size: str) -> Built:
        batch, side, classes = _images(size, bench_shape)
        keras.utils.set_random_seed(0)
        model = getattr(keras.applications, factory)(
            weights=None, input_shape=(side, side, 3), classes=classes, **kwargs)
        rng = np.random.default_rng(0)
        x = rng.uniform(0, 255, (batch, side, side, 3)).astype("float32")
        y = rng.integers(0, classes, batch).astype("int32")
        # keras.applications end in a softmax: the loss takes probabilities (Keras finds
        # the logits behind them).
        return Built(model, x, y, keras.losses.SparseCategoricalCrossentropy())
    return build


def _tokens(size: str, vocab: int) -> tuple[int, int, int]:
    """(batch, sequence, vocabulary)."""
    return (4, 256, vocab) if size == "bench" else (2, 16, 64)


def _token_batch(batch: int, seq: int, vocab: int):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, (batch, seq + 1)).astype("int32")
    mask = np.ones((batch, seq), "int32")
    mask[0, seq - seq // 4:] = 0  # one padded sequence: masks are exercised
    return ids, mask


def _causal_lm(backbone_name: str, lm_name: str, vocab: int, bench: dict,
               test: dict) -> Callable[[str], Built]:
    """A keras-hub causal LM: `bench` and `test` are the backbone's sizes."""

    def build(size: str) -> Built:
        import keras_hub

        batch, seq, vocabulary = _tokens(size, vocab)
        keras.utils.set_random_seed(0)
        backbone = getattr(keras_hub.models, backbone_name)(
            vocabulary_size=vocabulary, dropout=0.0, **(bench if size == "bench" else test))
        model = getattr(keras_hub.models, lm_name)(backbone=backbone, preprocessor=None)
        ids, mask = _token_batch(batch, seq, vocabulary)
        x = {"token_ids": ids[:, :-1], "padding_mask": mask}
        return Built(model, x, ids[:, 1:],
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return build


def _bert(size: str) -> Built:
    import keras_hub

    batch, seq, vocabulary = _tokens(size, 8000)
    keras.utils.set_random_seed(0)
    sizes = dict(num_layers=4, num_heads=8, hidden_dim=512, intermediate_dim=2048)
    if size == "test":
        sizes = dict(num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64)
    backbone = keras_hub.models.BertBackbone(vocabulary_size=vocabulary, dropout=0.0,
                                             max_sequence_length=seq, **sizes)
    model = keras_hub.models.BertTextClassifier(backbone, num_classes=4, preprocessor=None,
                                                dropout=0.0)
    ids, mask = _token_batch(batch, seq, vocabulary)
    x = {"token_ids": ids[:, :-1], "padding_mask": mask,
         "segment_ids": np.zeros((batch, seq), "int32")}
    y = np.arange(batch, dtype="int32") % 4
    return Built(model, x, y, keras.losses.SparseCategoricalCrossentropy(from_logits=True))


CASES: dict[str, Case] = {c.name: c for c in (
    Case("EfficientNetB0", _application("EfficientNetB0", (8, 224)), 1.4),
    Case("MobileNetV3Small", _application("MobileNetV3Small", (16, 224)), 1.25),
    Case("ResNet50", _application("ResNet50", (8, 224)), 1.15),
    Case("ConvNeXtTiny", _application("ConvNeXtTiny", (8, 224)), 1.1),
    Case("GPT-2", _causal_lm(
        "GPT2Backbone", "GPT2CausalLM", 8000,
        dict(num_layers=4, num_heads=8, hidden_dim=512, intermediate_dim=2048,
             max_sequence_length=256),
        dict(num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64,
             max_sequence_length=16)), 1.2, keras_hub=True),
    Case("BERT", _bert, 1.15, keras_hub=True),
    Case("LLaMA", _causal_lm(
        "LlamaBackbone", "LlamaCausalLM", 32000,
        dict(num_layers=4, num_query_heads=8, num_key_value_heads=4, hidden_dim=512,
             intermediate_dim=1376),
        dict(num_layers=2, num_query_heads=4, num_key_value_heads=2, hidden_dim=32,
             intermediate_dim=64)), 1.15, keras_hub=True, memory_target=0.7),
)}


def build(name: str, size: str = "bench") -> Built:
    """A fresh `Built` of the model `name` at `size` ("bench" or "test").

    Example:
      >>> build("ResNet50", "test").model.name
      'resnet50'
    """
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    return CASES[name].build(size)
