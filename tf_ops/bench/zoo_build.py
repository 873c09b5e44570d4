"""Every model of the zoo, built at a tiny size with random weights: each keras-hub
backbone (found in ``keras_hub.models``, not listed by hand), each keras-hub causal LM
on it, and each ``keras.applications`` model.

A keras-hub backbone's constructor arguments are filled by name (`SMALL`: "hidden_dim"
is 16 whatever the model), so a new backbone whose arguments are named as the others'
builds with no change here; `OVERRIDES` holds the arguments that are not (tiny values
after keras-hub's own tests, for backbones whose arguments are theirs alone), and
`LEFT_OUT` the models that are not built, with why. A composite backbone (CLIP, SAM,
DeepLab, ...) takes its sub-models (`sub`: each built tiny, as the generator builds that
class, first). Inputs are made from the model's own input specs (token ids below the
vocabulary, masks of ones, images; `INPUT_LENGTHS`, `INPUT_SHAPES`, `INPUT_VALUES` where
the specs leave a shape or a value open that the model needs fixed).
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


@dataclasses.dataclass(frozen=True)
class Sub:
    """A sub-model argument of a composite backbone (its image encoder, text encoder,
    ...): keras-hub's class `name` (in ``keras_hub.models`` or ``keras_hub.layers``, else
    at `module`), built as the generator builds it tiny (`SMALL` by name, its
    `OVERRIDES`) with `given` on top; built again with the composite (the float64 twin
    gets float64 sub-models)."""

    name: str
    given: tuple = ()
    module: str = ""

    def build(self) -> Any:
        import importlib

        import keras_hub

        cls = (getattr(keras_hub.models, self.name, None)
               or getattr(keras_hub.layers, self.name, None)
               or getattr(importlib.import_module(self.module), self.name))
        return cls(**_built(_arguments(self.name, cls, given=dict(self.given))))


def sub(cls_name: str, module: str = "", /, **given: Any) -> Sub:
    return Sub(cls_name, tuple(given.items()), module)


def _built(kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` with each `Sub` built."""
    return {k: v.build() if isinstance(v, Sub) else v for k, v in kwargs.items()}

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

    # Backbones whose arguments are their own (tiny values after keras-hub's tests of
    # each, `keras_hub/src/models/<model>/*_backbone_test.py`, narrower).
    "CSPNetBackbone": {"stem_filters": 8, "stem_kernel_size": 3, "stem_strides": 1,
                       "stackwise_strides": 2, "stackwise_depth": [1, 1],
                       "stackwise_num_filters": [8, 16], "down_growth": True,
                       "bottle_ratio": (0.5, 1.0), "block_ratio": (1.0, 0.5),
                       "expand_ratio": (2.0, 1.0), "block_type": "dark_block",
                       "stage_type": "csp", "stem_padding": "same",
                       "image_shape": (SIDE, SIDE, 3)},
    "EfficientNetBackbone": {"stackwise_kernel_sizes": [3, 3],
                             "stackwise_num_repeats": [1, 1],
                             "stackwise_input_filters": [8, 8],
                             "stackwise_output_filters": [8, 16],
                             "stackwise_expansion_ratios": [1, 4],
                             "stackwise_squeeze_and_excite_ratios": [0.0, 0.25],
                             "stackwise_strides": [1, 2],
                             "stackwise_block_types": ["fused", "unfused"],
                             "stackwise_force_input_filters": [0, 0],
                             "stackwise_nores_option": [False, False],
                             "stackwise_width_coefficients": [1.0, 1.0],
                             "stackwise_depth_coefficients": [1.0, 1.0],
                             "num_features": 32, "input_shape": (SIDE, SIDE, 3)},
    "FluxBackbone": {"input_channels": 16, "hidden_size": 16, "mlp_ratio": 2.0,
                     "num_heads": 2, "depth": 1, "depth_single_blocks": 1,
                     "axes_dim": [2, 2, 4], "theta": 10_000, "use_bias": True,
                     "guidance_embed": True, "image_shape": (LENGTH, 16),
                     "text_shape": (LENGTH, 16), "image_ids_shape": (LENGTH, 3),
                     "text_ids_shape": (LENGTH, 3), "y_shape": (16,)},
    # (text only: its vision encoder is MobileNetV5Backbone, checked in its own row)
    "Gemma3nBackbone": {"text_vocab_size": VOCABULARY, "text_hidden_size": 16,
                        "pad_token_id": 0, "head_dim": 8, "intermediate_size": [32, 32],
                        "hidden_activation": "gelu_approximate",
                        "layer_types": ["full_attention"] * 2, "sliding_window": 4,
                        "rope_theta": 10000.0, "vocab_size_per_layer_input": VOCABULARY,
                        "hidden_size_per_layer_input": 4, "altup_num_inputs": 2,
                        "laurel_rank": 2},
    "HGNetV2Backbone": {"stem_channels": [3, 8, 8], "embedding_size": 8,
                        "stackwise_stage_filters": [[8, 8, 16, 1, 1, 3],
                                                    [16, 8, 32, 1, 1, 3]],
                        "apply_downsample": [False, True],
                        "use_lightweight_conv_block": [False, True], "depths": [1, 1],
                        "hidden_sizes": [16, 32], "use_learnable_affine_block": True,
                        "hidden_act": "relu", "image_shape": (SIDE, SIDE, 3)},
    "MobileNetBackbone": {"stackwise_expansion": [[16, 24], [32, 32]],
                          "stackwise_num_blocks": [2, 2],
                          "stackwise_num_filters": [[8, 8], [16, 16]],
                          "stackwise_kernel_size": [[3, 3], [5, 5]],
                          "stackwise_num_strides": [[2, 1], [2, 1]],
                          "stackwise_se_ratio": [[None, None], [0.25, 0.25]],
                          "stackwise_activation": [["relu", "relu"],
                                                   ["hard_swish", "hard_swish"],
                                                   ["hard_swish"]],
                          "stackwise_padding": [[1, 1], [2, 2]], "output_num_filters": 32,
                          "input_num_filters": 8, "depthwise_filters": 8,
                          "depthwise_stride": 2, "depthwise_residual": False,
                          "squeeze_and_excite": 0.5, "last_layer_filter": 32,
                          "image_shape": (SIDE, SIDE, 3)},
    "MobileNetV5Backbone": {"stackwise_block_types": [["er"], ["uir", "uir"]],
                            "stackwise_num_blocks": [1, 2],
                            "stackwise_num_filters": [[8], [16, 16]],
                            "stackwise_strides": [[2], [2, 1]],
                            "stackwise_act_layers": [["relu"], ["relu", "relu"]],
                            "stackwise_exp_ratios": [[4.0], [4.0, 4.0]],
                            "stackwise_se_ratios": [[0.0], [0.0, 0.0]],
                            "stackwise_dw_kernel_sizes": [[0], [5, 5]],
                            "stackwise_dw_start_kernel_sizes": [[0], [0, 0]],
                            "stackwise_dw_end_kernel_sizes": [[0], [0, 0]],
                            "stackwise_exp_kernel_sizes": [[3], [0, 0]],
                            "stackwise_pw_kernel_sizes": [[1], [0, 0]],
                            "stackwise_num_heads": [[0], [0, 0]],
                            "stackwise_key_dims": [[0], [0, 0]],
                            "stackwise_value_dims": [[0], [0, 0]],
                            "stackwise_kv_strides": [[0], [0, 0]],
                            "stackwise_use_cpe": [[False], [False, False]],
                            "stem_size": 8, "num_features": 32, "use_msfa": False,
                            "image_shape": (SIDE, SIDE, 3)},
    **dict.fromkeys(("SmolLM3Backbone", "SmolLMBackbone"), {
        "attention_bias": False, "attention_dropout": 0.0,
        "rope_layer_enabled_list": [True, True], "layer_types": ["attention"] * 2,
        "mlp_bias": False, "layer_norm_epsilon": 1e-5, "rope_theta": 10000.0,
        "partial_rotary_factor": 1.0}),
    "XceptionBackbone": {"stackwise_conv_filters": [[8, 16], [32, 32], [32, 32]],
                         "stackwise_pooling": [False, True, False],
                         "image_shape": (SIDE, SIDE, 3)},
    # Composites: their sub-models built tiny first (`sub`: the generator's own tiny
    # construction of that class, with the arguments named there).
    "CLIPBackbone": {"vision_encoder": sub("CLIPVisionEncoder"),
                     "text_encoder": sub("CLIPTextEncoder"), "projection_dim": 16},
    "MetaCLIP2Backbone": {"vision_encoder": sub("MetaCLIP2VisionEncoder"),
                          "text_encoder": sub("MetaCLIP2TextEncoder"),
                          "projection_dim": 16},
    "SigLIPBackbone": {"vision_encoder": sub("SigLIPVisionEncoder"),
                       "text_encoder": sub("SigLIPTextEncoder")},
    # (its stages take 64 channels; 64x64 images, as keras-hub's test: 2x2 positions at
    # the last stage, whose batch norms then do not normalise two numbers)
    "BASNetBackbone": {"image_encoder": sub("ResNetBackbone",
                                            stackwise_num_filters=[64, 64, 64, 64],
                                            stackwise_num_blocks=[1, 1, 1, 1],
                                            stackwise_num_strides=[1, 2, 2, 2],
                                            image_shape=(None, None, 3)),
                       "num_classes": 1, "image_shape": (2 * SIDE, 2 * SIDE, 3)},
    "DeepLabV3Backbone": {"image_encoder": sub("ResNetBackbone",
                                               stackwise_num_filters=[64, 16, 16],
                                               stackwise_num_blocks=[1, 1, 1],
                                               stackwise_num_strides=[1, 2, 2]),
                          "low_level_feature_key": "P2", "spatial_pyramid_pooling_key": "P4",
                          "dilation_rates": [1, 2], "upsampling_size": 4,
                          "projection_filters": 8, "image_shape": (SIDE, SIDE, 3)},
    "RetinaNetBackbone": {"image_encoder": sub("ResNetBackbone",
                                               stackwise_num_filters=[64, 16, 16, 16],
                                               stackwise_num_blocks=[1, 1, 1, 1],
                                               stackwise_num_strides=[1, 2, 2, 2]),
                          "min_level": 3, "max_level": 5, "use_p5": True,
                          "image_shape": (SIDE, SIDE, 3)},
    "SegFormerBackbone": {"image_encoder": sub("MiTBackbone"), "projection_filters": 16},
    "DepthAnythingBackbone": {"image_encoder": sub("DINOV2Backbone", num_layers=4),
                              "reassemble_factors": [4, 2, 1, 0.5],
                              "neck_hidden_dims": [8, 8, 16, 16], "fusion_hidden_dim": 16,
                              "head_hidden_dim": 8, "head_in_index": -1,
                              "feature_keys": ["stage1", "stage2", "stage3", "stage4"]},
    "PARSeqBackbone": {"image_encoder": sub("ViTBackbone", use_class_token=False),
                       "max_label_length": LENGTH - 1, "decoder_hidden_dim": 16,
                       "num_decoder_layers": 1, "decoder_mlp_dim": 32,
                       "dropout_rate": 0.0, "attention_dropout": 0.0},
    "BLIP2Backbone": {
        "vision_encoder": sub("BLIP2VisionEncoder", image_size=SIDE, patch_size=8,
                              hidden_dim=16, intermediate_dim=32, use_patch_bias=True,
                              use_class_token=True, use_mha_bias=True, use_mlp_bias=True,
                              dropout_rate=0.0, layer_norm_epsilon=1e-6,
                              initializer_range=0.02),
        "qformer": sub("BLIP2QFormer", num_query_tokens=2, hidden_dim=16,
                       intermediate_dim=32, vision_dim=16, cross_attention_frequency=1,
                       layer_norm_epsilon=1e-6),
        "language_model": sub("BLIP2CustomOPT", num_query_tokens=2, qformer_hidden_dim=16,
                              language_projection=None)},
    "DFineBackbone": {
        "backbone": sub("HGNetV2Backbone", out_features=["stage1", "stage2"]),
        "decoder_in_channels": [16, 16], "encoder_hidden_dim": 16, "num_denoising": 0,
        "num_labels": 4, "hidden_dim": 16, "learn_initial_query": False, "num_queries": 10,
        "anchor_image_size": (SIDE, SIDE), "feat_strides": [4, 8],
        "num_feature_levels": 2, "encoder_in_channels": [16, 32],
        "encode_proj_layers": [1], "num_attention_heads": 2, "encoder_ffn_dim": 32,
        "num_encoder_layers": 1, "hidden_expansion": 0.5, "depth_multiplier": 0.5,
        "eval_idx": -1, "num_decoder_layers": 2, "decoder_attention_heads": 2,
        "decoder_ffn_dim": 32, "decoder_n_points": [2, 2], "lqe_hidden_dim": 16,
        "num_lqe_layers": 2, "out_features": ["stage1", "stage2"],
        "image_shape": (SIDE, SIDE, 3), "seed": 0},
    "SAMBackbone": {
        "image_encoder": sub("ViTDetBackbone", hidden_size=16, intermediate_dim=32,
                             patch_size=16, num_output_channels=8, window_size=2,
                             image_shape=(SIDE, SIDE, 3)),
        "prompt_encoder": sub("SAMPromptEncoder", hidden_size=8,
                              image_embedding_size=(SIDE // 16, SIDE // 16),
                              input_image_size=(SIDE, SIDE), mask_in_channels=16),
        "mask_decoder": sub("SAMMaskDecoder", hidden_size=8, intermediate_dim=16,
                            num_heads=2, embedding_dim=8, num_multimask_outputs=3,
                            iou_head_depth=2, iou_head_hidden_dim=8)},
    "SAM3PromptableConceptBackbone": {
        "vision_encoder": sub("SAM3VisionEncoder", image_shape=(28, 28, 3), patch_size=14,
                              fpn_hidden_dim=16, fpn_scale_factors=[4.0, 2.0, 1.0, 0.5],
                              pretrain_image_shape=(42, 42, 3), window_size=2,
                              global_attn_indexes=[1]),
        "text_encoder": sub("SAM3TextEncoder"),
        "geometry_encoder": sub("SAM3GeometryEncoder", roi_size=7),
        "detr_encoder": sub("SAM3DetrEncoder"),
        "detr_decoder": sub("SAM3DetrDecoder", image_shape=(28, 28, 3), patch_size=14,
                            num_queries=8),
        "mask_decoder": sub("SAM3MaskDecoder", num_upsampling_stages=3)},
    "StableDiffusion3Backbone": {
        "mmdit_patch_size": 2, "mmdit_hidden_dim": 16, "mmdit_num_layers": 1,
        "mmdit_num_heads": 2, "mmdit_position_size": 8, "mmdit_qk_norm": None,
        "mmdit_dual_attention_indices": None,
        "vae": sub("VAEBackbone", "keras_hub.src.models.vae.vae_backbone",
                   encoder_num_filters=[32, 32], encoder_num_blocks=[1, 1],
                   decoder_num_filters=[32, 32], decoder_num_blocks=[1, 1],
                   sampler_method="mode"),
        "clip_l": sub("CLIPTextEncoder", name="clip_l", intermediate_output_index=0),
        "clip_g": sub("CLIPTextEncoder", name="clip_g", intermediate_activation="gelu",
                      intermediate_output_index=0),
        "image_shape": (SIDE, SIDE, 3)},
}

# Backbone -> input -> its length, where LENGTH does not fit (Moonshine's stem convolves
# raw audio with strides 64, 3 and 2).
INPUT_LENGTHS: dict[str, dict[str, int]] = {
    "MoonshineBackbone": {"encoder_input_values": 4000, "encoder_padding_mask": 4000},
    # its text encoder's sequence: max_sequence_length (32) long
    "SAM3PromptableConceptBackbone": {"token_ids": 32, "padding_mask": 32}}
# Backbone -> input -> its shape (after the batch), where the specs leave more than a
# length open (SAM's prompts: one point, one box, no mask, as keras-hub's test).
INPUT_SHAPES: dict[str, dict[str, tuple]] = {
    "SAMBackbone": {"points": (1, 2), "labels": (1,), "boxes": (1, 2, 2),
                    "masks": (0, SIDE, SIDE, 1)},
    "SAM3PromptableConceptBackbone": {"boxes": (1, 5), "box_labels": (1,)},
}
# Backbone -> input -> the one value it holds, where a random id does not fit (SAM 3's box
# labels: 1, a positive box, as keras-hub's test; its box mask sums them).
INPUT_VALUES: dict[str, dict[str, int]] = {
    "SAM3PromptableConceptBackbone": {"box_labels": 1}}

# Backbones not built here, and why.
LEFT_OUT: dict[str, str] = {
    "FeaturePyramidBackbone": "an abstract base class (no model of its own)",
    "PARSeqBackbone CausalLM": "keras-hub builds it only with its tokenizer (it compiles "
                               "its loss with the tokenizer's padding id), and the tokenizer "
                               "needs tensorflow-text, which this environment does not have "
                               "(its backbone's row is checked)",
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


def _arguments(name: str, cls: type, size: str = "tiny",
               given: dict[str, Any] | None = None) -> dict[str, Any]:
    """The backbone's constructor arguments: `SMALL` by name, then `OVERRIDES` (then
    `given`: a sub-model's own); a required argument none gives raises (the backbone is
    left out, with it named)."""
    overrides = {**OVERRIDES.get(name, {}), **(given or {})}
    kwargs, missing = {}, []
    for p in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        if size == "small" and p.name in WIDER:
            kwargs[p.name] = WIDER[p.name]
        elif p.name in overrides:
            kwargs[p.name] = overrides[p.name]
        elif p.name in SMALL:
            kwargs[p.name] = SMALL[p.name]
        elif p.default is inspect.Parameter.empty:
            missing.append(p.name)
    for key, value in overrides.items():
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
               vocabulary: int = VOCABULARY, shapes: dict[str, tuple] | None = None,
               values: dict[str, int] | None = None) -> Any:
    """A batch for `model` from its input specs: ids below the vocabulary, masks of
    ones, floats from a normal distribution; unknown lengths `length` (or `lengths`,
    by input name; or the whole shape after the batch, `shapes`, by input name); an
    input of `values` holds that value alone."""
    rng = np.random.default_rng(seed)
    lengths = lengths or {}
    shapes = shapes or {}
    values = values or {}
    def one(spec):
        n = lengths.get(spec.name, length)
        shape = [batch if i == 0 and d is None else (n if d is None else d)
                 for i, d in enumerate(spec.shape)]
        if spec.name in shapes:
            shape = [shape[0], *shapes[spec.name]]
        if spec.name in values:
            return np.full(shape, values[spec.name], str(spec.dtype))
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
    for key in (backbone_name, name):
        if key in LEFT_OUT:
            raise LeftOut(LEFT_OUT[key])
    cls = _hub_backbones()[backbone_name]
    kwargs = _arguments(backbone_name, cls, size)

    def make() -> keras.Model:
        keras.utils.set_random_seed(0)
        backbone = cls(**_built(kwargs))
        # Dropout keras-hub fixes in code (MiT's Mix-FFN: 0.1): none, as SMALL's
        # "dropout", so that the float64 twin draws the same (no) masks.
        for layer in backbone._flatten_layers(include_self=False, recursive=True):
            if isinstance(layer, keras.layers.Dropout) and layer.rate > 0:
                layer.rate = 0.0
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
                 inputs_for(model, INPUT_LENGTHS.get(backbone_name),
                            shapes=INPUT_SHAPES.get(backbone_name),
                            values=INPUT_VALUES.get(backbone_name), **shape), make)


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
