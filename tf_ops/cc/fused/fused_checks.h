// Run-time shape checks of the fused ops, shared by the CPU kernels
// (fused_kernels.cc) and the XLA lowerings (fused_xla.cc), so that both fail
// with the same InvalidArgumentError naming the shapes.

#ifndef TF_OPS_CC_FUSED_CHECKS_H_
#define TF_OPS_CC_FUSED_CHECKS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ops/cc/fused/fused_cpu.h"

namespace tf_ops {

using tensorflow::TensorShape;

// The features' layout for the bias (fused_cpu.h), after checking the bias
// against them; `op` names the op in errors.
inline absl::Status BiasLayoutOf(const std::string& op, bool nchw,
                                 const TensorShape& x,
                                 const TensorShape& bias,
                                 BiasLayout* layout) {
  if (x.dims() < (nchw ? 2 : 1) || bias.dims() != 1 ||
      bias.dim_size(0) != x.dim_size(nchw ? 1 : x.dims() - 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": bias must be 1-D with one element per channel (axis ",
        nchw ? "1" : "-1", " of the features for data_format ",
        nchw ? "NCHW" : "NHWC", "), got features ", x.DebugString(),
        " and bias ", bias.DebugString()));
  }
  layout->channels = bias.dim_size(0);
  layout->inner = 1;
  if (nchw) {
    for (int d = 2; d < x.dims(); ++d) layout->inner *= x.dim_size(d);
  }
  return absl::OkStatus();
}

// Add ops: the residual has the features' shape, which makes it a bias of the
// features' own shape (one channel per element: the bias ops' loops serve).
inline absl::Status AddLayoutOf(const std::string& op, const TensorShape& x,
                                const TensorShape& residual,
                                BiasLayout* layout) {
  if (x != residual) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": features and residual must have the same shape (no "
        "broadcasting), got features ", x.DebugString(), " and residual ",
        residual.DebugString()));
  }
  layout->channels = x.num_elements();
  layout->inner = 1;
  return absl::OkStatus();
}

// The features' last axis, halved; an error unless it is even.
inline absl::Status GatedHalf(const std::string& op, const TensorShape& x,
                              int64_t* half) {
  if (x.dims() < 1 || x.dim_size(x.dims() - 1) % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the last axis of features must be even (two halves: the "
        "activation's input and the gate), got shape ", x.DebugString()));
  }
  *half = x.dim_size(x.dims() - 1) / 2;
  return absl::OkStatus();
}

// BiasGated ops: the bias is 1-D with one element per feature of the last
// axis (call after GatedHalf).
inline absl::Status CheckGatedBias(const std::string& op, const TensorShape& x,
                                   const TensorShape& bias) {
  if (bias.dims() != 1 || bias.dim_size(0) != x.dim_size(x.dims() - 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": bias must be 1-D with one element per feature of the last axis "
        "(it is added before the split), got features ", x.DebugString(),
        " and bias ", bias.DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_FUSED_CHECKS_H_
