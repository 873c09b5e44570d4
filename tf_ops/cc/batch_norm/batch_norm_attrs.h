// The batch-norm ops' attributes, read and checked in one place for both
// moments TensorFlow looks at them: graph building (the shape function's
// InferenceContext) and kernel construction (OpKernelConstruction). Both have
// GetAttr.
//   activation   'Identity' or an activation of activation_list.h, whose own
//                attributes come from `alpha` (LeakyRelu, Elu, Celu), `beta`
//                (Swish) and `approximate` (Gelu), checked by that
//                activation's ReadAttrs (activation_choice_attrs.h, shared
//                with the group-norm ops);
//   epsilon      finite and > 0;
//   axis         the channel axis, checked against the rank where it is known.

#ifndef TF_OPS_CC_BATCH_NORM_BATCH_NORM_ATTRS_H_
#define TF_OPS_CC_BATCH_NORM_BATCH_NORM_ATTRS_H_

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tf_ops/cc/activation/activation_choice.h"
#include "tf_ops/cc/activation/activation_choice_attrs.h"

namespace tf_ops {

struct BatchNormAttrs {
  ActivationChoice activation;
  float epsilon = 1e-3f;
  int axis = -1;
};

template <typename Ctx>
absl::Status ReadBatchNormAttrs(Ctx* ctx, const std::string& op,
                                BatchNormAttrs* attrs) {
  TF_RETURN_IF_ERROR(ReadActivationChoice(ctx, op, &attrs->activation));
  TF_RETURN_IF_ERROR(ctx->GetAttr("epsilon", &attrs->epsilon));
  if (!std::isfinite(attrs->epsilon) || !(attrs->epsilon > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": attribute 'epsilon' must be finite and > 0, got ",
                     attrs->epsilon));
  }
  TF_RETURN_IF_ERROR(ctx->GetAttr("axis", &attrs->axis));
  return absl::OkStatus();
}

// The channel axis in [0, rank), or an error naming the op.
inline absl::Status NormalizeBatchNormAxis(const std::string& op, int axis,
                                           int rank, int* out) {
  if (rank < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": x must have rank >= 2 (a batch axis and a channel axis), got "
        "rank ", rank));
  }
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": attribute 'axis' must be in [", -rank, ", ", rank,
                     ") for x of rank ", rank, ", got ", axis));
  }
  *out = axis < 0 ? axis + rank : axis;
  return absl::OkStatus();
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_BATCH_NORM_BATCH_NORM_ATTRS_H_
