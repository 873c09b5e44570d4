// The CPU engine: applies an activation functor (activation_math.h) over a
// contiguous index range. TF-free on purpose: the TensorFlow kernel decides how
// to split the work over the thread pool (elementwise_kernel.h) and calls these
// loops once per shard; a plain C++ test program can call them directly.

#ifndef TF_OPS_CC_ELEMENTWISE_CPU_H_
#define TF_OPS_CC_ELEMENTWISE_CPU_H_

#include <cstdint>
#include <type_traits>

namespace tf_ops {

// Precision the math runs in for a storage type: double stays double; half,
// bfloat16 and float compute in float and are rounded once when stored.
template <typename T>
using ComputeType =
    std::conditional_t<std::is_same<T, double>::value, double, float>;

// y[i] = f(x[i]) for i in [begin, end). x and y may be the same buffer.
template <typename Op, typename T>
void ForwardRange(Op op, const T* x, T* y, int64_t begin,
                  int64_t end) {
  using C = ComputeType<T>;
  for (int64_t i = begin; i < end; ++i) {
    y[i] = static_cast<T>(op.Forward(static_cast<C>(x[i])));
  }
}

// dx[i] = g[i] * f'(v[i]) for i in [begin, end), v being the grad op's second
// input (features or outputs). dx may alias g or v.
template <typename Op, typename T>
void BackwardRange(Op op, const T* g, const T* v, T* dx, int64_t begin,
                   int64_t end) {
  using C = ComputeType<T>;
  for (int64_t i = begin; i < end; ++i) {
    dx[i] = static_cast<T>(
        op.Backward(static_cast<C>(g[i]), static_cast<C>(v[i])));
  }
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_ELEMENTWISE_CPU_H_
