// The CUDA engine of the group-norm ops (group_norm_math.h), callable from
// code that knows nothing of CUDA: device buffers, the stream a cudaStream_t
// as void*, nullptr on success or CUDA's error message. Same conventions as
// the CPU engine (group_norm_cpu.h): compute in float (double for double),
// the parameters and statistics in that type, one rounding per result.
//
// The sums run over units fixed by the shape alone: channels last (i = 1),
// blocks of kGpuRowBlock rows of a sample, a thread per channel summing down
// the rows; otherwise one channel of a sample, a block strided over it and
// reduced in shared memory in a fixed tree. Each unit writes its own partial
// sums (double) to the scratch; a thread per (sample, group), and per
// channel, adds them in a fixed order. No atomics: bit-identical run to run.

#ifndef TF_OPS_CU_GROUP_NORM_GROUP_NORM_GPU_H_
#define TF_OPS_CU_GROUP_NORM_GROUP_NORM_GPU_H_

#include <cstdint>

#include "tf_ops/cc/activation/activation_choice.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/group_norm/group_norm_math.h"

namespace tf_ops {
namespace group_norm {

constexpr int64_t kGpuRowBlock = 64;

int64_t GroupNormGpuScratchBytes(const GroupNormShape& shape);

// y = f(x * a + b) and the statistics [n, groups]; y may alias x.
const char* LaunchGroupNormForward(const ActivationChoice& act, Dtype dtype,
                                   const GroupNormShape& shape, double epsilon,
                                   const void* x, const void* gamma,
                                   const void* beta, void* y, void* mean,
                                   void* rstd, void* scratch, void* stream);

// dx, dgamma, dbeta; dx may alias dy or x (each element is read by the thread
// that writes it).
const char* LaunchGroupNormGrad(const ActivationChoice& act, Dtype dtype,
                                const GroupNormShape& shape, const void* dy,
                                const void* x, const void* gamma,
                                const void* beta, const void* mean,
                                const void* rstd, void* dx, void* dgamma,
                                void* dbeta, void* scratch, void* stream);

}  // namespace group_norm
}  // namespace tf_ops

#endif  // TF_OPS_CU_GROUP_NORM_GROUP_NORM_GPU_H_
