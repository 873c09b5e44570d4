// The primitives the activation functors (activation_math.h) are written in,
// for float and double: on the host (the CPU engine) and in CUDA device code.
//
// A functor states its math once, as templates over a value type T, using
// only:
//   arithmetic      + - * / and unary minus;
//   constants       T(c): c in T's precision (for XLA, of the other operand's
//                   element type);
//   comparisons     < <= > >= == != give a mask: bool here;
//   Select(m, a, b) a where m holds, else b; And(m, n), Or(m, n), IsNan(x);
//   functions       Exp, Expm1, Erfc, Abs, SinCos (sin and cos of x);
//   helpers         Logistic(z) (sigma(z) and 1 - sigma(z)), SafeMul(x, w),
//                   Clamp(x, lo, hi), Normal(x) (Phi(x) and phi(x)), written
//                   below over the primitives (Normal also for host floats
//                   by fast_math.h, more accurately).
// Never `if` or `?:` on a value: a loop of selects vectorises on the CPU, and
// the same text builds an XLA graph. The same functor then instantiates with
//   T = float, double   this header (host: fast_math.h's vectorisable float
//                       functions; device: CUDA's);
//   T = XlaValue        xla_value.h, included only by the XLA lowering, which
//                       defines the primitives over xla::XlaOp (and may map a
//                       helper to a better XLA op). The functors find them by
//                       argument-dependent lookup: XlaValue is in tf_ops.
//
// Plain C++17 that nvcc also compiles: no TensorFlow, no Eigen.

#ifndef TF_OPS_CC_MATH_PRIMITIVES_H_
#define TF_OPS_CC_MATH_PRIMITIVES_H_

#include <math.h>

#include "tf_ops/cc/core/fast_math.h"

#if defined(__CUDACC__)
#define TF_OPS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TF_OPS_HOST_DEVICE inline
#endif

namespace tf_ops {

// ------------------------------------------------ selects and masks -------

template <typename T>
TF_OPS_HOST_DEVICE T Select(bool mask, T a, T b) {
  return mask ? a : b;
}
// Bitwise, not short-circuit: both sides are computed anyway, and a branch
// would stop the loop from vectorising.
TF_OPS_HOST_DEVICE bool And(bool a, bool b) { return a & b; }
TF_OPS_HOST_DEVICE bool Or(bool a, bool b) { return a | b; }
template <typename T>
TF_OPS_HOST_DEVICE bool IsNan(T x) {
  return x != x;
}

// ------------------------------------------------------- functions -------
// float: on the GPU, CUDA's device functions; on the CPU, fast_math.h's
// vectorisable versions (the C library's would keep every loop scalar).
// double: the C library (host) and CUDA's double functions (device).
#if defined(__CUDA_ARCH__)
TF_OPS_HOST_DEVICE float Exp(float x) { return ::expf(x); }
TF_OPS_HOST_DEVICE float Expm1(float x) { return ::expm1f(x); }
TF_OPS_HOST_DEVICE float Erfc(float x) { return ::erfcf(x); }
#else
TF_OPS_HOST_DEVICE float Exp(float x) { return fast_math::ExpF(x); }
TF_OPS_HOST_DEVICE float Expm1(float x) { return fast_math::Expm1F(x); }
TF_OPS_HOST_DEVICE float Erfc(float x) { return fast_math::ErfcF(x); }
#endif
TF_OPS_HOST_DEVICE double Exp(double x) { return ::exp(x); }
TF_OPS_HOST_DEVICE double Expm1(double x) { return ::expm1(x); }
TF_OPS_HOST_DEVICE double Erfc(double x) { return ::erfc(x); }
TF_OPS_HOST_DEVICE float Abs(float x) { return ::fabsf(x); }
TF_OPS_HOST_DEVICE double Abs(double x) { return ::fabs(x); }

// sin(x) and cos(x) together (the rotary embedding's rotations): CUDA's
// sincos on the device, fast_math::SinCosF for host floats, the C library
// for host doubles.
template <typename T>
struct SinCosPair {
  T sin;
  T cos;
};
TF_OPS_HOST_DEVICE SinCosPair<float> SinCos(float x) {
#if defined(__CUDA_ARCH__)
  float s, c;
  ::sincosf(x, &s, &c);
  return {s, c};
#else
  const fast_math::SinCosPairF p = fast_math::SinCosF(x);
  return {p.sin, p.cos};
#endif
}
TF_OPS_HOST_DEVICE SinCosPair<double> SinCos(double x) {
  return {::sin(x), ::cos(x)};
}

// ------------------------------------------ helpers over the above -------
// Written over the primitives only, so they serve every value type; the XLA
// lowering may overload them with a better-fitting XLA op.

// x limited to [lo, hi]; NaN stays NaN.
template <typename T>
TF_OPS_HOST_DEVICE T Clamp(T x, T lo, T hi) {
  return Select(x > hi, hi, Select(x < lo, lo, x));
}

// x * w, except that an infinite x times a zero w gives a (signed) zero where
// IEEE gives NaN. The activations are products like x * Phi(x) whose limit at
// x = -inf is 0; this makes them reach it. NaN still propagates.
template <typename T>
TF_OPS_HOST_DEVICE T SafeMul(T x, T w) {
  const T product = x * w;
  return Select(IsNan(product), Clamp(x, T(-1e30), T(1e30)) * w, product);
}

// x clamped where a logistic factor of it vanishes, for the products x s and
// x s (1 - s) of s = sigmoid(z) with z growing at least as fast as x (SiLU's
// z = x, the tanh GELU's cubic). s is exactly 0 for x < -kLogisticTail, and
// s (1 - s) for |x| > kLogisticTail, in float and double (e^1000 overflows
// both), so the clamp changes no finite product and gives the limit 0 where
// IEEE's inf * 0 is NaN: a compare or two instead of SafeMul's test of the
// product (a fifth of the SiLU batch norm's time on the CPU).
constexpr double kLogisticTail = 1000.0;
template <typename T>
TF_OPS_HOST_DEVICE T LogisticLowerTail(T x) {  // for x * s
  return Select(x < T(-kLogisticTail), T(-kLogisticTail), x);
}
template <typename T>
TF_OPS_HOST_DEVICE T LogisticTails(T x) {  // for x * s * (1 - s)
  return Clamp(x, T(-kLogisticTail), T(kLogisticTail));
}

// The logistic function s = 1 / (1 + e^-z) and its complement sm = 1 - s,
// both accurate in the tails (sm = e^-z s where s > 1/2), from one
// exponential.
template <typename T>
struct LogisticPair {
  T s;
  T sm;
};
template <typename T>
TF_OPS_HOST_DEVICE LogisticPair<T> Logistic(T z) {
  const T e = Exp(-z);
  const T s = T(1) / (T(1) + e);
  return {s, Select(s > T(0.5), e * s, T(1) - s)};
}

// The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2 and density phi(x)
// = e^(-x^2 / 2) / sqrt(2 pi). Host floats take fast_math::NormalCdfPdfF:
// one shared Gaussian of x taken exactly, where erfc of a rounded -x / sqrt 2
// loses up to ~x^2 ulps in the left tail (177 ulps in Gelu at x = -12).
template <typename T>
struct NormalValues {
  T cdf;
  T pdf;
};
template <typename T>
TF_OPS_HOST_DEVICE NormalValues<T> Normal(T x) {
  return {T(0.5) * Erfc(T(-0.7071067811865476) * x),
          T(0.3989422804014327) * Exp(T(-0.5) * x * x)};
}
TF_OPS_HOST_DEVICE NormalValues<float> Normal(float x) {
#if defined(__CUDA_ARCH__)
  return Normal<float>(x);  // the generic form, over CUDA's functions
#else
  const fast_math::NormalPair n = fast_math::NormalCdfPdfF(x);
  return {n.cdf, n.pdf};
#endif
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_MATH_PRIMITIVES_H_
