// The CUDA engine's entry points, callable from code that knows nothing of
// CUDA (the TensorFlow kernels are compiled by g++ without CUDA headers) and
// from the TF-free GPU self-test.
//
// Buffers are device pointers; the stream is a cudaStream_t passed as void*.
// Each launcher returns nullptr on success, or CUDA's error message.
// Instantiated in activation_gpu.cu for every activation in activation_list.h.

#ifndef TF_OPS_CU_ACTIVATION_GPU_H_
#define TF_OPS_CU_ACTIVATION_GPU_H_

#include <cstdint>

#include "tf_ops/cc/core/dtype.h"

namespace tf_ops {

// y[i] = f(x[i]) for i in [0, n). x and y may be the same buffer.
template <typename Op>
const char* LaunchForward(const Op& op, Dtype dtype, const void* x,
                          void* y, int64_t n, void* stream);

// dx[i] = g[i] * f'(v[i]) for i in [0, n). dx may alias g or v.
template <typename Op>
const char* LaunchBackward(const Op& op, Dtype dtype, const void* g,
                           const void* v, void* dx, int64_t n, void* stream);

// d_g[i] = u[i] * f'(v[i]) and d_v[i] = u[i] * g[i] * f''(v[i]) for i in
// [0, n), in one pass. d_g may alias u or v, d_v g or v; either may be null
// (then only the other is computed).
template <typename Op>
const char* LaunchGradGrad(const Op& op, Dtype dtype, const void* u,
                           const void* g, const void* v, void* d_g, void* d_v,
                           int64_t n, void* stream);

}  // namespace tf_ops

#endif  // TF_OPS_CU_ACTIVATION_GPU_H_
