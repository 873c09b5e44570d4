// The math of every activation, written once.
//
// This header is plain C++17 that nvcc also compiles: no TensorFlow, no Eigen.
// The CPU engine (elementwise_cpu.h) and the CUDA engine (cu/elementwise_gpu.cu)
// both run these functors, so the two devices cannot drift apart.
//
// An activation is a small struct with:
//   kName                 the op name without the "TfOps>" namespace;
//   kCyclesPerElement     rough CPU cost, for the thread pool's cost model;
//   its attributes        as plain data members (float attrs are float32, as
//                         TensorFlow stores them);
//   Forward(x)            f(x);
//   Backward(g, v)        dx = g * f'(.), where v is what the grad op receives:
//                         the features x for most ops, the outputs y for Elu
//                         (kGradTakesOutputs says which).
// T is the compute type: float for half, bfloat16 and float; double for double.
// Values are computed in T and rounded to the storage type once, by the engine.
//
// Conventions (branch at 0, NaN, infinities) follow TensorFlow's kernels; see
// shared/activations-math.md and docs/adding-an-op.md.

#ifndef TF_OPS_CC_ACTIVATION_MATH_H_
#define TF_OPS_CC_ACTIVATION_MATH_H_

#include <math.h>

#include "tf_ops/cc/fast_math.h"

#if defined(__CUDACC__)
#define TF_OPS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TF_OPS_HOST_DEVICE inline
#endif

namespace tf_ops {

// The math functions the activations use, overloaded by precision.
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

// x * w, except that an infinite x times a zero w gives a (signed) zero where
// IEEE gives NaN. The activations below are products like x * Phi(x) whose
// limit at x = -inf is 0; this makes them reach it. NaN still propagates.
// Only selects and compares, so that loops calling it vectorise.
template <typename T>
TF_OPS_HOST_DEVICE T SafeMul(T x, T w) {
  const T product = x * w;
  const T big = static_cast<T>(1e30);
  const T finite_x = x > big ? big : (x < -big ? -big : x);  // NaN stays NaN
  return product != product ? finite_x * w : product;
}

// The logistic function and its complement, both accurate in the tails:
// s = 1 / (1 + e^-z) and sm = 1 - s = e^-z * s, with one exponential.
template <typename T>
struct Logistic {
  T s, sm;
  TF_OPS_HOST_DEVICE explicit Logistic(T z) {
    const T e = Exp(-z);
    s = T(1) / (T(1) + e);
    sm = s > T(0.5) ? e * s : T(1) - s;
  }
};

// LeakyRelu: f(x) = x if x > 0 else alpha * x.
// A select, not max(x, alpha * x): the two differ for alpha > 1 or alpha < 0.
struct LeakyRelu {
  static constexpr const char* kName = "LeakyRelu";
  static constexpr int kCyclesPerElement = 2;
  static constexpr bool kGradTakesOutputs = false;
  float alpha = 0.2f;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    return x > T(0) ? x : SafeMul(x, static_cast<T>(alpha));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Backward(T g, T x) const {
    return x > T(0) ? g : static_cast<T>(alpha) * g;
  }
};

// Elu: f(x) = x if x > 0 else alpha * (e^x - 1).
// The grad op takes the outputs y (as TensorFlow's EluGrad and CANN's do):
// f'(x) = 1 where y > 0, else y + alpha. This is only well defined when
// alpha >= 0 (for alpha < 0 a positive y could come from either branch), so
// the attribute check rejects negative alpha.
struct Elu {
  static constexpr const char* kName = "Elu";
  static constexpr int kCyclesPerElement = 20;
  static constexpr bool kGradTakesOutputs = true;
  float alpha = 1.0f;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    return x > T(0) ? x : static_cast<T>(alpha) * Expm1(x);
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Backward(T g, T y) const {
    return y > T(0) ? g : g * (y + static_cast<T>(alpha));
  }
};

// Gelu: f(x) = x * Phi(x), Phi the standard normal CDF (exact form), or the
// tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as tf.nn.gelu.
// The tanh form is evaluated as x * sigmoid(2u), which is the same function
// but keeps its accuracy for negative x where 1 + tanh(u) cancels.
// GeluFormula holds each form with the choice fixed at compile time; Gelu
// picks one per call, and Specialize() lets the CPU engine pick once per loop
// (a loop with both formulas in it does not vectorise).
template <bool kApproximate>
struct GeluFormula {
  static constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi)
  static constexpr double kInvSqrt2Pi = 0.3989422804014327;   // 1/sqrt(2pi)
  static constexpr double kInvSqrt2 = 0.7071067811865476;     // 1/sqrt(2)
  static constexpr double kTanhCoeff = 0.044715;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    if (kApproximate) return SafeMul(x, Logistic<T>(TwoU(x)).s);
    return SafeMul(x, Phi(x));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Backward(T g, T x) const {
    if (kApproximate) {
      // f' = s + x s (1 - s) (2u)'.
      const Logistic<T> l(TwoU(x));
      const T two_u_prime =
          static_cast<T>(2 * kSqrt2OverPi) *
          (T(1) + static_cast<T>(3 * kTanhCoeff) * x * x);
      return g * (l.s + SafeMul(x * two_u_prime, l.s * l.sm));
    }
    // f' = Phi(x) + x phi(x).
    const T phi = static_cast<T>(kInvSqrt2Pi) * Exp(T(-0.5) * x * x);
    return g * (Phi(x) + SafeMul(x, phi));
  }

  // Phi(x) = erfc(-x / sqrt(2)) / 2: accurate for negative x, unlike erf.
  template <typename T>
  TF_OPS_HOST_DEVICE static T Phi(T x) {
    return T(0.5) * Erfc(-static_cast<T>(kInvSqrt2) * x);
  }
  // 2u = 2 sqrt(2/pi) (x + 0.044715 x^3).
  template <typename T>
  TF_OPS_HOST_DEVICE static T TwoU(T x) {
    return static_cast<T>(2 * kSqrt2OverPi) *
           (x + static_cast<T>(kTanhCoeff) * x * x * x);
  }
};

struct Gelu {
  static constexpr const char* kName = "Gelu";
  static constexpr int kCyclesPerElement = 40;
  static constexpr bool kGradTakesOutputs = false;
  bool approximate = false;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    return approximate ? GeluFormula<true>().Forward(x)
                       : GeluFormula<false>().Forward(x);
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Backward(T g, T x) const {
    return approximate ? GeluFormula<true>().Backward(g, x)
                       : GeluFormula<false>().Backward(g, x);
  }
  // Calls fn with the formula this op computes, as a compile-time choice.
  template <typename Fn>
  void Specialize(Fn&& fn) const {
    if (approximate) {
      fn(GeluFormula<true>());
    } else {
      fn(GeluFormula<false>());
    }
  }
};

// Swish: f(x) = x * sigmoid(beta x); beta = 1 is SiLU (tf.nn.silu).
struct Swish {
  static constexpr const char* kName = "Swish";
  static constexpr int kCyclesPerElement = 20;
  static constexpr bool kGradTakesOutputs = false;
  float beta = 1.0f;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    return SafeMul(x, Logistic<T>(SafeMul(x, static_cast<T>(beta))).s);
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Backward(T g, T x) const {
    // f' = s (1 + z (1 - s)), z = beta x.
    const T z = SafeMul(x, static_cast<T>(beta));
    const Logistic<T> l(z);
    return g * (l.s + SafeMul(z, l.s * l.sm));
  }
};

// Mish: f(x) = x * tanh(softplus(x)). With n = e^x,
// tanh(log(1 + n)) = n (n + 2) / (n (n + 2) + 2): one exponential, no
// overflow below the cut-off, beyond which tanh(softplus(x)) is 1 to working
// precision (1 - t < 2 e^-2x, under 1e-17 at x = 20).
struct Mish {
  static constexpr const char* kName = "Mish";
  static constexpr int kCyclesPerElement = 25;
  static constexpr bool kGradTakesOutputs = false;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    if (x > T(kCutoff)) return x;
    const T n = Exp(x);
    const T num = n * (n + T(2));
    return SafeMul(x, num / (num + T(2)));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Backward(T g, T x) const {
    if (x > T(kCutoff)) return g;
    // f' = t + x (1 - t^2) sigmoid(x), with 1 - t^2 = 4 (num + 1) / d^2.
    const T n = Exp(x);
    const T num = n * (n + T(2));
    const T d = num + T(2);
    const T one_minus_t2 = T(4) * (num + T(1)) / (d * d);
    const T sigmoid = n / (T(1) + n);
    return g * (num / d + SafeMul(x, one_minus_t2 * sigmoid));
  }

  static constexpr double kCutoff = 20.0;
};

// HardSwish (MobileNetV3): f(x) = x * relu6(x + 3) / 6, as
// keras.activations.hard_swish. f'(x) = 0 for x <= -3, (2x + 3) / 6 inside,
// 1 for x >= 3: at the two kinks the derivative TF's autodiff gives for the
// composite (Relu6Grad passes the gradient only strictly inside (0, 6)).
struct HardSwish {
  static constexpr const char* kName = "HardSwish";
  static constexpr int kCyclesPerElement = 4;
  static constexpr bool kGradTakesOutputs = false;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    T r = x + T(3);
    r = r > T(0) ? r : T(0);  // relu6; NaN becomes 0 here but x carries it
    r = r < T(6) ? r : T(6);
    return SafeMul(x, r * static_cast<T>(1.0 / 6.0));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Backward(T g, T x) const {
    const T inside = (T(2) * x + T(3)) * static_cast<T>(1.0 / 6.0);
    // NaN fails both tests and takes `inside`, which is NaN.
    const T slope = x <= T(-3) ? T(0) : (x >= T(3) ? T(1) : inside);
    return g * slope;
  }
};

}  // namespace tf_ops

#endif  // TF_OPS_CC_ACTIVATION_MATH_H_
