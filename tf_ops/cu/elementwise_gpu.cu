// The CUDA engine: grid-stride kernels that run an activation functor
// (activation_math.h) over a flat buffer, and their launchers.
//
// No TensorFlow or Eigen headers: this file compiles in seconds, and the GPU
// self-test (tests/gpu/gpu_selftest.cu) links the very same object code.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "tf_ops/cc/activation_list.h"
#include "tf_ops/cc/activation_math.h"
#include "tf_ops/cc/dtype.h"
#include "tf_ops/cu/elementwise_gpu.h"

namespace tf_ops {
namespace {

constexpr int kThreadsPerBlock = 256;
// Enough blocks to fill any current GPU several times over; the grid-stride
// loop covers larger tensors without an ever larger grid.
constexpr int64_t kMaxBlocks = 8192;

template <typename Op, typename T>
__global__ void ForwardKernel(Op op, const T* x, T* y, int64_t n) {
  using C = ComputeType<T>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    y[i] = static_cast<T>(op.Forward(static_cast<C>(x[i])));
  }
}

template <typename Op, typename T>
__global__ void BackwardKernel(Op op, const T* g, const T* v, T* dx,
                               int64_t n) {
  using C = ComputeType<T>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    dx[i] = static_cast<T>(
        op.Backward(static_cast<C>(g[i]), static_cast<C>(v[i])));
  }
}

int BlocksFor(int64_t n) {
  return static_cast<int>(
      std::min<int64_t>((n + kThreadsPerBlock - 1) / kThreadsPerBlock,
                        kMaxBlocks));
}

const char* LastError() {
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

}  // namespace

template <typename Op>
const char* LaunchForward(const Op& op, Dtype dtype, const void* x,
                          void* y, int64_t n, void* stream) {
  if (n <= 0) return nullptr;
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    ForwardKernel<Op, T>
        <<<BlocksFor(n), kThreadsPerBlock, 0,
           static_cast<cudaStream_t>(stream)>>>(
            op, static_cast<const T*>(x), static_cast<T*>(y), n);
    return LastError();
  });
}

template <typename Op>
const char* LaunchBackward(const Op& op, Dtype dtype, const void* g,
                           const void* v, void* dx, int64_t n, void* stream) {
  if (n <= 0) return nullptr;
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    BackwardKernel<Op, T>
        <<<BlocksFor(n), kThreadsPerBlock, 0,
           static_cast<cudaStream_t>(stream)>>>(
            op, static_cast<const T*>(g), static_cast<const T*>(v),
            static_cast<T*>(dx), n);
    return LastError();
  });
}

#define TF_OPS_INSTANTIATE_GPU(Name)                                       \
  template const char* LaunchForward<Name>(const Name&, Dtype,          \
                                           const void*, void*, int64_t,    \
                                           void*);                         \
  template const char* LaunchBackward<Name>(const Name&, Dtype,         \
                                            const void*, const void*,      \
                                            void*, int64_t, void*);
TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_INSTANTIATE_GPU)
#undef TF_OPS_INSTANTIATE_GPU

}  // namespace tf_ops
