// The batch normalization + activation ops (math: batch_norm_math.h;
// signatures and shape rules: batch_norm_checks.h). x, y and their gradients:
// T in {half, bfloat16, float, double}; the per-channel tensors: U, float
// (double for double x). Shapes are checked here where known, and by the
// kernels and XLA lowerings at run time.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tf_ops/cc/batch_norm/batch_norm_attrs.h"
#include "tf_ops/cc/batch_norm/batch_norm_checks.h"

namespace tf_ops {
namespace {

using tensorflow::DataType;
using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// The shape function of each op: checks the attributes, the rank and axis of
// x, U against T, that the per-channel inputs are 1-D with one element per
// channel and that y_backprop has x's shape, as far as the shapes are known;
// sets the outputs' shapes.
template <BatchNormPhase kPhase>
absl::Status ShapeFn(InferenceContext* c) {
  const std::string op = BatchNormOpName(kPhase);
  const BatchNormInputs in = BatchNormInputsOf(kPhase);
  BatchNormAttrs attrs;
  TF_RETURN_IF_ERROR(ReadBatchNormAttrs(c, op, &attrs));
  DataType t, u;
  TF_RETURN_IF_ERROR(c->GetAttr("T", &t));
  TF_RETURN_IF_ERROR(c->GetAttr("U", &u));
  if ((t == tensorflow::DT_DOUBLE) != (u == tensorflow::DT_DOUBLE)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the per-channel tensors must be float64 for float64 x and "
        "float32 otherwise, got x ", tensorflow::DataTypeString(t), " and ",
        tensorflow::DataTypeString(u)));
  }
  ShapeHandle x = c->input(in.x);
  DimensionHandle channels = c->UnknownDim();
  if (c->RankKnown(x)) {
    int axis = 0;
    TF_RETURN_IF_ERROR(NormalizeBatchNormAxis(op, attrs.axis, c->Rank(x), &axis));
    channels = c->Dim(x, axis);
  }
  for (size_t k = 0; k < in.channel_names.size(); ++k) {
    const char* name = in.channel_names[k];
    const ShapeHandle input = c->input(in.x + 1 + static_cast<int>(k));
    ShapeHandle v;
    if (!c->WithRank(input, 1, &v).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ", name, " must be 1-D (one element per channel), "
                       "got shape ", c->DebugString(input)));
    }
    DimensionHandle merged;
    if (!c->Merge(channels, c->Dim(v, 0), &merged).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": ", name, " must have one element per channel (axis ",
          attrs.axis, " of x), got x ", c->DebugString(x), " and ", name, " ",
          c->DebugString(v)));
    }
    channels = merged;
  }
  if (in.count >= 0) {
    ShapeHandle count;
    if (!c->WithRank(c->input(in.count), 0, &count).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": count must be a scalar, got shape ",
                       c->DebugString(c->input(in.count))));
    }
  }
  if (IsGradPhase(kPhase)) {
    ShapeHandle merged;
    if (!c->Merge(c->input(0), x, &merged).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": y_backprop and x must have the same shape, got ",
          c->DebugString(c->input(0)), " and ", c->DebugString(x)));
    }
    x = merged;
  }
  c->set_output(0, x);
  if (BatchNormOutputs(kPhase) == 3) {
    c->set_output(1, c->Vector(channels));
    c->set_output(2, c->Vector(channels));
  }
  return absl::OkStatus();
}

}  // namespace

#define TF_OPS_BATCH_NORM_ATTRS                                      \
  Attr("T: {half, bfloat16, float, double}")                         \
      .Attr("U: {float, double}")                                    \
      .Attr("epsilon: float = 0.001")                                \
      .Attr("axis: int = -1")                                        \
      .Attr("activation: string = 'Identity'")                       \
      .Attr("alpha: float = 0.2")                                    \
      .Attr("beta: float = 1.0")                                     \
      .Attr("approximate: bool = false")

REGISTER_OP("TfOps>BatchNormTraining")
    .Input("x: T")
    .Input("scale: U")
    .Input("offset: U")
    .Output("y: T")
    .Output("batch_mean: U")
    .Output("batch_variance: U")
    .TF_OPS_BATCH_NORM_ATTRS
    .SetShapeFn(ShapeFn<BatchNormPhase::kTraining>)
    .Doc("y = f(x * s + t), s = scale * rsqrt(batch_variance + epsilon), t = "
         "offset - batch_mean * s, with the batch mean and biased variance of "
         "x over every axis but `axis` (accumulated in float32 for half and "
         "bfloat16, float64 otherwise; bit-identical for any thread count), "
         "f = `activation` (alpha: LeakyRelu, Elu, Celu; beta: Swish; "
         "approximate: Gelu). Two passes over x.");

// The training grad's inputs (the input grad's first ones).
#define TF_OPS_BATCH_NORM_TRAINING_GRAD_INPUTS \
  Input("y_backprop: T")                      \
      .Input("x: T")                          \
      .Input("scale: U")                      \
      .Input("offset: U")                     \
      .Input("batch_mean: U")                 \
      .Input("batch_variance: U")             \
      .Input("mean_backprop: U")              \
      .Input("variance_backprop: U")

REGISTER_OP("TfOps>BatchNormTrainingGrad")
    .TF_OPS_BATCH_NORM_TRAINING_GRAD_INPUTS
    .Output("x_backprop: T")
    .Output("scale_backprop: U")
    .Output("offset_backprop: U")
    .TF_OPS_BATCH_NORM_ATTRS
    .SetShapeFn(ShapeFn<BatchNormPhase::kTrainingGrad>)
    .Doc("The gradients of TfOps>BatchNormTraining's three outputs back to x, "
         "scale and offset (the batch statistics as functions of x), "
         "recomputing the normalised value and f' from x. Two passes over x "
         "and y_backprop.");

REGISTER_OP("TfOps>BatchNormInference")
    .Input("x: T")
    .Input("scale: U")
    .Input("offset: U")
    .Input("mean: U")
    .Input("variance: U")
    .Output("y: T")
    .TF_OPS_BATCH_NORM_ATTRS
    .SetShapeFn(ShapeFn<BatchNormPhase::kInference>)
    .Doc("y = f(x * s + t), s = scale * rsqrt(variance + epsilon), t = offset "
         "- mean * s, with the given (moving) statistics. One pass.");

REGISTER_OP("TfOps>BatchNormInferenceGrad")
    .Input("y_backprop: T")
    .Input("x: T")
    .Input("scale: U")
    .Input("offset: U")
    .Input("mean: U")
    .Input("variance: U")
    .Output("x_backprop: T")
    .Output("scale_backprop: U")
    .Output("offset_backprop: U")
    .TF_OPS_BATCH_NORM_ATTRS
    .SetShapeFn(ShapeFn<BatchNormPhase::kInferenceGrad>)
    .Doc("x_backprop = s * dz, scale_backprop = rsqrt(variance + epsilon) * "
         "sum(dz * (x - mean)), offset_backprop = sum(dz), dz = y_backprop * "
         "f'(x * s + t), with the statistics held fixed. One pass.");

REGISTER_OP("TfOps>BatchNormTrainingInputGrad")
    .TF_OPS_BATCH_NORM_TRAINING_GRAD_INPUTS
    .Input("scale_backprop: U")
    .Input("offset_backprop: U")
    .Input("count: U")
    .Output("x_backprop: T")
    .TF_OPS_BATCH_NORM_ATTRS
    .SetShapeFn(ShapeFn<BatchNormPhase::kTrainingInputGrad>)
    .Doc("TfOps>BatchNormTrainingGrad's second pass alone, for statistics of "
         "a batch that x is part of (synchronized batch norm): x_backprop = "
         "s * dz + c1 * (x - batch_mean) + c0, c1 = (2 * variance_backprop - "
         "s * r * scale_backprop) / count, c0 = (mean_backprop - s * "
         "offset_backprop) / count, r = rsqrt(batch_variance + epsilon), with "
         "the parameter and statistics gradients and the element count of "
         "the whole batch (summed over replicas). One pass.");

}  // namespace tf_ops
