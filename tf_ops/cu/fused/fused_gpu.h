// The CUDA engine of the fused ops (fused_math.h): bias + activation and gated
// activations, forward and grad. Entry points callable from code that knows
// nothing of CUDA, as activation_gpu.h's: device buffers, the stream a
// cudaStream_t passed as void*, nullptr on success or CUDA's error message.
// Instantiated in fused_gpu.cu for every activation in activation_list.h.
//
// Half and bfloat16 compute in float, float in float, double in double, each
// result rounded once (ComputeType, dtype.h), as the CPU engine does.

#ifndef TF_OPS_CU_FUSED_GPU_H_
#define TF_OPS_CU_FUSED_GPU_H_

#include <cstdint>

#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/fused/fused_cpu.h"  // BiasLayout: TF-free

namespace tf_ops {

// y[i] = f(x[i] + bias[channel(i)]) for the n elements of x. y may be x.
template <typename Op>
const char* LaunchBiasForward(const Op& op, Dtype dtype, const void* x,
                              const void* bias, void* y, BiasLayout layout,
                              int64_t n, void* stream);

// Bytes of device scratch LaunchBiasGrad needs for a tensor of n elements:
// the partial sums of the bias gradient. Depends on the shape alone.
int64_t BiasGradGpuScratchBytes(Dtype dtype, BiasLayout layout, int64_t n);

// dx[i] = g[i] * f'(x[i] + bias[channel(i)]) and db[c] = the sum of dx over
// channel c. dx may be g or x. The sum is deterministic, with no atomics:
// the tensor is cut into tiles from its shape alone; each block sums one
// tile in a fixed order into its slot of `scratch`
// (BiasGradGpuScratchBytes), then one block per channel adds that channel's
// tile sums in a fixed order. Sums accumulate in float for half and
// bfloat16, in double for float and double (the CPU engine's choice), and
// are rounded once. Bit-identical run to run (the tiles do not depend on the
// GPU's size or the grid).
template <typename Op>
const char* LaunchBiasGrad(const Op& op, Dtype dtype, const void* g,
                           const void* x, const void* bias, void* dx,
                           void* db, void* scratch, BiasLayout layout,
                           int64_t n, void* stream);

// Gated: features of rows x (2 * half), outputs rows x half (n_out
// elements); y[r, j] = f(a) * b with a = x[r, j] + bias[j], b = x[r, half +
// j] + bias[half + j], or without the bias when it is null.
template <typename Op>
const char* LaunchGatedForward(const Op& op, Dtype dtype, const void* x,
                               const void* bias, void* y, int64_t half,
                               int64_t n_out, void* stream);

// dx[r, j] = g[r, j] * b * f'(a), dx[r, half + j] = g[r, j] * f(a) with
// a = x[r, j], b = x[r, half + j]. dx may be x.
template <typename Op>
const char* LaunchGatedGrad(const Op& op, Dtype dtype, const void* g,
                            const void* x, void* dx, int64_t half,
                            int64_t n_out, void* stream);

// Bytes of device scratch LaunchBiasGatedGrad needs: its partial sums.
int64_t BiasGatedGradGpuScratchBytes(Dtype dtype, int64_t half, int64_t n_out);

// LaunchGatedGrad with the bias added to the features, and db[c] = the sum
// of dx[:, c] for the 2 * half features c: deterministic, without atomics,
// as LaunchBiasGrad's (tiles of output columns by row chunks, each writing
// the sums of both halves' columns; then a fixed-order sum per feature).
template <typename Op>
const char* LaunchBiasGatedGrad(const Op& op, Dtype dtype, const void* g,
                                const void* x, const void* bias, void* dx,
                                void* db, void* scratch, int64_t half,
                                int64_t n_out, void* stream);

}  // namespace tf_ops

#endif  // TF_OPS_CU_FUSED_GPU_H_
