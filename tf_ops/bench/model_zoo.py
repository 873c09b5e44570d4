"""The models the model benchmark and the patch tests run: keras.applications CNNs and
keras-hub transformers, with random weights (nothing is downloaded), their inputs and
labels, at two sizes: ``"bench"`` (what ``python -m tf_ops.bench.models`` times) and
``"test"`` (tiny: what tests/keras/test_patch_models.py runs on every model).

Each `Case` builds a compiled-ready Keras model (`Built`): the CNNs as keras.applications
builds them (``weights=None``) with a classifier; keras-hub's VAE trained to reconstruct
its input; GPT-2 and LLaMA as keras-hub's causal
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
      build: size -> Built (a fresh model; the same weights for the same seed); a
        long-context case's also takes ``seq=``, another sequence length.
      target: the issue's CPU graph-mode train-step speed-up (stock time / patched).
      keras_hub: needs keras-hub.
      memory_target: the patched step's peak memory, at most this fraction of stock's.
      long_context: a long-context size of a model above (the benchmark's; its "test"
        size is that model's, so the tests run it once).
    """

    name: str
    build: Callable[[str], Built]
    target: float
    keras_hub: bool = False
    memory_target: float | None = None
    long_context: bool = False


def keras_hub_available() -> bool:
    return importlib.util.find_spec("keras_hub") is not None


def _application(factory: str, bench_shape: tuple[int, int], test_side: int = 64,
                 test_factory: Callable[..., keras.Model] | None = None,
                 **kwargs) -> Callable[[str], Built]:
    """A keras.applications CNN: `bench_shape` is (batch, side) of the benchmark; the
    test's batch is 2 at `test_side` (64: the last stage still sees 2 x 2 positions,
    so its batch norms do not normalise two numbers, where float32 rounding is
    amplified without bound), without dropout (the tests compare runs in float32 and
    float64, whose random masks differ), built by `test_factory` where given (the
    same architecture, fewer and narrower blocks)."""

    def build(size: str) -> Built:
        batch, side, classes = (*bench_shape, 1000) if size == "bench" else (2, test_side, 10)
        keras.utils.set_random_seed(0)
        make = getattr(keras.applications, factory)
        if size == "test" and test_factory is not None:
            make = test_factory
        model = make(weights=None, input_shape=(side, side, 3), classes=classes, **kwargs)
        if size == "test":
            for layer in model.layers:
                if isinstance(layer, keras.layers.Dropout):
                    layer.rate = 0.0
        rng = np.random.default_rng(0)
        x = rng.uniform(0, 255, (batch, side, side, 3)).astype("float32")
        y = rng.integers(0, classes, batch).astype("int32")
        # keras.applications end in a softmax: the loss takes probabilities (Keras finds
        # the logits behind them).
        return Built(model, x, y, keras.losses.SparseCategoricalCrossentropy())
    return build


# The tests' versions of the larger CNNs: keras.applications' own code (its ResNet,
# EfficientNet and ConvNeXt builders), with fewer and narrower blocks, so that a test
# step, and saving and loading the model, take seconds (ResNet50 and ConvNeXt-T have
# 25M and 28M parameters whatever the input size).

def _small_resnet(**kwargs) -> keras.Model:
    """ResNet50's blocks (bottleneck v1, conv bias, BN, ReLU), one per stage."""
    from keras.src.applications import resnet

    def stacks(x):
        x = resnet.stack_residual_blocks_v1(x, 16, 1, stride1=1, name="conv2")
        x = resnet.stack_residual_blocks_v1(x, 32, 2, name="conv3")
        x = resnet.stack_residual_blocks_v1(x, 64, 1, name="conv4")
        return resnet.stack_residual_blocks_v1(x, 128, 1, name="conv5")

    return resnet.ResNet(stacks, preact=False, use_bias=True, name="resnet50", **kwargs)


def _small_efficientnet(**kwargs) -> keras.Model:
    """EfficientNet's MBConv blocks at width 0.25, depth 0.5."""
    from keras.src.applications import efficientnet

    return efficientnet.EfficientNet(0.25, 0.5, 64, dropout_rate=0.0, drop_connect_rate=0.0,
                                     name="efficientnetb0", **kwargs)


def _small_convnext(**kwargs) -> keras.Model:
    """ConvNeXt's blocks, 1-2 per stage of 16-128 channels."""
    from keras.src.applications import convnext

    return convnext.ConvNeXt(depths=[1, 1, 2, 1], projection_dims=[16, 32, 64, 128],
                             name="convnext_tiny", **kwargs)


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
               test: dict, tokens: tuple[int, int] | None = None) -> Callable[..., Built]:
    """A keras-hub causal LM: `bench` and `test` are the backbone's sizes; `tokens`
    (batch, sequence) the bench size's batch where not the default. The build takes
    `seq`, a sequence length in place of the size's (the context search of
    tf_ops.bench.context; a backbone with position embeddings gets that many)."""

    def build(size: str, seq: int | None = None) -> Built:
        import keras_hub

        batch, length, vocabulary = _tokens(size, vocab)
        if size == "bench" and tokens is not None:
            batch, length = tokens
        sizes = dict(bench if size == "bench" else test)
        if seq is not None:
            length = seq
            if "max_sequence_length" in sizes:
                sizes["max_sequence_length"] = seq
        seq = length
        keras.utils.set_random_seed(0)
        backbone = getattr(keras_hub.models, backbone_name)(
            vocabulary_size=vocabulary, dropout=0.0, **sizes)
        model = getattr(keras_hub.models, lm_name)(backbone=backbone, preprocessor=None)
        ids, mask = _token_batch(batch, seq, vocabulary)
        x = {"token_ids": ids[:, :-1], "padding_mask": mask}
        return Built(model, x, ids[:, 1:],
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return build


def _vae(size: str) -> Built:
    """keras-hub's VAE (Stable Diffusion 3's autoencoder, a small config): ResNet blocks of
    GroupNormalization(32) + SiLU + convolution and a mid-block attention, trained to
    reconstruct its input; the latent is the distribution's mode (no sampling noise)."""
    from keras_hub.src.models.vae.vae_backbone import VAEBackbone

    keras.utils.set_random_seed(0)
    if size == "test":
        filters, blocks, batch, side = [32, 32], [1, 1], 2, 16
    else:
        filters, blocks, batch, side = [64, 128, 128], [2, 2, 2], 4, 96
    model = VAEBackbone(encoder_num_filters=filters, encoder_num_blocks=blocks,
                        decoder_num_filters=filters[::-1], decoder_num_blocks=blocks,
                        sampler_method="mode", sample_channels=8)
    x = np.random.default_rng(0).uniform(-1, 1, (batch, side, side, 3)).astype("float32")
    return Built(model, x, x, keras.losses.MeanSquaredError())


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
    Case("EfficientNetB0", _application("EfficientNetB0", (8, 224),
                                        test_factory=_small_efficientnet), 1.4),
    Case("MobileNetV3Small", _application("MobileNetV3Small", (16, 224)), 1.25),
    Case("ResNet50", _application("ResNet50", (8, 224), test_factory=_small_resnet), 1.15),
    Case("ConvNeXtTiny", _application("ConvNeXtTiny", (8, 224), test_side=32,
                                      test_factory=_small_convnext), 1.1),
    Case("GPT-2", _causal_lm(
        "GPT2Backbone", "GPT2CausalLM", 8000,
        dict(num_layers=4, num_heads=8, hidden_dim=512, intermediate_dim=2048,
             max_sequence_length=256),
        dict(num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64,
             max_sequence_length=16)), 1.2, keras_hub=True),
    Case("BERT", _bert, 1.15, keras_hub=True),
    Case("VAE", _vae, 1.3, keras_hub=True),
    Case("LLaMA", _causal_lm(
        "LlamaBackbone", "LlamaCausalLM", 32000,
        dict(num_layers=4, num_query_heads=8, num_key_value_heads=4, hidden_dim=512,
             intermediate_dim=1376),
        dict(num_layers=2, num_query_heads=4, num_key_value_heads=2, hidden_dim=32,
             intermediate_dim=64)), 1.15, keras_hub=True, memory_target=0.7),
    # Long context (issue 45): one sequence of 2048 tokens, 2 layers, hidden 256, 8 query
    # heads, where stock Keras's attention keeps [1, 8, 2048, 2048] tensors per layer.
    Case("GPT-2 2k", _causal_lm(
        "GPT2Backbone", "GPT2CausalLM", 8000,
        dict(num_layers=2, num_heads=8, hidden_dim=256, intermediate_dim=1024,
             max_sequence_length=2048),
        dict(num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64,
             max_sequence_length=16), tokens=(1, 2048)), 1.8, keras_hub=True,
        memory_target=0.25, long_context=True),
    Case("LLaMA 2k", _causal_lm(
        "LlamaBackbone", "LlamaCausalLM", 8000,
        dict(num_layers=2, num_query_heads=8, num_key_value_heads=2, hidden_dim=256,
             intermediate_dim=688),
        dict(num_layers=2, num_query_heads=4, num_key_value_heads=2, hidden_dim=32,
             intermediate_dim=64), tokens=(1, 2048)), 1.8, keras_hub=True,
        memory_target=0.25, long_context=True),
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


def twins(name: str, size: str = "bench") -> tuple[Built, Built]:
    """Two fresh `Built`s of the model `name` with the same weights: the stock one and
    the one a benchmark runs under the patch.

    Example:
      >>> stock, patched = twins("ResNet50", "test")
      >>> all((a.numpy() == b.numpy()).all()
      ...     for a, b in zip(stock.model.variables, patched.model.variables))
      True
    """
    stock, patched = build(name, size), build(name, size)
    for a, b in zip(patched.model.variables, stock.model.variables):
        a.assign(b)
    return stock, patched
