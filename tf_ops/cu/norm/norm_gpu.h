// The CUDA engine of the normalisation ops (norm_math.h), callable from code
// that knows nothing of CUDA: device buffers, the stream a cudaStream_t as
// void*, nullptr on success or CUDA's error message. Same conventions as
// the CPU engine (norm_cpu.h): compute in float (double for double), the
// statistics in that type, one rounding per result.
//
// Rows of up to kWarpRowMax elements run a warp per row, longer rows a block
// per row; row sums are warp shuffles then shared memory, in a fixed order.
// dgamma and dbeta: fixed tiles of kGradRowBlock rows, one thread per column
// summing its tile's rows into the scratch (NormGradGpuScratchBytes), then a
// fixed-order sum over the tiles per column. No atomics: bit-identical run to
// run, whatever the GPU.

#ifndef TF_OPS_CU_NORM_NORM_GPU_H_
#define TF_OPS_CU_NORM_NORM_GPU_H_

#include <cstdint>

#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/norm/norm_cpu.h"  // NormShape: TF-free

namespace tf_ops {

constexpr int64_t kWarpRowMax = 1024;
constexpr int64_t kGradRowBlock = 64;

// All rows; as CpuNormForward.
const char* LaunchNormForward(Dtype dtype, const NormShape& shape,
                              double epsilon, const void* x,
                              const void* residual, const void* gamma,
                              const void* beta, void* h, void* y, void* mean,
                              void* rstd, void* stream);

int64_t NormGradGpuScratchBytes(const NormShape& shape);

// All rows; as CpuNormGradTiles + CpuNormGradReduce. dx must not alias dy
// or x (the column pass reads them after dx is written).
const char* LaunchNormGrad(Dtype dtype, const NormShape& shape, const void* dy,
                           const void* x, const void* gamma, const void* mean,
                           const void* rstd, const void* dh, void* dx,
                           void* dgamma, void* dbeta, void* scratch,
                           void* stream);

}  // namespace tf_ops

#endif  // TF_OPS_CU_NORM_NORM_GPU_H_
