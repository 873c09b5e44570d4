// What the normalisation ops compute, stated once: the CPU engine
// (norm_cpu.cc), the CUDA engine (cu/norm/norm_gpu.cu) and the XLA lowering
// (norm_xla.cc) all call these. Each row of n elements (the last axis) is
// normalised on its own:
//
//   layer norm   mu = mean(x),  var = mean((x - mu)^2)
//   RMS norm     mu = 0,        var = mean(x^2)
//   both         rstd = 1 / sqrt(var + eps),  xhat = (x - mu) * rstd,
//                y = gamma * xhat + beta              (RMS: beta = 0)
//
// RMS norm is layer norm with the mean held at 0 (and no beta), so one set of
// formulas serves both; `centered` says which. The residual form first
// computes h = x + r, rounded to the storage type as Keras's `x + r` is, and
// normalises h.
//
// Backward, from the saved per-row (mu, rstd), with gg = g * gamma:
//   c_mean = mean(gg)           (0 for RMS norm)
//   c_proj = mean(gg * xhat)
//   dx     = rstd * (gg - c_mean - xhat * c_proj)   (+ dh, the residual's)
//   dgamma = sum over rows of g * xhat,   dbeta = sum over rows of g
//
// A constant row (var = 0) gives xhat = 0 and y = beta, as Keras's composite
// does, for any eps > 0.
//
// The row sums themselves are the engines' (lanes on the CPU, shuffles on the
// GPU, an XLA reduce), accumulated in the compute type T: float for half,
// bfloat16 and float, double for double. Plain C++17 that nvcc compiles; T is
// float, double or XlaValue.

#ifndef TF_OPS_CC_NORM_NORM_MATH_H_
#define TF_OPS_CC_NORM_NORM_MATH_H_

#include <cmath>

#include "tf_ops/cc/core/math_primitives.h"

namespace tf_ops {
namespace norm {

TF_OPS_HOST_DEVICE float NormSqrt(float v) { return ::sqrtf(v); }
TF_OPS_HOST_DEVICE double NormSqrt(double v) { return ::sqrt(v); }

// The row's mean from its sum (0 for RMS norm, whatever the sum).
template <typename T>
TF_OPS_HOST_DEVICE T RowMean(bool centered, T sum, T n) {
  return centered ? sum / n : T(0);
}

// The deviation whose square the variance averages.
template <typename T>
TF_OPS_HOST_DEVICE T Deviation(T x, T mean) {
  return x - mean;
}

// rstd from the sum of squared deviations of n elements.
template <typename T>
TF_OPS_HOST_DEVICE T RowRstd(T sum_sq, T n, T eps) {
  return T(1) / NormSqrt(sum_sq / n + eps);
}

template <typename T>
TF_OPS_HOST_DEVICE T Normalized(T x, T mean, T rstd) {
  return (x - mean) * rstd;
}

template <typename T>
TF_OPS_HOST_DEVICE T NormOutput(T xhat, T gamma, T beta) {
  return xhat * gamma + beta;
}

// The two row constants of the backward, from the row sums of gg and
// gg * xhat over n elements.
template <typename T>
struct GradRowConstants {
  T c_mean;
  T c_proj;
};
template <typename T>
TF_OPS_HOST_DEVICE GradRowConstants<T> GradConstants(bool centered, T sum_gg,
                                                     T sum_gg_xhat, T n) {
  return {centered ? sum_gg / n : T(0), sum_gg_xhat / n};
}

template <typename T>
TF_OPS_HOST_DEVICE T NormInputGrad(T gg, T xhat, T rstd,
                                   GradRowConstants<T> c) {
  return rstd * (gg - c.c_mean - xhat * c.c_proj);
}

}  // namespace norm
}  // namespace tf_ops

#endif  // TF_OPS_CC_NORM_NORM_MATH_H_
