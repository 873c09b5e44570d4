// The normalisation ops' signatures, stated once for the registrations
// (norm_ops.cc), the kernels (norm_kernels.cc) and the XLA lowerings
// (norm_xla.cc), and the shape checks the kernels and lowerings run (the
// shape functions run the same checks on what is known at graph build).
//
//   TfOps>LayerNorm        x, gamma, beta            -> y, mean, rstd
//   TfOps>AddLayerNorm     x, residual, gamma, beta  -> h, y, mean, rstd
//   TfOps>LayerNormGrad    dy, x, gamma, mean, rstd  -> dx, dgamma, dbeta
//   TfOps>AddLayerNormGrad dy, dh, h, gamma, mean, rstd
//                                                    -> dx, dgamma, dbeta
//   TfOps>RmsNorm          x, gamma                  -> y, rstd
//   TfOps>AddRmsNorm       x, residual, gamma        -> h, y, rstd
//   TfOps>RmsNormGrad      dy, x, gamma, rstd        -> dx, dgamma
//   TfOps>AddRmsNormGrad   dy, dh, h, gamma, rstd    -> dx, dgamma
//
// over the last axis of x (rank >= 1); gamma and beta are 1-D with one
// element per element of that axis; residual, dy and dh have x's shape
// (RequireSameShape, core/kernel_helpers.h); mean and rstd have x's shape
// without its last axis. gamma, beta, mean, rstd, dgamma and dbeta have
// dtype U: float, or double for T = double (so mixed precision feeds Keras's
// float32 gamma with half x, no cast). The Add ops' h = x + residual; their
// grad's dx is also the residual's gradient (dh added). Attribute epsilon:
// finite, >= 0.

#ifndef TF_OPS_CC_NORM_NORM_CHECKS_H_
#define TF_OPS_CC_NORM_NORM_CHECKS_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tf_ops {
namespace norm {

// Which op: layer norm (centered) or RMS norm, with or without residual.
struct NormKind {
  bool centered;
  bool residual;

  std::string Name(bool grad) const {
    return absl::StrCat("TfOps>", residual ? "Add" : "",
                        centered ? "LayerNorm" : "RmsNorm", grad ? "Grad" : "");
  }
  // Forward inputs.
  int x() const { return 0; }
  int residual_input() const { return 1; }
  int gamma() const { return residual ? 2 : 1; }
  int beta() const { return gamma() + 1; }
  // Forward outputs: [h,] y, [mean,] rstd.
  int h_out() const { return 0; }
  int y_out() const { return residual ? 1 : 0; }
  int mean_out() const { return y_out() + 1; }
  int rstd_out() const { return y_out() + (centered ? 2 : 1); }
  // Grad inputs: dy, [dh,] x, gamma, [mean,] rstd.
  int g_dy() const { return 0; }
  int g_dh() const { return 1; }
  int g_x() const { return residual ? 2 : 1; }
  int g_gamma() const { return g_x() + 1; }
  int g_mean() const { return g_x() + 2; }
  int g_rstd() const { return g_x() + (centered ? 3 : 2); }
};

inline absl::Status CheckEpsilon(const std::string& op, float epsilon) {
  if (std::isfinite(epsilon) && epsilon >= 0.0f) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": attribute 'epsilon' must be finite and >= 0, got ",
                   epsilon));
}

inline std::string ShapeString(const tensorflow::TensorShape& s) {
  return s.DebugString();
}

// x has rank >= 1; sets *rows and *cols.
inline absl::Status CheckRows(const std::string& op,
                              const tensorflow::TensorShape& x, int64_t* rows,
                              int64_t* cols) {
  if (x.dims() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": x must have rank >= 1 (normalised over its last axis), got "
        "shape ", ShapeString(x)));
  }
  *cols = x.dim_size(x.dims() - 1);
  *rows = *cols == 0 ? 0 : x.num_elements() / *cols;
  return absl::OkStatus();
}

// A parameter (gamma or beta) is 1-D with `cols` elements.
inline absl::Status CheckParam(const std::string& op, const char* name,
                               const tensorflow::TensorShape& x,
                               const tensorflow::TensorShape& p) {
  const int64_t cols = x.dim_size(x.dims() - 1);
  if (p.dims() == 1 && p.dim_size(0) == cols) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", name, " must be 1-D with one element per element of x's last "
      "axis (", cols, "), got x ", ShapeString(x), " and ", name, " ",
      ShapeString(p)));
}

// A statistic (mean, rstd) has x's shape without its last axis.
inline absl::Status CheckStat(const std::string& op, const char* name,
                              const tensorflow::TensorShape& x,
                              const tensorflow::TensorShape& s) {
  tensorflow::TensorShape rows = x;
  rows.RemoveLastDims(1);
  if (s == rows) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", name, " must have x's shape without its last axis (",
      ShapeString(rows), "), got x ", ShapeString(x), " and ", name, " ",
      ShapeString(s)));
}

}  // namespace norm
}  // namespace tf_ops

#endif  // TF_OPS_CC_NORM_NORM_CHECKS_H_
