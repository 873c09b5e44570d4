// Registrations of the normalisation ops (norm_checks.h lists them), with
// shape functions that check at graph build what is known: x's rank, gamma
// and beta against x's last axis, the residual, dy and dh against x, the
// statistics against x's leading axes, U against T, and epsilon.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/types.h"
#include "tf_ops/cc/norm/norm_checks.h"

namespace tf_ops {
namespace norm {
namespace {

using tensorflow::DataType;
using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

absl::Status CheckAttrs(InferenceContext* c, const std::string& op) {
  float epsilon = 0.0f;
  TF_RETURN_IF_ERROR(c->GetAttr("epsilon", &epsilon));
  TF_RETURN_IF_ERROR(CheckEpsilon(op, epsilon));
  DataType t, u;
  TF_RETURN_IF_ERROR(c->GetAttr("T", &t));
  TF_RETURN_IF_ERROR(c->GetAttr("U", &u));
  const DataType want =
      t == tensorflow::DT_DOUBLE ? tensorflow::DT_DOUBLE : tensorflow::DT_FLOAT;
  if (u != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the statistics' dtype U must be ", tensorflow::DataTypeString(want),
        " for T = ", tensorflow::DataTypeString(t), ", got ",
        tensorflow::DataTypeString(u)));
  }
  return absl::OkStatus();
}

absl::Status RankOne(InferenceContext* c, const std::string& op, int index,
                     ShapeHandle* x) {
  if (c->WithRankAtLeast(c->input(index), 1, x).ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": x must have rank >= 1 (normalised over its last axis), got shape ",
      c->DebugString(c->input(index))));
}

absl::Status SameAs(InferenceContext* c, const std::string& op,
                    const char* name, ShapeHandle* x, const char* other,
                    int index) {
  ShapeHandle merged;
  if (!c->Merge(*x, c->input(index), &merged).ok()) {
    // As RequireSameShape's (core/kernel_helpers.h) at run time.
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", name, " and ", other, " must have the same shape, got ", name,
        " ", c->DebugString(*x), " and ", other, " ",
        c->DebugString(c->input(index))));
  }
  *x = merged;
  return absl::OkStatus();
}

absl::Status Param(InferenceContext* c, const std::string& op,
                   const char* name, ShapeHandle x, int index) {
  ShapeHandle p;
  const ShapeHandle given = c->input(index);
  bool ok = c->WithRank(given, 1, &p).ok();
  if (ok && c->RankKnown(x)) {
    DimensionHandle merged;
    ok = c->Merge(c->Dim(x, -1), c->Dim(p, 0), &merged).ok();
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", name, " must be 1-D with one element per element of x's last "
      "axis, got x ", c->DebugString(x), " and ", name, " ",
      c->DebugString(given)));
}

ShapeHandle RowsOf(InferenceContext* c, ShapeHandle x) {
  if (!c->RankKnown(x)) return c->UnknownShape();
  ShapeHandle rows;
  TF_CHECK_OK(c->Subshape(x, 0, -1, &rows));
  return rows;
}

absl::Status Stat(InferenceContext* c, const std::string& op, const char* name,
                  ShapeHandle x, int index) {
  ShapeHandle merged;
  if (c->Merge(RowsOf(c, x), c->input(index), &merged).ok()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", name, " must have x's shape without its last axis, got x ",
      c->DebugString(x), " and ", name, " ", c->DebugString(c->input(index))));
}

template <bool kCentered, bool kResidual>
absl::Status ForwardShape(InferenceContext* c) {
  constexpr NormKind k{kCentered, kResidual};
  const std::string op = k.Name(false);
  TF_RETURN_IF_ERROR(CheckAttrs(c, op));
  ShapeHandle x;
  TF_RETURN_IF_ERROR(RankOne(c, op, k.x(), &x));
  if (kResidual) {
    TF_RETURN_IF_ERROR(SameAs(c, op, "x", &x, "residual", k.residual_input()));
  }
  TF_RETURN_IF_ERROR(Param(c, op, "gamma", x, k.gamma()));
  if (kCentered) TF_RETURN_IF_ERROR(Param(c, op, "beta", x, k.beta()));
  if (kResidual) c->set_output(k.h_out(), x);
  c->set_output(k.y_out(), x);
  const ShapeHandle rows = RowsOf(c, x);
  if (kCentered) c->set_output(k.mean_out(), rows);
  c->set_output(k.rstd_out(), rows);
  return absl::OkStatus();
}

template <bool kCentered, bool kResidual>
absl::Status GradShape(InferenceContext* c) {
  constexpr NormKind k{kCentered, kResidual};
  const std::string op = k.Name(true);
  TF_RETURN_IF_ERROR(CheckAttrs(c, op));
  const char* x_name = kResidual ? "h" : "x";
  ShapeHandle x;
  TF_RETURN_IF_ERROR(RankOne(c, op, k.g_x(), &x));
  TF_RETURN_IF_ERROR(SameAs(c, op, x_name, &x, "dy", k.g_dy()));
  if (kResidual) TF_RETURN_IF_ERROR(SameAs(c, op, x_name, &x, "dh", k.g_dh()));
  TF_RETURN_IF_ERROR(Param(c, op, "gamma", x, k.g_gamma()));
  if (kCentered) TF_RETURN_IF_ERROR(Stat(c, op, "mean", x, k.g_mean()));
  TF_RETURN_IF_ERROR(Stat(c, op, "rstd", x, k.g_rstd()));
  c->set_output(0, x);
  c->set_output(1, c->input(k.g_gamma()));
  if (kCentered) c->set_output(2, c->input(k.g_gamma()));
  return absl::OkStatus();
}

#define TF_OPS_NORM_ATTRS                                   \
  Attr("T: {half, bfloat16, float, double}")                \
      .Attr("U: {float, double} = DT_FLOAT")                \
      .Attr("epsilon: float = 0.001")

REGISTER_OP("TfOps>LayerNorm")
    .Input("x: T")
    .Input("gamma: U")
    .Input("beta: U")
    .Output("y: T")
    .Output("mean: U")
    .Output("rstd: U")
    .TF_OPS_NORM_ATTRS
    .SetShapeFn(ForwardShape<true, false>)
    .Doc("Layer normalisation over the last axis: y = gamma * (x - mean) * "
         "rstd + beta, rstd = 1 / sqrt(var + epsilon); mean and rstd per row "
         "(in U: float, double for double) for LayerNormGrad.");

REGISTER_OP("TfOps>AddLayerNorm")
    .Input("x: T")
    .Input("residual: T")
    .Input("gamma: U")
    .Input("beta: U")
    .Output("h: T")
    .Output("y: T")
    .Output("mean: U")
    .Output("rstd: U")
    .TF_OPS_NORM_ATTRS
    .SetShapeFn(ForwardShape<true, true>)
    .Doc("h = x + residual and y = LayerNorm(h), in one pass.");

REGISTER_OP("TfOps>LayerNormGrad")
    .Input("dy: T")
    .Input("x: T")
    .Input("gamma: U")
    .Input("mean: U")
    .Input("rstd: U")
    .Output("dx: T")
    .Output("dgamma: U")
    .Output("dbeta: U")
    .TF_OPS_NORM_ATTRS
    .SetShapeFn(GradShape<true, false>)
    .Doc("Gradients of LayerNorm from its saved mean and rstd; dgamma and "
         "dbeta are summed in fixed tiles (deterministic).");

REGISTER_OP("TfOps>AddLayerNormGrad")
    .Input("dy: T")
    .Input("dh: T")
    .Input("h: T")
    .Input("gamma: U")
    .Input("mean: U")
    .Input("rstd: U")
    .Output("dx: T")
    .Output("dgamma: U")
    .Output("dbeta: U")
    .TF_OPS_NORM_ATTRS
    .SetShapeFn(GradShape<true, true>)
    .Doc("Gradients of AddLayerNorm: dx (also the residual's) = "
         "LayerNormGrad's dx + dh.");

REGISTER_OP("TfOps>RmsNorm")
    .Input("x: T")
    .Input("gamma: U")
    .Output("y: T")
    .Output("rstd: U")
    .TF_OPS_NORM_ATTRS
    .SetShapeFn(ForwardShape<false, false>)
    .Doc("RMS normalisation over the last axis: y = gamma * x * rstd, rstd = "
         "1 / sqrt(mean(x^2) + epsilon), saved per row for RmsNormGrad.");

REGISTER_OP("TfOps>AddRmsNorm")
    .Input("x: T")
    .Input("residual: T")
    .Input("gamma: U")
    .Output("h: T")
    .Output("y: T")
    .Output("rstd: U")
    .TF_OPS_NORM_ATTRS
    .SetShapeFn(ForwardShape<false, true>)
    .Doc("h = x + residual and y = RmsNorm(h), in one pass.");

REGISTER_OP("TfOps>RmsNormGrad")
    .Input("dy: T")
    .Input("x: T")
    .Input("gamma: U")
    .Input("rstd: U")
    .Output("dx: T")
    .Output("dgamma: U")
    .TF_OPS_NORM_ATTRS
    .SetShapeFn(GradShape<false, false>)
    .Doc("Gradients of RmsNorm from its saved rstd (dgamma deterministic).");

REGISTER_OP("TfOps>AddRmsNormGrad")
    .Input("dy: T")
    .Input("dh: T")
    .Input("h: T")
    .Input("gamma: U")
    .Input("rstd: U")
    .Output("dx: T")
    .Output("dgamma: U")
    .TF_OPS_NORM_ATTRS
    .SetShapeFn(GradShape<false, true>)
    .Doc("Gradients of AddRmsNorm: dx (also the residual's) = RmsNormGrad's "
         "dx + dh.");

#undef TF_OPS_NORM_ATTRS

}  // namespace
}  // namespace norm
}  // namespace tf_ops
