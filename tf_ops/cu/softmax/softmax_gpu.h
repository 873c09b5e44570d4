// The CUDA engine of the softmax family (softmax_math.h), callable from code
// that knows nothing of CUDA (as activation_gpu.h): device buffers, rows of
// `cols` contiguous elements, the stream a cudaStream_t passed as void*,
// nullptr on success or CUDA's error message. What each computes is
// softmax_cpu.h's function of the same name, over all rows.
//
// Rows of at most kWarpRowCols columns take one warp each, longer rows one
// block; reductions are warp shuffles and a fixed tree over the warps in
// shared memory (no atomics), each element always read by the same thread:
// the same bits on every run.

#ifndef TF_OPS_CU_SOFTMAX_SOFTMAX_GPU_H_
#define TF_OPS_CU_SOFTMAX_SOFTMAX_GPU_H_

#include <cstdint>

#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/softmax/softmax_cpu.h"  // MaskLayout: TF-free
#include "tf_ops/cc/softmax/softmax_math.h"

namespace tf_ops {

constexpr int64_t kWarpRowCols = 1024;

const char* LaunchSoftmax(Dtype dtype, const void* x, void* y, int64_t rows,
                          int64_t cols, bool log, void* stream);

const char* LaunchSoftmaxGrad(Dtype dtype, const void* g, const void* y,
                              void* dx, int64_t rows, int64_t cols, bool log,
                              float scale, void* stream);

// mask.mask is a device pointer (or null).
const char* LaunchMaskedSoftmax(Dtype dtype, const void* x,
                                const MaskLayout& mask, float scale, void* y,
                                int64_t rows, int64_t cols, void* stream);

// labels: device memory, checked by the caller.
const char* LaunchSparseCrossEntropy(Dtype dtype, const void* logits,
                                     const void* labels, bool labels64,
                                     void* loss, void* dlogits, int64_t rows,
                                     int64_t cols,
                                     const softmax::CrossEntropyParams& params,
                                     void* stream);

}  // namespace tf_ops

#endif  // TF_OPS_CU_SOFTMAX_SOFTMAX_GPU_H_
