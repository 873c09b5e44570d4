// Shape functions shared by every activation op, generic over the functor so
// that a bad attribute fails when the graph is built, not first at run time.

#ifndef TF_OPS_CC_ACTIVATION_CHECKS_H_
#define TF_OPS_CC_ACTIVATION_CHECKS_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tf_ops/cc/activation/activation_attrs.h"

namespace tf_ops {

// Forward op: output has the input's shape.
template <typename Op>
absl::Status ActivationShape(tensorflow::shape_inference::InferenceContext* c) {
  Op op;
  TF_RETURN_IF_ERROR(ReadAttrs(c, &op));
  return tensorflow::shape_inference::UnchangedShape(c);
}

// Grad op: the two inputs must agree; the output is their merged shape, so a
// static mismatch fails while the graph is built.
template <typename Op>
absl::Status ActivationGradShape(
    tensorflow::shape_inference::InferenceContext* c) {
  Op op;
  TF_RETURN_IF_ERROR(ReadAttrs(c, &op));
  tensorflow::shape_inference::ShapeHandle merged;
  if (!c->Merge(c->input(0), c->input(1), &merged).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TfOps>", Op::kName, "Grad: gradients and ",
        Op::kGradTakesOutputs ? "outputs" : "features",
        " must have the same shape, got ", c->DebugString(c->input(0)),
        " and ", c->DebugString(c->input(1))));
  }
  c->set_output(0, merged);
  return absl::OkStatus();
}

// Grad-grad op: the three inputs must agree; both outputs have their merged
// shape.
template <typename Op>
absl::Status ActivationGradGradShape(
    tensorflow::shape_inference::InferenceContext* c) {
  Op op;
  TF_RETURN_IF_ERROR(ReadAttrs(c, &op));
  tensorflow::shape_inference::ShapeHandle merged = c->input(0);
  for (int i : {1, 2}) {
    if (!c->Merge(merged, c->input(i), &merged).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TfOps>", Op::kName, "GradGrad: upstream, gradients and ",
          Op::kGradTakesOutputs ? "outputs" : "features",
          " must have the same shape, got ", c->DebugString(c->input(0)),
          ", ", c->DebugString(c->input(1)), " and ",
          c->DebugString(c->input(2))));
    }
  }
  c->set_output(0, merged);
  c->set_output(1, merged);
  return absl::OkStatus();
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_ACTIVATION_CHECKS_H_
