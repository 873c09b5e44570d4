// The CPU engine: applies an activation functor (activation_math.h) over a
// contiguous index range of a flat buffer. TF-free on purpose: the TensorFlow
// kernel decides how to split the work over the thread pool
// (activation_kernels.h) and calls these once per shard; a plain C++ test
// program can call them directly.
//
// Buffers are passed untyped with their Dtype (dtype.h), as to the CUDA engine.
// Half and bfloat16 are computed in float and rounded once, double in double.
// The loops are compiled for several instruction sets and the widest the CPU
// has is used (cpu_isa.h). Instantiated in activation_cpu.cc for every
// activation in activation_list.h.

#ifndef TF_OPS_CC_ACTIVATION_CPU_H_
#define TF_OPS_CC_ACTIVATION_CPU_H_

#include <cstdint>

#include "tf_ops/cc/core/cpu_isa.h"
#include "tf_ops/cc/core/dtype.h"

namespace tf_ops {

// y[i] = f(x[i]) for i in [begin, end). x and y may be the same buffer.
template <typename Op>
void CpuForward(const Op& op, Dtype dtype, const void* x, void* y,
                int64_t begin, int64_t end);

// dx[i] = g[i] * f'(v[i]) for i in [begin, end), v being the grad op's second
// input (features or outputs). dx may be the same buffer as g or v.
template <typename Op>
void CpuBackward(const Op& op, Dtype dtype, const void* g, const void* v,
                 void* dx, int64_t begin, int64_t end);

// The grad op's gradient, for i in [begin, end) and upstream gradients u:
// d_g[i] = u[i] * f'(v[i]) and d_v[i] = u[i] * g[i] * f''(v[i]), in one pass.
// d_g may be the same buffer as u or v, d_v as g or v. Either output may be
// null when it is not needed (then only the other is computed).
template <typename Op>
void CpuGradGrad(const Op& op, Dtype dtype, const void* u, const void* g,
                 const void* v, void* d_g, void* d_v, int64_t begin,
                 int64_t end);

}  // namespace tf_ops

#endif  // TF_OPS_CC_ACTIVATION_CPU_H_
