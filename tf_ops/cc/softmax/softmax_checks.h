// The softmax family's shape rules, for the kernels (softmax_kernels.cc) and
// the XLA lowerings (softmax_xla.cc) at run time; the shape functions
// (softmax_ops.cc) check the same when the graph is built.
//   softmax, log_softmax: logits of rank >= 1, the softmax over the last axis.
//   scaled masked: the mask is bool, of rank <= the logits', each of its
//     dimensions (aligned from the last) 1 or the logits'; causal needs rank
//     >= 2 (the queries are the second-to-last axis).
//   grad ops: gradients and outputs of one shape.
//   cross-entropy: logits [rows, classes], classes >= 1; labels [rows].

#ifndef TF_OPS_CC_SOFTMAX_SOFTMAX_CHECKS_H_
#define TF_OPS_CC_SOFTMAX_SOFTMAX_CHECKS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ops/cc/softmax/softmax_cpu.h"

namespace tf_ops {

inline absl::Status CheckLogits(const std::string& op,
                                const tensorflow::TensorShape& x) {
  if (x.dims() >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": logits must have rank >= 1, got shape ", x.DebugString()));
}

inline absl::Status CheckSameShape(const std::string& op,
                                   const tensorflow::TensorShape& g,
                                   const tensorflow::TensorShape& y) {
  if (g == y) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": gradients and softmax must have the same shape, got ",
                   g.DebugString(), " and ", y.DebugString()));
}

// The mask's layout over the logits (softmax_cpu.h), its pointer left null.
inline absl::Status MaskLayoutOf(const std::string& op,
                                 const tensorflow::TensorShape& x,
                                 const tensorflow::TensorShape& mask,
                                 bool causal, MaskLayout* layout) {
  TF_RETURN_IF_ERROR(CheckLogits(op, x));
  const int rank = x.dims();
  if (rank - 1 > MaskLayout::kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": logits must have rank <= ", MaskLayout::kMaxRank + 1, ", got ",
        x.DebugString()));
  }
  if (causal && rank < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": causal needs logits of rank >= 2 ([..., queries, keys]), got ",
        x.DebugString()));
  }
  bool ok = mask.dims() <= rank;
  for (int i = 1; ok && i <= mask.dims(); ++i) {
    const int64_t m = mask.dim_size(mask.dims() - i);
    ok = m == 1 || m == x.dim_size(rank - i);
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": mask must broadcast to the logits (rank <= theirs, each "
        "dimension 1 or theirs), got mask ", mask.DebugString(), " and logits ",
        x.DebugString()));
  }
  *layout = MaskLayout();
  layout->rank = rank - 1;
  layout->causal = causal;
  // The mask's strides, its dimensions aligned to the logits' from the last.
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    const int mi = i - (rank - mask.dims());
    const int64_t m = mi >= 0 ? mask.dim_size(mi) : 1;
    const int64_t s = m == 1 ? 0 : stride;
    stride *= m;
    if (i == rank - 1) {
      layout->col_stride = s;
    } else {
      layout->dims[i] = x.dim_size(i);
      layout->strides[i] = s;
    }
  }
  return absl::OkStatus();
}

inline absl::Status CheckCrossEntropy(const std::string& op,
                                      const tensorflow::TensorShape& x,
                                      const tensorflow::TensorShape& labels) {
  if (x.dims() != 2 || x.dim_size(1) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": logits must be [rows, classes] with classes >= 1, got shape ",
        x.DebugString()));
  }
  if (labels.dims() != 1 || labels.dim_size(0) != x.dim_size(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": labels must be [rows] with the logits' rows, got labels ",
        labels.DebugString(), " and logits ", x.DebugString()));
  }
  return absl::OkStatus();
}

inline absl::Status BadLabelError(const std::string& op, int64_t label,
                                  int64_t row, int64_t classes,
                                  int64_t ignore_index) {
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": label ", label, " at position ", row, " is outside [0, ",
      classes, ") and is not ignore_index (", ignore_index, ")"));
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_SOFTMAX_SOFTMAX_CHECKS_H_
