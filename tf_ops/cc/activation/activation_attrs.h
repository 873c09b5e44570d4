// How each activation reads and checks its attributes, in one place for the
// two moments TensorFlow looks at them: graph building (the shape function,
// with an InferenceContext) and kernel construction (OpKernelConstruction,
// which is also where eager calls see them). Both contexts have GetAttr.
//
// One overload of ReadAttrs per functor in activation_math.h.

#ifndef TF_OPS_CC_ACTIVATION_ATTRS_H_
#define TF_OPS_CC_ACTIVATION_ATTRS_H_

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/platform/errors.h"
#include "tf_ops/cc/activation/activation_math.h"

namespace tf_ops {

// Non-finite slopes make every negative input NaN or inf: reject them.
inline absl::Status RequireFinite(const char* op, const char* attr,
                                  float value) {
  if (std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "TfOps>", op, ": attribute '", attr, "' must be finite, got ", value));
}

template <typename Ctx>
absl::Status ReadAttrs(Ctx* ctx, LeakyRelu* op) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("alpha", &op->alpha));
  return RequireFinite(LeakyRelu::kName, "alpha", op->alpha);
}

template <typename Ctx>
absl::Status ReadAttrs(Ctx* ctx, Elu* op) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("alpha", &op->alpha));
  TF_RETURN_IF_ERROR(RequireFinite(Elu::kName, "alpha", op->alpha));
  // EluGrad works from the outputs, which identify the branch only if the
  // negative branch stays <= 0 (see activation_math.h).
  if (op->alpha < 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TfOps>Elu: attribute 'alpha' must be >= 0, got ", op->alpha,
        " (EluGrad recovers the branch from the outputs, which a negative "
        "alpha makes ambiguous)"));
  }
  return absl::OkStatus();
}

template <typename Ctx>
absl::Status ReadAttrs(Ctx* ctx, Gelu* op) {
  return ctx->GetAttr("approximate", &op->approximate);
}

template <typename Ctx>
absl::Status ReadAttrs(Ctx* ctx, Swish* op) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("beta", &op->beta));
  return RequireFinite(Swish::kName, "beta", op->beta);
}

template <typename Ctx>
absl::Status ReadAttrs(Ctx*, Mish*) {
  return absl::OkStatus();
}

template <typename Ctx>
absl::Status ReadAttrs(Ctx*, HardSwish*) {
  return absl::OkStatus();
}

template <typename Ctx>
absl::Status ReadAttrs(Ctx* ctx, Celu* op) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("alpha", &op->alpha));
  TF_RETURN_IF_ERROR(RequireFinite(Celu::kName, "alpha", op->alpha));
  // A subnormal alpha would read as 0 in kernels that run with denormals
  // flushed (TF's CPU threads): refuse it everywhere, not only there.
  if (op->alpha >= std::numeric_limits<float>::min()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "TfOps>Celu: attribute 'alpha' must be > 0 and a normal float (>= ",
      std::numeric_limits<float>::min(), "), got ", op->alpha));
}

template <typename Ctx>
absl::Status ReadAttrs(Ctx*, Sigmoid*) {
  return absl::OkStatus();
}

template <typename Ctx>
absl::Status ReadAttrs(Ctx*, Relu6*) {
  return absl::OkStatus();
}

template <typename Ctx>
absl::Status ReadAttrs(Ctx*, HardSigmoid*) {
  return absl::OkStatus();
}

template <typename Ctx>
absl::Status ReadAttrs(Ctx*, Tanh*) {
  return absl::OkStatus();
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_ACTIVATION_ATTRS_H_
