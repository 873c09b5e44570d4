// The CPU engine of the batch-norm ops (batch_norm_math.h): whole ops, TF-free.
// The kernels (batch_norm_kernels.cc) hand it TensorFlow's thread pool as a
// ParallelFor and a scratch buffer; the engine test hands it plain loops.
//
// Buffers are untyped with the Dtype of x (and y, dy, dx); the per-channel
// tensors (gamma, beta, mean, variance and their gradients) are float for
// half, bfloat16 and float, double for double: the compute type. A null gamma
// is ones, a null beta zeros, a null d_mean or d_variance zeros; a null
// dgamma or dbeta is not written. epsilon is the ops' float attribute.
//
// Reductions run over tiles fixed by the shape alone (never by the thread
// count), each writing its own partial sums, which are then added per channel
// in a fixed order: the results are bit-identical for any ParallelFor.

#ifndef TF_OPS_CC_BATCH_NORM_BATCH_NORM_CPU_H_
#define TF_OPS_CC_BATCH_NORM_BATCH_NORM_CPU_H_

#include <cstdint>
#include <functional>

#include "tf_ops/cc/activation/activation_choice.h"
#include "tf_ops/cc/batch_norm/batch_norm_math.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/core/parallel_for.h"

namespace tf_ops {

// Doubles of scratch every op below needs for this layout.
int64_t BatchNormScratchDoubles(BatchNormLayout layout);

// y = f(x * scale + shift) with the batch statistics; writes the batch mean
// and (biased) variance. Two passes over x; one (the statistics alone) when
// y is null.
void CpuBatchNormTraining(const ActivationChoice& act, Dtype dtype,
                          const void* x, const void* gamma, const void* beta,
                          float epsilon, void* y, void* mean, void* variance,
                          BatchNormLayout layout, double* scratch,
                          const ParallelFor& parallel);

// dx, dgamma, dbeta of CpuBatchNormTraining (mean and variance: its outputs;
// d_mean, d_variance: the gradients of those outputs). Two passes over x, dy:
// CpuBatchNormInferenceGrad's sums, then CpuBatchNormTrainingInputGrad;
// the first alone when dx is null.
void CpuBatchNormTrainingGrad(const ActivationChoice& act, Dtype dtype,
                              const void* dy, const void* x,
                              const void* gamma, const void* beta,
                              const void* mean, const void* variance,
                              const void* d_mean, const void* d_variance,
                              float epsilon, void* dx, void* dgamma,
                              void* dbeta, BatchNormLayout layout,
                              double* scratch,
                              const ParallelFor& parallel);

// The training grad's second pass alone: dx from the parameter gradients
// dgamma and dbeta and the statistics' gradients d_mean and d_variance of a
// batch of `count` elements per channel that x is part of (summed over the
// replicas of a synchronized batch norm). One pass over x, dy.
void CpuBatchNormTrainingInputGrad(
    const ActivationChoice& act, Dtype dtype, const void* dy,
    const void* x, const void* gamma, const void* beta, const void* mean,
    const void* variance, const void* d_mean, const void* d_variance,
    const void* dgamma, const void* dbeta, double count, float epsilon,
    void* dx, BatchNormLayout layout, double* scratch,
    const ParallelFor& parallel);

// y = f(x * scale + shift) with the given statistics. One pass.
void CpuBatchNormInference(const ActivationChoice& act, Dtype dtype,
                           const void* x, const void* gamma, const void* beta,
                           const void* mean, const void* variance,
                           float epsilon, void* y, BatchNormLayout layout,
                           double* scratch,
                           const ParallelFor& parallel);

// dx = scale * dz, dgamma = rstd * sum(dz * (x - mean)), dbeta = sum(dz) of
// CpuBatchNormInference, statistics held fixed. One pass; dx null: the sums
// alone.
void CpuBatchNormInferenceGrad(const ActivationChoice& act, Dtype dtype,
                               const void* dy, const void* x,
                               const void* gamma, const void* beta,
                               const void* mean, const void* variance,
                               float epsilon, void* dx, void* dgamma,
                               void* dbeta, BatchNormLayout layout,
                               double* scratch,
                               const ParallelFor& parallel);

}  // namespace tf_ops

#endif  // TF_OPS_CC_BATCH_NORM_BATCH_NORM_CPU_H_
