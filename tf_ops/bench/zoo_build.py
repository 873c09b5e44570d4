"""Every model of the zoo, built at a tiny size with random weights: each keras-hub
backbone (found in ``keras_hub.models``, not listed by hand), each keras-hub causal LM
on it, and each ``keras.applications`` model.

A keras-hub backbone's constructor arguments are filled by name (`SMALL`: "hidden_dim"
is 16 whatever the model), so a new backbone whose arguments are named as the others'
builds with no change here; `OVERRIDES` holds the few arguments that are not, and
`LEFT_OUT` the backbones that are not built, with why. Inputs are made from the
model's own input specs (token ids below the vocabulary, masks of ones, images).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

import keras
import numpy as np

BATCH, LENGTH, SIDE = 2, 8, 32
VOCABULARY = 64

# Constructor argument -> tiny value, by name, for every keras-hub backbone.
SMALL: dict[str, Any] = {
    **dict.fromkeys(("vocabulary_size", "vocab_size", "text_vocab_size"), VOCABULARY),
    **dict.fromkeys(("num_layers", "num_hidden_layers", "encoder_num_layers",
                     "decoder_num_layers", "num_layers_enc", "num_layers_dec", "depth",
                     "num_spatial_layers", "num_temporal_layers"), 2),
    **dict.fromkeys(("num_heads", "num_query_heads", "num_attention_heads",
                     "encoder_num_heads", "decoder_num_heads", "encoder_num_attention_heads",
                     "decoder_num_attention_heads", "num_decoder_heads"), 2),
    **dict.fromkeys(("num_key_value_heads", "encoder_num_key_value_heads",
                     "decoder_num_key_value_heads"), 1),
    **dict.fromkeys(("hidden_dim", "embedding_dim", "hidden_size", "text_hidden_size",
                     "encoder_hidden_dim", "decoder_hidden_dim", "filter_dim"), 16),
    **dict.fromkeys(("intermediate_dim", "mlp_dim", "intermediate_size",
                     "encoder_intermediate_dim", "decoder_intermediate_dim",
                     "moe_intermediate_dim", "shared_expert_intermediate_dim",
                     "shared_expert_intermediate_size", "decoder_mlp_dim"), 32),
    **dict.fromkeys(("head_dim", "head_size", "encoder_head_dim", "decoder_head_dim"), 8),
    "num_experts": 2, "top_k": 1, "num_experts_per_tok": 1,
    "max_sequence_length": 32, "max_position_embeddings": 32,
    "image_shape": (SIDE, SIDE, 3), "image_size": SIDE, "patch_size": 4,
    "dropout": 0.0,
    "vit_patch_size": 4, "vit_num_heads": 2, "vit_hidden_dim": 16, "vit_num_layers": 1,
    "num_frames": 2, "num_auxiliary_layers": 1,
}

# The "small" size of the speed-ups: these arguments (by name, as SMALL's) wider, and
# longer inputs (SMALL_BATCH x SMALL_LENGTH, SMALL_SIDE images): big enough that the
# step's time is its math, not Python's dispatch.
SMALL_BATCH, SMALL_LENGTH, SMALL_SIDE = 4, 128, 128
WIDER: dict[str, Any] = {
    **dict.fromkeys(("hidden_dim", "embedding_dim", "hidden_size", "encoder_hidden_dim",
                     "decoder_hidden_dim"), 256),
    **dict.fromkeys(("intermediate_dim", "mlp_dim", "encoder_intermediate_dim",
                     "decoder_intermediate_dim"), 1024),
    **dict.fromkeys(("num_heads", "num_query_heads", "num_attention_heads"), 4),
    **dict.fromkeys(("head_dim", "head_size"), 64),
    "num_key_value_heads": 2, "max_sequence_length": 256, "vocabulary_size": 8192,
    "image_shape": (SMALL_SIDE, SMALL_SIDE, 3), "image_size": SMALL_SIDE, "patch_size": 16,
    "max_encoder_sequence_length": 256, "max_decoder_sequence_length": 256,
}

# Backbone -> arguments that the names above do not give (or give wrong).
OVERRIDES: dict[str, dict[str, Any]] = {
    "Gemma3Backbone": {"image_size": 16, "vision_encoder": None},
    "Gemma4Backbone": {"image_size": 16, "vision_encoder": None},
    "GemmaBackbone": {"head_dim": 8},
    "GptOssBackbone": {"num_experts": 2},
    "T5GemmaBackbone": {"encoder_layer_types": ["full_attention"] * 2,
                        "decoder_layer_types": ["full_attention"] * 2},
    "T5Gemma2Backbone": {"encoder_layer_types": ["full_attention"] * 2,
                         "decoder_layer_types": ["full_attention"] * 2},
    "ViTBackbone": {"hidden_dim": 16, "mlp_dim": 32},
    "WhisperBackbone": {"max_encoder_sequence_length": 16, "max_decoder_sequence_length": 16},
    "SigLIPTextEncoder": {"max_sequence_length": LENGTH},
    "ViTDetBackbone": {"global_attention_layer_indices": [1]},
    "ResNetBackbone": {"input_conv_filters": [64], "input_conv_kernel_sizes": [3],
                       "stackwise_num_filters": [64, 64], "stackwise_num_blocks": [1, 1],
                       "stackwise_num_strides": [1, 2], "block_type": "basic_block",
                       "image_shape": (SIDE, SIDE, 3)},
    "DenseNetBackbone": {"stackwise_num_repeats": [1, 1], "image_shape": (SIDE, SIDE, 3)},
    "VGGBackbone": {"stackwise_num_repeats": [1, 1], "stackwise_num_filters": [8, 16],
                    "image_shape": (SIDE, SIDE, 3)},
    "DeiTBackbone": {"image_shape": (SIDE, SIDE, 3)},
    "SwinTransformerBackbone": {"image_shape": (SIDE, SIDE, 3), "embed_dim": 16,
                                "depths": [1, 1], "num_heads": [2, 2], "window_size": 4},
    "MiTBackbone": {"layerwise_depths": [1, 1], "num_layers": 2, "layerwise_num_heads": [1, 2],
                    "layerwise_sr_ratios": [2, 1], "max_drop_path_rate": 0.0,
                    "layerwise_patch_sizes": [7, 3], "layerwise_strides": [4, 2],
                    "hidden_dims": [8, 16], "image_shape": (SIDE, SIDE, 3)},
}

# Backbone -> input -> its length, where LENGTH does not fit (Moonshine's stem convolves
# raw audio with strides 64, 3 and 2).
INPUT_LENGTHS: dict[str, dict[str, int]] = {
    "MoonshineBackbone": {"encoder_input_values": 4000, "encoder_padding_mask": 4000}}

# Backbones not built here, and why.
LEFT_OUT: dict[str, str] = {
    "FeaturePyramidBackbone": "an abstract base class (no model of its own)",
}
_COMPOSITE = ("built from other backbones (image_encoder, vision_encoder, text_encoder, "
              "...): not generated yet")


@dataclasses.dataclass
class Model:
    """One built model of the zoo: the model, a batch of its inputs, and how to build
    it again (under another dtype policy: the float64 twin)."""

    name: str
    source: str  # "keras-hub" or "keras.applications"
    kind: str  # "decoder LLM", "encoder", "encoder-decoder", "vision", "CNN", "audio", ...
    model: keras.Model
    x: Any
    rebuild: Callable[[], keras.Model]


def _hub_backbones() -> dict[str, type]:
    import keras_hub

    base = keras_hub.models.Backbone
    return {name: cls for name, cls in sorted(vars(keras_hub.models).items())
            if inspect.isclass(cls) and issubclass(cls, base) and cls is not base}


def _arguments(name: str, cls: type, size: str = "tiny") -> dict[str, Any]:
    """The backbone's constructor arguments: `SMALL` by name, then `OVERRIDES`; a
    required argument neither gives raises (the backbone is left out, with it named)."""
    kwargs, missing = {}, []
    for p in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        if size == "small" and p.name in WIDER:
            kwargs[p.name] = WIDER[p.name]
        elif p.name in OVERRIDES.get(name, {}):
            kwargs[p.name] = OVERRIDES[name][p.name]
        elif p.name in SMALL:
            kwargs[p.name] = SMALL[p.name]
        elif p.default is inspect.Parameter.empty:
            missing.append(p.name)
    for key, value in OVERRIDES.get(name, {}).items():
        kwargs.setdefault(key, value)
    if missing:
        if any(m.endswith(("encoder", "_model", "backbone", "decoder")) for m in missing):
            raise LeftOut(_COMPOSITE)
        raise LeftOut(f"needs arguments the generator has no tiny value for: "
                      f"{', '.join(missing)}")
    return kwargs


class LeftOut(Exception):
    """A model of the zoo that the generator does not build, with why."""


def _kind(name: str, model: keras.Model) -> str:
    """The architecture kind, from the model's inputs: audio features, images (a vision
    transformer where the model has attention layers, else a CNN), token ids for an
    encoder and a decoder, token ids alone (a decoder LLM where keras-hub has a causal
    LM on it, else an encoder)."""
    specs = tf_nest_flatten(model.inputs)
    names = " ".join(i.name for i in specs)
    attention = any("attention" in type(layer).__name__.lower()
                    for layer in model._flatten_layers(include_self=False, recursive=True))
    if "audio" in names or "feature" in names or "input_values" in names:
        return "audio"
    if any(len(i.shape) >= 4 or ("float" in str(i.dtype) and len(i.shape) == 4)
           for i in specs):
        return "vision transformer" if attention else "CNN"
    if "decoder" in names and ("encoder" in names or "token_ids " in names + " "):
        return "encoder-decoder"
    if "token_ids" in names:
        return "decoder LLM" if _causal_lm_class(name) is not None else "encoder"
    return "other"


def tf_nest_flatten(x):
    import tensorflow as tf

    return tf.nest.flatten(x)


def _causal_lm_class(backbone_name: str):
    import keras_hub

    found = [task for task in vars(keras_hub.models).values()
             if inspect.isclass(task) and issubclass(task, keras_hub.models.CausalLM)
             and getattr(task, "backbone_cls", None) is not None
             and task.backbone_cls.__name__ == backbone_name]
    # Several (Gemma 4's assistant LM): the one named as the backbone is.
    named = [t for t in found if t.__name__ == backbone_name.replace("Backbone", "CausalLM")]
    return (named or found or [None])[0]


def inputs_for(model: keras.Model, lengths: dict[str, int] | None = None,
               seed: int = 0, batch: int = BATCH, length: int = LENGTH,
               vocabulary: int = VOCABULARY) -> Any:
    """A batch for `model` from its input specs: ids below the vocabulary, masks of
    ones, floats from a normal distribution; unknown lengths `length` (or `lengths`,
    by input name)."""
    rng = np.random.default_rng(seed)
    lengths = lengths or {}
    def one(spec):
        n = lengths.get(spec.name, length)
        shape = [batch if i == 0 and d is None else (n if d is None else d)
                 for i, d in enumerate(spec.shape)]
        dtype = str(spec.dtype)
        name = spec.name
        if "mask" in name:
            return np.ones(shape, dtype)
        if dtype.startswith(("int", "uint")):
            if "segment" in name:
                return np.zeros(shape, dtype)
            return rng.integers(1, vocabulary // 2, shape).astype(dtype)
        if dtype == "bool":
            return np.ones(shape, dtype)
        return rng.normal(size=shape).astype(dtype)
    if isinstance(model.input, dict):
        return {k: one(v) for k, v in model.input.items()}
    return keras.tree.map_structure(one, model.input)


def hub_names() -> list[str]:
    return list(_hub_backbones())


def build_hub(name: str, size: str = "tiny") -> Model:
    """keras-hub's backbone `name` (or ``"<Backbone> CausalLM"``: the causal LM on it),
    ``"tiny"`` (the table's) or ``"small"`` (the speed-ups')."""
    import keras_hub  # noqa: F401

    causal = name.endswith(" CausalLM")
    backbone_name = name.removesuffix(" CausalLM")
    if backbone_name in LEFT_OUT:
        raise LeftOut(LEFT_OUT[backbone_name])
    cls = _hub_backbones()[backbone_name]
    kwargs = _arguments(backbone_name, cls, size)

    def make() -> keras.Model:
        keras.utils.set_random_seed(0)
        backbone = cls(**kwargs)
        if causal:
            return _causal_lm_class(backbone_name)(backbone=backbone, preprocessor=None)
        return backbone

    model = make()
    kind = _kind(backbone_name, model.backbone if causal else model)
    if causal:
        kind = ("encoder-decoder LM" if kind == "encoder-decoder" else "decoder LLM") + " (fit)"
    shape = ({} if size == "tiny" else
             {"batch": SMALL_BATCH, "length": SMALL_LENGTH,
              "vocabulary": kwargs.get("vocabulary_size", VOCABULARY)})
    return Model(name, "keras-hub", kind, model,
                 inputs_for(model, INPUT_LENGTHS.get(backbone_name), **shape), make)


# keras.applications constructors whose smallest input is not SIDE.
# 64 (not SIDE): the last stage still sees 2 x 2 positions, so its batch norms do not
# normalise two numbers, where float32 rounding is amplified without bound (as
# model_zoo's test size).
APP_SIDE = 64
_APP_SIDES = {"InceptionV3": 75, "InceptionResNetV2": 75, "Xception": 71}


# keras.applications families: the smallest member is built and checked; the others
# are the same function with more (or wider) blocks of the same layers, whose row it is
# (building ConvNeXtXLarge's 348M weights, twice with the float64 twin, would take
# minutes and gigabytes for no layer kind the small one lacks).
_FAMILY_OF = {
    **dict.fromkeys(("ConvNeXtSmall", "ConvNeXtBase", "ConvNeXtLarge", "ConvNeXtXLarge"),
                    "ConvNeXtTiny"),
    **dict.fromkeys(("DenseNet169", "DenseNet201"), "DenseNet121"),
    **{f"EfficientNetB{i}": "EfficientNetB0" for i in range(1, 8)},
    **dict.fromkeys(("EfficientNetV2B1", "EfficientNetV2B2", "EfficientNetV2B3",
                     "EfficientNetV2S", "EfficientNetV2M", "EfficientNetV2L"),
                    "EfficientNetV2B0"),
    "NASNetLarge": "NASNetMobile",
    **dict.fromkeys(("ResNet101", "ResNet152"), "ResNet50"),
    **dict.fromkeys(("ResNet101V2", "ResNet152V2"), "ResNet50V2"),
    "VGG19": "VGG16",
}


def application_names() -> list[str]:
    return sorted(n for n, f in vars(keras.applications).items()
                  if callable(f) and n[0].isupper())


def build_application(name: str, size: str = "tiny") -> Model:
    if name in _FAMILY_OF:
        raise LeftOut(f"the same layers as {_FAMILY_OF[name]} (its row), more or wider "
                      f"blocks: not built, to keep the check small")
    side = _APP_SIDES.get(name, APP_SIDE) if size == "tiny" else SMALL_SIDE
    batch = BATCH if size == "tiny" else SMALL_BATCH
    factory = getattr(keras.applications, name)

    def make() -> keras.Model:
        keras.utils.set_random_seed(0)
        kwargs = {}
        if "include_preprocessing" in inspect.signature(factory).parameters:
            kwargs["include_preprocessing"] = False
        model = factory(weights=None, input_shape=(side, side, 3), classes=10, **kwargs)
        for layer in model.layers:
            if isinstance(layer, keras.layers.Dropout):
                layer.rate = 0.0
        return model

    model = make()
    x = np.random.default_rng(0).uniform(-1, 1, (batch, side, side, 3)).astype("float32")
    return Model(name, "keras.applications", "CNN", model, x, make)
