// The group-norm ops' attributes, read and checked in one place for every
// reader: the shape function (InferenceContext), the kernels and XLA
// lowerings (OpKernelConstruction) and the FFI handlers (group_norm_ffi.cc's
// attributes). Any Ctx with GetAttr.
//   activation  'Identity' or an activation of activation_list.h with its own
//               attributes (activation_choice_attrs.h);
//   epsilon     finite and > 0;
//   axis        the channel axis, checked against x's rank by LayoutOf;
//   groups      >= 1, checked against the channels by LayoutOf.

#ifndef TF_OPS_CC_GROUP_NORM_GROUP_NORM_ATTRS_H_
#define TF_OPS_CC_GROUP_NORM_GROUP_NORM_ATTRS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "tf_ops/cc/activation/activation_choice.h"
#include "tf_ops/cc/activation/activation_choice_attrs.h"
#include "tf_ops/cc/group_norm/group_norm_checks.h"

namespace tf_ops {
namespace group_norm {

struct GroupNormAttrs {
  ActivationChoice activation;
  float epsilon = 1e-3f;
  int axis = -1;
  int64_t groups = 32;
};

template <typename Ctx>
absl::Status ReadGroupNormAttrs(Ctx* ctx, const std::string& op,
                                GroupNormAttrs* attrs) {
  TF_RETURN_IF_ERROR(ReadActivationChoice(ctx, op, &attrs->activation));
  TF_RETURN_IF_ERROR(ctx->GetAttr("epsilon", &attrs->epsilon));
  TF_RETURN_IF_ERROR(CheckEpsilon(op, attrs->epsilon));
  TF_RETURN_IF_ERROR(ctx->GetAttr("axis", &attrs->axis));
  return ctx->GetAttr("groups", &attrs->groups);
}

}  // namespace group_norm
}  // namespace tf_ops

#endif  // TF_OPS_CC_GROUP_NORM_GROUP_NORM_ATTRS_H_
