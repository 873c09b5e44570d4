// What the CUDA engines share: the launch shape, grid-stride indices, the
// dtype dispatch, the compute and accumulation types, and the launch error
// check.
// CUDA code only; no TensorFlow or Eigen headers.

#ifndef TF_OPS_CU_LAUNCH_COMMON_CUH_
#define TF_OPS_CU_LAUNCH_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tf_ops/cc/core/dtype.h"

namespace tf_ops {
namespace gpu {

// Every kernel launch is written
//   TF_OPS_LAUNCH(grid, block, shared_bytes, stream, Kernel<Args...>)(args...);
// The kernel comes last so that the commas of its template arguments need no
// parentheses. Under nvcc it is exactly the <<<...>>> launch; when the .cu
// sources are compiled as C++ for the CPU (the CUDA-on-CPU self-test,
// tests/gpu/cuda_on_cpu/), the layer that stands in for the CUDA runtime
// defines it first.
#ifndef TF_OPS_LAUNCH
#define TF_OPS_LAUNCH(grid, block, shared_bytes, stream, ...) \
  __VA_ARGS__<<<(grid), (block), (shared_bytes), (stream)>>>
#endif

// Dynamic shared memory is declared TF_OPS_DYNAMIC_SHARED(type, name); the
// CUDA-on-CPU layer defines it as the launch's buffer instead.
#ifndef TF_OPS_DYNAMIC_SHARED
#define TF_OPS_DYNAMIC_SHARED(type, name) \
  extern __shared__ __align__(16) type name[]
#endif

constexpr int kThreadsPerBlock = 256;
// Enough blocks to fill any current GPU several times over; the grid-stride
// loop covers larger tensors without an ever larger grid. The CUDA-on-CPU
// layer sets a small TF_OPS_MAX_BLOCKS, so that the self-test's small sizes
// already go round the grid-stride loops.
#ifndef TF_OPS_MAX_BLOCKS
#define TF_OPS_MAX_BLOCKS 8192
#endif
constexpr int64_t kMaxBlocks = TF_OPS_MAX_BLOCKS;

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GlobalThreads() {
  return static_cast<int64_t>(blockDim.x) * gridDim.x;
}

// Blocks for `work` items (packs, elements or tiles), at most kMaxBlocks.
inline int BlocksFor(int64_t work, int64_t per_block = kThreadsPerBlock) {
  return static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>((work + per_block - 1) / per_block, kMaxBlocks)));
}

// Storage <-> compute type (dtype.h's ComputeType: float for half, bfloat16
// and float, double for double).
template <typename T>
__device__ __forceinline__ ComputeType<T> Load(T v) {
  return static_cast<ComputeType<T>>(v);
}
template <typename T>
__device__ __forceinline__ T Store(ComputeType<T> v) {
  return static_cast<T>(v);
}

// What reductions over many elements (bias, dgamma, dbeta, statistics) sum
// in: float for half and bfloat16, double for float and double, as the CPU
// engines (cpu_storage.h's Acc).
template <typename T>
using AccType = std::conditional_t<
    std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value,
    float, double>;

inline const char* LastError() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// Calls fn with a null pointer of the CUDA storage type for dtype, so one
// generic lambda serves all four dtypes.
template <typename Fn>
const char* DispatchDtype(Dtype dtype, Fn fn) {
  switch (dtype) {
    case Dtype::kHalf:
      return fn(static_cast<__half*>(nullptr));
    case Dtype::kBFloat16:
      return fn(static_cast<__nv_bfloat16*>(nullptr));
    case Dtype::kFloat:
      return fn(static_cast<float*>(nullptr));
    case Dtype::kDouble:
      return fn(static_cast<double*>(nullptr));
  }
  return "tf_ops: unknown GPU dtype";
}

}  // namespace gpu
}  // namespace tf_ops

#endif  // TF_OPS_CU_LAUNCH_COMMON_CUH_
