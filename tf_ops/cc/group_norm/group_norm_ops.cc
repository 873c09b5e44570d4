// The group normalization + activation ops: TfOps>GroupNorm and its grad op
// (math: group_norm_math.h; layout and checks: group_norm_checks.h). x, y and
// their gradients: T in {half, bfloat16, float, double}; scale (gamma),
// offset (beta), the per-group statistics and the parameter gradients: U,
// float (double for double x). The attributes: group_norm_attrs.h (the
// activation: any of the activation list, activation_choice.h). Shapes are
// checked here where known, and by the kernels at run time.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/types.h"
#include "tf_ops/cc/group_norm/group_norm_attrs.h"
#include "tf_ops/cc/group_norm/group_norm_checks.h"

namespace tf_ops {
namespace group_norm {
namespace {

using tensorflow::DataType;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

std::vector<int64_t> DimsOf(InferenceContext* c, ShapeHandle s) {
  std::vector<int64_t> dims;
  for (int k = 0; k < c->Rank(s); ++k) dims.push_back(c->Value(c->Dim(s, k)));
  return dims;
}

// kGrad: inputs dy, x, scale, offset, mean, rstd; else x, scale, offset.
template <bool kGrad>
absl::Status ShapeFn(InferenceContext* c) {
  const std::string op = kGrad ? "TfOps>GroupNormGrad" : "TfOps>GroupNorm";
  GroupNormAttrs attrs;
  TF_RETURN_IF_ERROR(ReadGroupNormAttrs(c, op, &attrs));
  const int64_t groups = attrs.groups;
  DataType t, u;
  TF_RETURN_IF_ERROR(c->GetAttr("T", &t));
  TF_RETURN_IF_ERROR(c->GetAttr("U", &u));
  if ((t == tensorflow::DT_DOUBLE) != (u == tensorflow::DT_DOUBLE)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": scale, offset and the statistics must be float64 for float64 "
        "x and float32 otherwise, got x ", tensorflow::DataTypeString(t),
        " and ", tensorflow::DataTypeString(u)));
  }
  const int x_at = kGrad ? 1 : 0;
  ShapeHandle x = c->input(x_at);
  if (kGrad) {
    ShapeHandle merged;
    if (!c->Merge(c->input(0), x, &merged).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": dy and x must have the same shape, got dy ",
          c->DebugString(c->input(0)), " and x ", c->DebugString(x)));
    }
    x = merged;
  }
  if (!c->RankKnown(x)) {
    if (groups < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": attribute 'groups' must be >= 1, got ", groups));
    }
    c->set_output(0, x);
    if (!kGrad) {
      c->set_output(1, c->Matrix(c->UnknownDim(), groups));
      c->set_output(2, c->Matrix(c->UnknownDim(), groups));
    } else {
      c->set_output(1, c->input(2));
      c->set_output(2, c->input(3));
    }
    return absl::OkStatus();
  }
  const std::vector<int64_t> dims = DimsOf(c, x);
  GroupNormShape shape;
  TF_RETURN_IF_ERROR(LayoutOf(op, dims, attrs.axis, groups, &shape));
  const char* names[] = {"scale", "offset"};
  for (int k = 0; k < 2; ++k) {
    const ShapeHandle v = c->input(x_at + 1 + k);
    if (!c->RankKnown(v)) continue;
    TF_RETURN_IF_ERROR(
        CheckChannelVector(op, names[k], dims, shape.c, DimsOf(c, v)));
  }
  if (kGrad) {
    const char* stats[] = {"mean", "rstd"};
    for (int k = 0; k < 2; ++k) {
      const ShapeHandle v = c->input(4 + k);
      if (!c->RankKnown(v)) continue;
      TF_RETURN_IF_ERROR(CheckStat(op, stats[k], dims, shape, DimsOf(c, v)));
    }
  }
  c->set_output(0, x);
  if (kGrad) {
    const int axis = attrs.axis < 0 ? attrs.axis + c->Rank(x) : attrs.axis;
    c->set_output(1, c->Vector(c->Dim(x, axis)));
    c->set_output(2, c->Vector(c->Dim(x, axis)));
  } else {
    c->set_output(1, c->Matrix(c->Dim(x, 0), groups));
    c->set_output(2, c->Matrix(c->Dim(x, 0), groups));
  }
  return absl::OkStatus();
}

}  // namespace

#define TF_OPS_GROUP_NORM_ATTRS                \
  Attr("T: {half, bfloat16, float, double}")   \
      .Attr("U: {float, double}")              \
      .Attr("groups: int = 32")                \
      .Attr("epsilon: float = 0.001")          \
      .Attr("axis: int = -1")                  \
      .Attr("activation: string = 'Identity'") \
      .Attr("alpha: float = 0.2")              \
      .Attr("beta: float = 1.0")               \
      .Attr("approximate: bool = false")

REGISTER_OP("TfOps>GroupNorm")
    .Input("x: T")
    .Input("scale: U")
    .Input("offset: U")
    .Output("y: T")
    .Output("mean: U")
    .Output("rstd: U")
    .TF_OPS_GROUP_NORM_ATTRS
    .SetShapeFn(ShapeFn<false>)
    .Doc("Group normalization fused with an activation: the channels (axis "
         "`axis`, not 0) split into `groups` groups; per sample and group, y "
         "= f((x - mean) * rstd * scale + offset), rstd = 1 / sqrt(variance "
         "+ epsilon), the mean and biased variance over the group's channels "
         "and every other non-batch axis (in float32 for half and bfloat16, "
         "float64 for float64; bit-identical for any thread count), f = "
         "`activation` (alpha: LeakyRelu, Elu, Celu; beta: Swish; "
         "approximate: Gelu). mean and rstd ([batch, groups]) are saved for "
         "GroupNormGrad. Two passes over x.");

REGISTER_OP("TfOps>GroupNormGrad")
    .Input("dy: T")
    .Input("x: T")
    .Input("scale: U")
    .Input("offset: U")
    .Input("mean: U")
    .Input("rstd: U")
    .Output("dx: T")
    .Output("dscale: U")
    .Output("doffset: U")
    .TF_OPS_GROUP_NORM_ATTRS
    .SetShapeFn(ShapeFn<true>)
    .Doc("The gradients of TfOps>GroupNorm's y back to x, scale and offset, "
         "from its saved mean and rstd, recomputing f' from x; dscale and "
         "doffset are summed in fixed tiles (deterministic). Two passes over "
         "x and dy.");

#undef TF_OPS_GROUP_NORM_ATTRS

}  // namespace group_norm
}  // namespace tf_ops
