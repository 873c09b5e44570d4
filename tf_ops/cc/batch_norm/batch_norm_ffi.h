// What the batch-norm family's XLA lowerings (batch_norm_xla.cc) and its FFI
// handlers (batch_norm_ffi.cc) agree on: the custom-call targets and the Host
// scratch's alignment. TF-free and XLA-free.

#ifndef TF_OPS_CC_BATCH_NORM_BATCH_NORM_FFI_H_
#define TF_OPS_CC_BATCH_NORM_BATCH_NORM_FFI_H_

#include <cstdint>

namespace tf_ops {
namespace batch_norm {

inline constexpr char kBatchNormTrainingTarget[] =
    "tf_ops_batch_norm_training";
inline constexpr char kBatchNormTrainingGradTarget[] =
    "tf_ops_batch_norm_training_grad";

// The Host scratch result (the engine's double partial sums) is this many
// bytes longer than the engine asks for, so that the handler can align it.
inline constexpr int64_t kScratchAlign = 64;

}  // namespace batch_norm
}  // namespace tf_ops

#endif  // TF_OPS_CC_BATCH_NORM_BATCH_NORM_FFI_H_
