// The CUDA engine of the batch-norm ops (batch_norm_math.h): the ops of
// batch_norm_cpu.h, with the same arguments (null y or dx: that pass left
// out, as there), on device buffers, the stream a cudaStream_t passed as
// void*; each returns nullptr on success or CUDA's error message. `scratch`
// is device memory of BatchNormGpuScratchDoubles.
//
// The reductions are deterministic without atomics: each channel's elements
// are cut into fixed chunks (from the shape alone, never the GPU's size or
// the grid); a block sums a chunk by a fixed tree in shared memory into its
// own slot; then one thread per channel adds its chunks in order.

#ifndef TF_OPS_CU_BATCH_NORM_BATCH_NORM_GPU_H_
#define TF_OPS_CU_BATCH_NORM_BATCH_NORM_GPU_H_

#include <cstdint>

#include "tf_ops/cc/activation/activation_choice.h"
#include "tf_ops/cc/batch_norm/batch_norm_math.h"
#include "tf_ops/cc/core/dtype.h"

namespace tf_ops {

int64_t BatchNormGpuScratchDoubles(BatchNormLayout layout);

const char* LaunchBatchNormTraining(const ActivationChoice& act,
                                    Dtype dtype, const void* x,
                                    const void* gamma, const void* beta,
                                    float epsilon, void* y, void* mean,
                                    void* variance, BatchNormLayout layout,
                                    double* scratch, void* stream);

const char* LaunchBatchNormTrainingGrad(
    const ActivationChoice& act, Dtype dtype, const void* dy,
    const void* x, const void* gamma, const void* beta, const void* mean,
    const void* variance, const void* d_mean, const void* d_variance,
    float epsilon, void* dx, void* dgamma, void* dbeta,
    BatchNormLayout layout, double* scratch, void* stream);

const char* LaunchBatchNormTrainingInputGrad(
    const ActivationChoice& act, Dtype dtype, const void* dy,
    const void* x, const void* gamma, const void* beta, const void* mean,
    const void* variance, const void* d_mean, const void* d_variance,
    const void* dgamma, const void* dbeta, double count, float epsilon,
    void* dx, BatchNormLayout layout, double* scratch, void* stream);

const char* LaunchBatchNormInference(const ActivationChoice& act,
                                     Dtype dtype, const void* x,
                                     const void* gamma, const void* beta,
                                     const void* mean, const void* variance,
                                     float epsilon, void* y,
                                     BatchNormLayout layout, double* scratch,
                                     void* stream);

const char* LaunchBatchNormInferenceGrad(
    const ActivationChoice& act, Dtype dtype, const void* dy,
    const void* x, const void* gamma, const void* beta, const void* mean,
    const void* variance, float epsilon, void* dx, void* dgamma, void* dbeta,
    BatchNormLayout layout, double* scratch, void* stream);

}  // namespace tf_ops

#endif  // TF_OPS_CU_BATCH_NORM_BATCH_NORM_GPU_H_
