// The math of the softmax family, stated once for the CPU engine
// (softmax_cpu.cc), the CUDA kernels (cu/softmax/softmax_gpu.cu) and, through
// the same formulas written over XLA ops, the lowerings (softmax_xla.cc).
// A row is the last axis; T is the compute type (float for half, bfloat16 and
// float; double for double), so the row max and the sum of exponentials are
// float32 for the 16-bit types and float64 for double.
//
//   stats      m = max_j x_j over the kept positions, s = sum_j e^(x_j - m)
//              (combinable: Combine merges two partial stats, so rows can be
//              cut into lanes, warps or blocks in a fixed order)
//   softmax    y_j = e^(x_j - m) / s;          dx_j = y_j (g_j - sum_k g_k y_k)
//   log        y_j = x_j - m - log s;          dx_j = g_j - e^(y_j) sum_k g_k
//   masked     x_j = scale * s_j where kept; a masked position has y_j = 0 and
//              dx_j = 0, and a fully masked row is all zeros (Keras's Softmax
//              with a mask); dx_j = scale * y_j (g_j - sum_k g_k y_k)
//   sparse CE  per row, with lse = m + log s, label t, smoothing eps over C
//              classes, z-loss coefficient z:
//                loss = lse - (1 - eps) x_t - (eps / C) sum_j x_j + z lse^2
//                dx_j = p_j (1 + 2 z lse) - (1 - eps) [j == t] - eps / C
//              and a row whose label is the ignored index has loss 0, dx 0.
//
// Numerics: x - m with m the row max never overflows (logits near +-FLT_MAX
// give -inf, e^-inf = 0); -inf logits have probability 0; a row whose every
// logit is -inf (unmasked) is NaN, as TensorFlow's; NaN propagates through
// the sum. Combine never forms -inf - -inf.
//
// Plain C++17 that nvcc also compiles; no TensorFlow, no Eigen.

#ifndef TF_OPS_CC_SOFTMAX_SOFTMAX_MATH_H_
#define TF_OPS_CC_SOFTMAX_SOFTMAX_MATH_H_

#include <math.h>

#include <cstdint>

#include "tf_ops/cc/core/math_primitives.h"

namespace tf_ops {
namespace softmax {

template <typename T>
TF_OPS_HOST_DEVICE T NegInf() {
  return -static_cast<T>(INFINITY);
}

TF_OPS_HOST_DEVICE float Log(float x) { return ::logf(x); }
TF_OPS_HOST_DEVICE double Log(double x) { return ::log(x); }

// Running max and sum of e^(x - max) of a part of a row.
template <typename T>
struct Stats {
  T max;
  T sum;
};

template <typename T>
TF_OPS_HOST_DEVICE Stats<T> EmptyStats() {
  return {NegInf<T>(), T(0)};
}

// e^(a - b) for a <= b, 1 when a == b (both -inf included: never -inf - -inf).
template <typename T>
TF_OPS_HOST_DEVICE T ExpShift(T a, T b) {
  return Select(a == b, T(1), Exp(a - b));
}

// Two parts of one row merged; the order of arguments fixes the rounding.
template <typename T>
TF_OPS_HOST_DEVICE Stats<T> Combine(Stats<T> a, Stats<T> b) {
  const T m = Select(b.max > a.max, b.max, a.max);
  return {m, a.sum * ExpShift(a.max, m) + b.sum * ExpShift(b.max, m)};
}

// log-sum-exp of a row from its stats.
template <typename T>
TF_OPS_HOST_DEVICE T LogSumExp(Stats<T> s) {
  return s.max + Log(s.sum);
}

// The probability of logit x in a row with stats s (inv_sum = 1 / s.sum).
template <typename T>
TF_OPS_HOST_DEVICE T Probability(T x, T max, T inv_sum) {
  return Exp(x - max) * inv_sum;
}

// softmax: dx = y (g - dot), dot = sum_k g_k y_k; scaled masked: times scale.
template <typename T>
TF_OPS_HOST_DEVICE T SoftmaxGrad(T g, T y, T dot, T scale) {
  return scale * y * (g - dot);
}

// log_softmax: dx = g - e^y sum_k g_k.
template <typename T>
TF_OPS_HOST_DEVICE T LogSoftmaxGrad(T g, T y, T sum_g) {
  return g - Exp(y) * sum_g;
}

// Sparse cross-entropy's per-row constants.
struct CrossEntropyParams {
  float label_smoothing = 0.0f;  // eps in [0, 1]
  int64_t ignore_index = -100;   // rows with this label count for nothing
  float z_loss = 0.0f;           // coefficient of lse^2, >= 0
};

// The row's loss from lse, the label's logit and the row's logit sum.
template <typename T>
TF_OPS_HOST_DEVICE T CrossEntropyLoss(T lse, T x_label, T x_sum, T eps,
                                      T classes, T z) {
  const T smooth = Select(eps > T(0), (eps / classes) * x_sum, T(0));
  return lse - (T(1) - eps) * x_label - smooth + z * lse * lse;
}

// dloss/dx_j for probability p_j; is_label: j == label (a bool, or the
// value type's mask).
template <typename T, typename Mask>
TF_OPS_HOST_DEVICE T CrossEntropyGrad(T p, Mask is_label, T lse, T eps,
                                      T classes, T z) {
  const T target = Select(is_label, T(1) - eps, T(0)) + eps / classes;
  return p * (T(1) + T(2) * z * lse) - target;
}

}  // namespace softmax
}  // namespace tf_ops

#endif  // TF_OPS_CC_SOFTMAX_SOFTMAX_MATH_H_
