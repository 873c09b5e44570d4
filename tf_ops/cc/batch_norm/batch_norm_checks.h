// The batch-norm ops' signatures and shape rules, stated once for the
// registrations (batch_norm_ops.cc: the shape functions check what is known
// when the graph is built), the kernels (batch_norm_kernels.cc) and the XLA
// lowerings (batch_norm_xla.cc), which check again at run time:
//
//   TfOps>BatchNormTraining      x, scale, offset -> y, batch_mean,
//                                batch_variance
//   TfOps>BatchNormTrainingGrad  y_backprop, x, scale, offset, batch_mean,
//                                batch_variance, mean_backprop,
//                                variance_backprop
//                                -> x_backprop, scale_backprop, offset_backprop
//   TfOps>BatchNormInference     x, scale, offset, mean, variance -> y
//   TfOps>BatchNormInferenceGrad y_backprop, x, scale, offset, mean, variance
//                                -> x_backprop, scale_backprop, offset_backprop
//   TfOps>BatchNormTrainingInputGrad
//                                y_backprop, x, scale, offset, batch_mean,
//                                batch_variance, mean_backprop,
//                                variance_backprop, scale_backprop,
//                                offset_backprop, count -> x_backprop
//
// x of rank >= 2, `axis` in [-rank, rank); every per-channel input 1-D with
// one element per channel (x's size along `axis`); y_backprop of x's shape;
// count a scalar.

#ifndef TF_OPS_CC_BATCH_NORM_BATCH_NORM_CHECKS_H_
#define TF_OPS_CC_BATCH_NORM_BATCH_NORM_CHECKS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ops/cc/batch_norm/batch_norm_attrs.h"
#include "tf_ops/cc/batch_norm/batch_norm_math.h"

namespace tf_ops {

enum class BatchNormPhase {
  kTraining,
  kTrainingGrad,
  kInference,
  kInferenceGrad,
  kTrainingInputGrad,  // the training grad's second pass (synchronized)
};

constexpr const char* BatchNormOpName(BatchNormPhase p) {
  switch (p) {
    case BatchNormPhase::kTraining:
      return "TfOps>BatchNormTraining";
    case BatchNormPhase::kTrainingGrad:
      return "TfOps>BatchNormTrainingGrad";
    case BatchNormPhase::kInference:
      return "TfOps>BatchNormInference";
    case BatchNormPhase::kInferenceGrad:
      return "TfOps>BatchNormInferenceGrad";
    case BatchNormPhase::kTrainingInputGrad:
      return "TfOps>BatchNormTrainingInputGrad";
  }
  return "";
}

constexpr bool IsGradPhase(BatchNormPhase p) {
  return p == BatchNormPhase::kTrainingGrad ||
         p == BatchNormPhase::kInferenceGrad ||
         p == BatchNormPhase::kTrainingInputGrad;
}

// The number of outputs: y or x_backprop, then the per-channel ones.
constexpr int BatchNormOutputs(BatchNormPhase p) {
  return p == BatchNormPhase::kInference ||
                 p == BatchNormPhase::kTrainingInputGrad
             ? 1
             : 3;
}

// Where x is among the inputs (after y_backprop in the grad ops), the names
// of the per-channel inputs that follow it, in order, and the scalar count's
// index (-1: none).
struct BatchNormInputs {
  int x;
  std::vector<const char*> channel_names;  // inputs x + 1, x + 2, ...
  int count = -1;
};
inline BatchNormInputs BatchNormInputsOf(BatchNormPhase p) {
  switch (p) {
    case BatchNormPhase::kTraining:
      return {0, {"scale", "offset"}};
    case BatchNormPhase::kTrainingGrad:
      return {1,
              {"scale", "offset", "batch_mean", "batch_variance",
               "mean_backprop", "variance_backprop"}};
    case BatchNormPhase::kInference:
      return {0, {"scale", "offset", "mean", "variance"}};
    case BatchNormPhase::kInferenceGrad:
      return {1, {"scale", "offset", "mean", "variance"}};
    case BatchNormPhase::kTrainingInputGrad:
      return {1,
              {"scale", "offset", "batch_mean", "batch_variance",
               "mean_backprop", "variance_backprop", "scale_backprop",
               "offset_backprop"},
              10};
  }
  return {0, {}};
}

// x's layout around the channel axis (*axis: in [0, rank)), with every
// per-channel input and y_backprop checked; shape_of(i) is input i's
// TensorShape.
template <typename ShapeOf>
absl::Status BatchNormLayoutOf(BatchNormPhase phase, int axis_attr,
                               const ShapeOf& shape_of,
                               BatchNormLayout* layout, int* axis) {
  const std::string op = BatchNormOpName(phase);
  const BatchNormInputs in = BatchNormInputsOf(phase);
  const tensorflow::TensorShape x = shape_of(in.x);
  TF_RETURN_IF_ERROR(NormalizeBatchNormAxis(op, axis_attr, x.dims(), axis));
  layout->outer = 1;
  layout->inner = 1;
  for (int d = 0; d < *axis; ++d) layout->outer *= x.dim_size(d);
  layout->channels = x.dim_size(*axis);
  for (int d = *axis + 1; d < x.dims(); ++d) layout->inner *= x.dim_size(d);
  for (size_t k = 0; k < in.channel_names.size(); ++k) {
    const tensorflow::TensorShape v = shape_of(in.x + 1 + static_cast<int>(k));
    if (v.dims() != 1 || v.dim_size(0) != layout->channels) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": ", in.channel_names[k],
          " must be 1-D with one element per channel (axis ", axis_attr,
          " of x), got x ", x.DebugString(), " and ", in.channel_names[k],
          " ", v.DebugString()));
    }
  }
  if (in.count >= 0 && shape_of(in.count).dims() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": count must be a scalar, got shape ",
                     shape_of(in.count).DebugString()));
  }
  if (IsGradPhase(phase)) {
    const tensorflow::TensorShape dy = shape_of(0);
    if (dy != x) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": y_backprop and x must have the same shape, got ",
          dy.DebugString(), " and ", x.DebugString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_BATCH_NORM_BATCH_NORM_CHECKS_H_
