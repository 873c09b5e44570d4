// The fused ops every activation in activation_list.h gets besides its three
// plain ops (activation_ops.cc calls RegisterFusedOps with the activation's
// attributes, so they are stated once):
//   TfOps>BiasAct       features: T, bias: T             -> activations: T
//   TfOps>BiasActGrad   gradients: T, features: T, bias: T
//                                     -> backprops: T, bias_backprops: T
//   TfOps>AddAct        features: T, residual: T          -> activations: T
//   TfOps>GatedAct      features: T                      -> activations: T
//   TfOps>GatedActGrad  gradients: T, features: T        -> backprops: T
//   TfOps>BiasGatedAct  features: T, bias: T             -> activations: T
//   TfOps>BiasGatedActGrad gradients: T, features: T, bias: T
//                                     -> backprops: T, bias_backprops: T
// with the activation's attributes (bias ops also data_format) and T in
// {half, bfloat16, float, double}. The math is fused_math.h's; kernels are in
// fused_kernels.cc, XLA lowerings in fused_xla.cc, the Python in
// tf_ops/python/fused/functions.py.
//
// Shapes, checked here when known and by the kernels at run time:
//   bias ops: bias is 1-D with as many elements as the channel axis of the
//     features: the last axis (NHWC, features of any rank >= 1) or axis 1
//     (NCHW, rank >= 2); gradients has the features' shape.
//   add ops: the residual has the features' shape (no broadcasting); no grad
//     op of their own (the plain grad op at the output or at x + a).
//   gated ops: the features' last axis is even; the activations have half of
//     it; gradients has the activations' shape. BiasGated: the bias is 1-D
//     with one element per feature of the last axis (it is added before the
//     split).

#ifndef TF_OPS_CC_FUSED_OP_DEFS_H_
#define TF_OPS_CC_FUSED_OP_DEFS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tf_ops/cc/activation/activation_attrs.h"

namespace tf_ops {

constexpr char kDataFormatAttr[] = "data_format: {'NHWC', 'NCHW'} = 'NHWC'";

namespace fused_shapes {

using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// Bias ops: checks features (input `features_index`) against the bias (input
// `bias_index`); sets *features to the features' shape.
inline absl::Status CheckBias(InferenceContext* c, const std::string& op,
                              int features_index, int bias_index,
                              ShapeHandle* features) {
  std::string data_format;
  TF_RETURN_IF_ERROR(c->GetAttr("data_format", &data_format));
  const bool nchw = data_format == "NCHW";
  ShapeHandle x = c->input(features_index);
  ShapeHandle bias = c->input(bias_index);
  if (!c->WithRankAtLeast(x, nchw ? 2 : 1, &x).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": features must have rank >= ", nchw ? 2 : 1, " for data_format ",
        data_format, ", got shape ", c->DebugString(c->input(features_index))));
  }
  if (!c->WithRank(bias, 1, &bias).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": bias must be 1-D, got shape ",
                     c->DebugString(c->input(bias_index))));
  }
  if (c->RankKnown(x)) {
    const DimensionHandle channels =
        c->Dim(x, nchw ? 1 : c->Rank(x) - 1);
    DimensionHandle merged;
    if (!c->Merge(channels, c->Dim(bias, 0), &merged).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": bias must have one element per channel (axis ",
          nchw ? "1" : "-1", " of the features for data_format ", data_format,
          "), got features ", c->DebugString(x), " and bias ",
          c->DebugString(bias)));
    }
  }
  *features = x;
  return absl::OkStatus();
}

template <typename Act>
absl::Status BiasShape(InferenceContext* c) {
  Act act;
  TF_RETURN_IF_ERROR(ReadAttrs(c, &act));
  ShapeHandle x;
  TF_RETURN_IF_ERROR(CheckBias(c, absl::StrCat("TfOps>Bias", Act::kName), 0,
                               1, &x));
  c->set_output(0, x);
  return absl::OkStatus();
}

template <typename Act>
absl::Status BiasGradShape(InferenceContext* c) {
  Act act;
  TF_RETURN_IF_ERROR(ReadAttrs(c, &act));
  const std::string op = absl::StrCat("TfOps>Bias", Act::kName, "Grad");
  ShapeHandle x;
  TF_RETURN_IF_ERROR(CheckBias(c, op, 1, 2, &x));
  ShapeHandle merged;
  if (!c->Merge(c->input(0), x, &merged).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": gradients and features must have the same shape, got "
        "gradients ", c->DebugString(c->input(0)), " and features ",
        c->DebugString(c->input(1))));
  }
  c->set_output(0, merged);
  c->set_output(1, c->input(2));
  return absl::OkStatus();
}

// Add ops: features and residual of one shape.
template <typename Act>
absl::Status AddShape(InferenceContext* c) {
  Act act;
  TF_RETURN_IF_ERROR(ReadAttrs(c, &act));
  ShapeHandle merged;
  if (!c->Merge(c->input(0), c->input(1), &merged).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TfOps>Add", Act::kName,
        ": features and residual must have the same shape (no broadcasting), "
        "got features ", c->DebugString(c->input(0)), " and residual ",
        c->DebugString(c->input(1))));
  }
  c->set_output(0, merged);
  return absl::OkStatus();
}

// Gated ops: the activations' shape from the features' (last axis halved).
inline absl::Status GatedOutputShape(InferenceContext* c,
                                     const std::string& op, int features_index,
                                     ShapeHandle* out) {
  ShapeHandle x = c->input(features_index);
  if (!c->WithRankAtLeast(x, 1, &x).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": features must have rank >= 1, got shape ", c->DebugString(x)));
  }
  if (!c->RankKnown(x)) {
    *out = c->UnknownShape();
    return absl::OkStatus();
  }
  const DimensionHandle last = c->Dim(x, -1);
  DimensionHandle half = c->UnknownDim();
  if (c->ValueKnown(last)) {
    if (c->Value(last) % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": the last axis of features must be even (two halves: the "
          "activation's input and the gate), got shape ", c->DebugString(x)));
    }
    half = c->MakeDim(c->Value(last) / 2);
  }
  return c->ReplaceDim(x, -1, half, out);
}

// BiasGated ops: the bias (input `bias_index`) against the features' last
// axis (input `features_index`).
inline absl::Status CheckGatedBias(InferenceContext* c, const std::string& op,
                                   int features_index, int bias_index) {
  ShapeHandle bias;
  if (!c->WithRank(c->input(bias_index), 1, &bias).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": bias must be 1-D, got shape ",
                     c->DebugString(c->input(bias_index))));
  }
  ShapeHandle x = c->input(features_index);
  if (!c->RankKnown(x)) return absl::OkStatus();
  DimensionHandle merged;
  if (!c->Merge(c->Dim(x, -1), c->Dim(bias, 0), &merged).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": bias must have one element per feature of the last axis (it "
        "is added before the split), got features ", c->DebugString(x),
        " and bias ", c->DebugString(bias)));
  }
  return absl::OkStatus();
}

// Gated{Act} (kBias false) and BiasGated{Act} (true).
template <typename Act, bool kBias>
absl::Status GatedShape(InferenceContext* c) {
  Act act;
  TF_RETURN_IF_ERROR(ReadAttrs(c, &act));
  const std::string op =
      absl::StrCat("TfOps>", kBias ? "BiasGated" : "Gated", Act::kName);
  ShapeHandle out;
  TF_RETURN_IF_ERROR(GatedOutputShape(c, op, 0, &out));
  if (kBias) TF_RETURN_IF_ERROR(CheckGatedBias(c, op, 0, 1));
  c->set_output(0, out);
  return absl::OkStatus();
}

template <typename Act, bool kBias>
absl::Status GatedGradShape(InferenceContext* c) {
  Act act;
  TF_RETURN_IF_ERROR(ReadAttrs(c, &act));
  const std::string op =
      absl::StrCat("TfOps>", kBias ? "BiasGated" : "Gated", Act::kName, "Grad");
  ShapeHandle out, merged;
  TF_RETURN_IF_ERROR(GatedOutputShape(c, op, 1, &out));
  if (kBias) TF_RETURN_IF_ERROR(CheckGatedBias(c, op, 1, 2));
  if (!c->Merge(c->input(0), out, &merged).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": gradients must have the shape of the activations (the "
        "features' with the last axis halved), got gradients ",
        c->DebugString(c->input(0)), " and features ",
        c->DebugString(c->input(1))));
  }
  c->set_output(0, c->input(1));
  if (kBias) c->set_output(1, c->input(2));
  return absl::OkStatus();
}

}  // namespace fused_shapes

// Registers Act's fused ops with its attributes `attrs` (REGISTER_OP syntax)
// and the dtype attribute `dtypes`; returns true.
template <typename Act>
bool RegisterFusedOps(const std::vector<const char*>& attrs,
                      const char* dtypes) {
  using tensorflow::register_op::OpDefBuilderWrapper;
  const std::string act = Act::kName;
  const std::string bias = "TfOps>Bias" + act;
  const std::string gated = "TfOps>Gated" + act;
  auto add_attrs = [&](OpDefBuilderWrapper& op) {
    for (const char* attr : attrs) op.Attr(attr);
    op.Attr(dtypes);
  };

  OpDefBuilderWrapper bias_op(bias.c_str());
  bias_op.Input("features: T").Input("bias: T").Output("activations: T");
  add_attrs(bias_op);
  bias_op.Attr(kDataFormatAttr)
      .SetShapeFn(fused_shapes::BiasShape<Act>)
      .Doc("activations = f(features + bias) for f = TfOps>" + act +
           ", in one pass; bias has one element per channel (the last axis, "
           "or axis 1 for data_format NCHW).");
  bias_op();

  OpDefBuilderWrapper bias_grad((bias + "Grad").c_str());
  bias_grad.Input("gradients: T")
      .Input("features: T")
      .Input("bias: T")
      .Output("backprops: T")
      .Output("bias_backprops: T");
  add_attrs(bias_grad);
  bias_grad.Attr(kDataFormatAttr)
      .SetShapeFn(fused_shapes::BiasGradShape<Act>)
      .Doc("backprops = gradients * f'(features + bias) for f = TfOps>" + act +
           ", and bias_backprops = its sum over every axis but the channel "
           "axis (accumulated in float32 for half and bfloat16, float64 "
           "otherwise; bit-identical for any thread count), in one pass.");
  bias_grad();

  // The add op: a residual sum and the activation after it (ResNet's
  // add + ReLU) in one pass.
  OpDefBuilderWrapper add_op(("TfOps>Add" + act).c_str());
  add_op.Input("features: T").Input("residual: T").Output("activations: T");
  add_attrs(add_op);
  add_op.SetShapeFn(fused_shapes::AddShape<Act>)
      .Doc("activations = f(features + residual) for f = TfOps>" + act +
           ", in one pass; residual has the features' shape. Its gradient is "
           "the plain grad op's (at the activations where they give f', as "
           "ReLU's do, else at features + residual).");
  add_op();

  // Gated ops, without and with a bias added before the split.
  for (const bool with_bias : {false, true}) {
    const std::string name = with_bias ? "TfOps>BiasGated" + act : gated;
    const std::string features =
        with_bias ? "(features + bias)" : "the features";
    OpDefBuilderWrapper gated_op(name.c_str());
    gated_op.Input("features: T");
    if (with_bias) gated_op.Input("bias: T");
    gated_op.Output("activations: T");
    add_attrs(gated_op);
    gated_op
        .SetShapeFn(with_bias ? fused_shapes::GatedShape<Act, true>
                              : fused_shapes::GatedShape<Act, false>)
        .Doc("activations = f(a) * b for f = TfOps>" + act +
             ", where [a, b] are the two halves of the last axis of " +
             features +
             " (which must be even): the gated linear unit family, in one "
             "pass." +
             (with_bias ? " bias has one element per feature of the last axis."
                        : ""));
    gated_op();

    OpDefBuilderWrapper gated_grad((name + "Grad").c_str());
    gated_grad.Input("gradients: T").Input("features: T");
    if (with_bias) gated_grad.Input("bias: T");
    gated_grad.Output("backprops: T");
    if (with_bias) gated_grad.Output("bias_backprops: T");
    add_attrs(gated_grad);
    gated_grad
        .SetShapeFn(with_bias ? fused_shapes::GatedGradShape<Act, true>
                              : fused_shapes::GatedGradShape<Act, false>)
        .Doc("backprops = [gradients * b * f'(a), gradients * f(a)] for f = "
             "TfOps>" + act + " and [a, b] the halves of the last axis of " +
             features + "," +
             (with_bias ? " and bias_backprops = its sum over every axis but "
                          "the last (accumulated as the Bias ops'),"
                        : "") +
             " in one pass.");
    gated_grad();
  }
  return true;
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_FUSED_OP_DEFS_H_
