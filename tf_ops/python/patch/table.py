"""The patch table: every attribute of Keras and keras-hub that `tf_ops.patch_keras()`
replaces, one `Entry` each, in one list (`ENTRIES`).

A new kernel family reaches models by a line here: its entry names what it replaces
(``"module:Class.call"``), its family, and a factory that makes the replacement from
the original (which it falls back to for what the ops do not cover). Entries whose
kernels have not landed yet are listed with ``pending`` (the report shows them as left,
with the reason), so landing one is filling in its ``replacement`` (none is pending now).
"""

from __future__ import annotations

from tf_ops.python.patch import (activations, attention, causal_lm, functional, keras_backend, keras_hub,
                                 keras_hub_masks, keras_hub_norms, keras_layers, optimizers)
from tf_ops.python.group_norm import patch as group_norm
from tf_ops.python.patch.entry import FAMILIES, Entry

_NN = keras_backend.NN
_LAYERS = "keras.src.layers"
_HUB = "keras_hub.src"

ENTRIES: tuple[Entry, ...] = (
    # --- activation: Keras's backend functions, so every name, function and layer ------
    *(Entry(f"{_NN}:{name}", ("activation",), keras_backend.ACTIVATION_FACTORIES[name],
            f"tf_ops.{fn} (one kernel each way)", label=f"keras activation {name!r}")
      for name, (fn, _) in keras_backend.ACTIVATIONS.items()),
    Entry(keras_backend.MISH, ("activation",), keras_backend.make_mish,
          "tf_ops.mish", label="keras activation 'mish'"),
    Entry(activations.ACTIVATION_CALL, ("activation",), activations.make_activation_call,
          "another package's function that is a tf_ops activation (keras-hub's "
          "gelu_approximate, CLIP's quick_gelu): its kernel", label="keras.layers.Activation"),
    # --- dense -------------------------------------------------------------------------
    Entry(functional.DENSE_CALL, ("dense",), keras_layers.make_dense_call,
          "matmul, then bias + activation in one TfOps>Bias{Act} op (forward and backward)",
          label="keras.layers.Dense"),
    Entry(keras_layers.EINSUM_DENSE_CALL, ("dense",),
          keras_layers.make_einsum_dense_call,
          "the einsum, then the bias in one BiasAdd (its gradient one BiasAddGrad)",
          label="keras.layers.EinsumDense (MultiHeadAttention's projections)"),
    # --- batch_norm --------------------------------------------------------------------
    Entry(functional.BATCH_NORM_CALL, ("batch_norm",), keras_layers.make_batch_norm_call,
          "TfOps>BatchNormTraining / BatchNormInference, with the activation after it fused",
          label="keras.layers.BatchNormalization"),
    # --- conv, and a batch norm with its moving statistics folded into the conv -------
    Entry(functional.CONV_CALL, ("batch_norm", "conv"), keras_layers.make_conv_call,
          "one group per channel: TensorFlow's depthwise convolution (conv); a "
          "BatchNormalization after it folded in at inference (batch_norm)",
          label="keras.layers.Conv1D/2D/3D"),
    Entry(functional.DEPTHWISE_CONV_CALL, ("batch_norm",), keras_layers.make_conv_call,
          "a BatchNormalization after it folded in at inference: the kernel scaled, then "
          "one bias + activation op", label="keras.layers.DepthwiseConv1D/2D (+ batch norm)"),
    # --- an add and the ReLU after it (a residual block's), paired by the graph runner -
    Entry(functional.ADD_MERGE, ("activation",), keras_layers.make_add_merge,
          "with the activation layer after it (ReLU), one TfOps>Add{Act}: the sum never "
          "in memory, only the output kept for the backward pass",
          label="keras.layers.Add (+ the activation after it)"),
    Entry(functional.CUSTOM_SCALE_CALL, ("activation",), keras_layers.make_custom_scale_call,
          "x + r * scale with the activation layer after it in one TfOps>Add{Act}",
          label="InceptionResNetV2's CustomScaleLayer (+ the activation after it)"),
    # These families fuse an activation layer into the layer before it.
    Entry(functional.RUN_THROUGH_GRAPH, ("activation", "batch_norm", "dense"),
          functional.make_run_through_graph,
          "fuses an activation layer into the BatchNormalization, Dense or Add before it, "
          "and a BatchNormalization at inference into the convolution before it",
          label="functional models: layer + activation pairs, conv + batch norm folds"),
    # --- norm --------------------------------------------------------------------------
    Entry(f"{_LAYERS}.normalization.layer_normalization:LayerNormalization.call", ("norm",),
          keras_layers.make_layer_norm_call, "TfOps>LayerNorm",
          label="keras.layers.LayerNormalization"),
    Entry(f"{_LAYERS}.normalization.rms_normalization:RMSNormalization.call", ("norm",),
          keras_layers.make_rms_norm_call, "TfOps>RmsNorm",
          label="keras.layers.RMSNormalization"),
    *(Entry(target, ("norm",), keras_hub.make_rms_norm_call(offset, output),
            "TfOps>RmsNorm" + (" (with 1 + scale)" if offset else ""), requires="keras_hub",
            label="keras_hub " + target.split(":")[1].removesuffix(".call"))
      for target, offset, output in keras_hub.RMS_NORMS),
    Entry(group_norm.TARGET, ("norm",), group_norm.make_call,
          "TfOps>GroupNorm, with the activation called on its output fused (graphs)",
          label="keras.layers.GroupNormalization"),
    # keras-hub's other norm classes, found by running them (T5LayerNorm, Gemma 3's, ...)
    Entry(keras_hub_norms.TARGET, ("norm",), does="TfOps>RmsNorm or TfOps>LayerNorm, where "
          "running the class shows it computes one (else its own call)", requires="keras_hub",
          label="keras_hub's other norm classes (found by what they compute)",
          **keras_hub_norms.entry_kwargs(tuple(t for t, _, _ in keras_hub.RMS_NORMS))),
    # --- softmax -----------------------------------------------------------------------
    Entry(f"{_LAYERS}.activations.softmax:Softmax.call", ("softmax",),
          keras_layers.make_softmax_call, "TfOps>Softmax / ScaledMaskedSoftmax (masks)",
          label="keras.layers.Softmax"),
    # --- attention: Keras's dot_product_attention, and keras-hub's layers made to call it --
    Entry(f"{_NN}:dot_product_attention", ("attention",), attention.make_dot_product_attention,
          "TfOps>Attention: flash attention, no [batch, heads, T, S] tensor forward or "
          "backward (flash_attention=True and the soft cap accepted)",
          label="keras.ops.dot_product_attention (MultiHeadAttention)"),
    *(Entry(f"{module}:dot_product_attention", ("attention",),
            attention.make_ops_dot_product_attention,
            "Keras's, but a logit soft cap reaches the fused op (Keras raises on TensorFlow)",
            label=f"{module}.dot_product_attention")
      for module in attention.ops_namespaces()),
    *(Entry(f"{module}:fused_attention_op_available", ("attention",),
            attention.make_fused_available,
            "true (without attention dropout): the layer calls dot_product_attention",
            requires="keras_hub",
            label=f"keras_hub {module.split('.')[-1]}.fused_attention_op_available")
      for module in attention.hub_targets()[0]),
    *(Entry(f"{owner}._use_fused_attention_op", ("attention",), attention.make_use_fused,
            "true on the CPU too (without attention dropout)", requires="keras_hub",
            label=f"keras_hub {owner.split(':')[1]}._use_fused_attention_op")
      for owner in attention.hub_targets()[1]),
    Entry(keras_hub_masks.TARGET, ("attention",), keras_hub_masks.replacement,
          "marked, so the fused op takes the mask as causal + key padding: no [batch, T, S] "
          "mask computed", requires="keras_hub", discover=keras_hub_masks.discover,
          label="keras_hub compute_causal_mask / merge_padding_and_attention_mask"),
    Entry(f"{_NN}:softmax", ("softmax",), keras_backend.make_softmax, "TfOps>Softmax",
          label="keras activation 'softmax'"),
    # --- loss --------------------------------------------------------------------------
    Entry(f"{_NN}:sparse_categorical_crossentropy", ("loss",),
          keras_backend.make_sparse_categorical_crossentropy,
          "TfOps>SparseSoftmaxCrossEntropy (loss and gradient in one pass)",
          label="keras sparse categorical cross-entropy"),
    # --- rotary: keras-hub's RotaryEmbedding and LlamaRotaryEmbedding (inherits call) ----
    Entry(keras_hub.ROTARY_CALL, ("rotary",), keras_hub.make_rotary_call,
          "TfOps>RotaryEmbedding (one op forward, one backward)", requires="keras_hub",
          label="keras_hub RotaryEmbedding"),
    # --- lm_head: keras-hub's CausalLM.fit (at the step: compute_loss gets the logits) ----
    Entry(causal_lm.TRAIN_STEP, ("lm_head",), causal_lm.make_train_step,
          "fit: the head (tied or not) and its loss in tf_ops.head_cross_entropy, no "
          "[batch, length, vocab] logits on the tape", requires="keras_hub",
          label="keras_hub CausalLM head + loss (fit)"),
    # --- optimizer: Keras's Adam (AdamW inherits its update) ----------------------------
    Entry(optimizers.ADAM_UPDATE_STEP, ("optimizer",), optimizers.make_adam_update_step,
          "Keras's update compiled by XLA, one program per weight shape: one loop "
          "(Keras's: ~10 kernels)",
          label="keras.optimizers.Adam (update step)"),
)

assert len({e.target for e in ENTRIES}) == len(ENTRIES), "one entry per target"
assert {f for e in ENTRIES for f in e.families} == set(FAMILIES), "every family has entries"
