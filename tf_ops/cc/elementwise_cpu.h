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

namespace internal {

// The loops proper, for an op whose formula is fixed.
template <typename Op, typename T>
void ForwardLoop(Op op, const T* x, T* y, int64_t begin, int64_t end) {
  using C = ComputeType<T>;
  for (int64_t i = begin; i < end; ++i) {
    y[i] = static_cast<T>(op.Forward(static_cast<C>(x[i])));
  }
}

template <typename Op, typename T>
void BackwardLoop(Op op, const T* g, const T* v, T* dx, int64_t begin,
                  int64_t end) {
  using C = ComputeType<T>;
  for (int64_t i = begin; i < end; ++i) {
    dx[i] = static_cast<T>(
        op.Backward(static_cast<C>(g[i]), static_cast<C>(v[i])));
  }
}

// An op whose attribute switches between formulas (Gelu's `approximate`)
// defines Specialize(fn), calling fn with the chosen formula as its own type,
// so that each loop holds one formula and vectorises. Other ops run as they are.
template <typename Op, typename Fn>
auto WithFixedFormula(const Op& op, Fn&& fn, int)
    -> decltype(op.Specialize(fn), void()) {
  op.Specialize(fn);
}
template <typename Op, typename Fn>
void WithFixedFormula(const Op& op, Fn&& fn, long) {
  fn(op);
}

}  // namespace internal

// y[i] = f(x[i]) for i in [begin, end). x and y may be the same buffer.
template <typename Op, typename T>
void ForwardRange(const Op& op, const T* x, T* y, int64_t begin,
                  int64_t end) {
  internal::WithFixedFormula(
      op, [&](auto fixed) { internal::ForwardLoop(fixed, x, y, begin, end); },
      0);
}

// dx[i] = g[i] * f'(v[i]) for i in [begin, end), v being the grad op's second
// input (features or outputs). dx may alias g or v.
template <typename Op, typename T>
void BackwardRange(const Op& op, const T* g, const T* v, T* dx, int64_t begin,
                   int64_t end) {
  internal::WithFixedFormula(
      op,
      [&](auto fixed) { internal::BackwardLoop(fixed, g, v, dx, begin, end); },
      0);
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_ELEMENTWISE_CPU_H_
