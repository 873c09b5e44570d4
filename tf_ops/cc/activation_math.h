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

#if defined(__CUDACC__)
#define TF_OPS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TF_OPS_HOST_DEVICE inline
#endif

namespace tf_ops {

// Overloads of the C math functions by precision. The C names (expm1f, ...)
// exist both in the host C library and in CUDA's device math library, so
// these compile unchanged with g++ and nvcc.
TF_OPS_HOST_DEVICE float Expm1(float x) { return ::expm1f(x); }
TF_OPS_HOST_DEVICE double Expm1(double x) { return ::expm1(x); }

// x * w, except that an infinite x times a zero w gives a (signed) zero where
// IEEE gives NaN. The activations below are products like x * Phi(x) whose
// limit at x = -inf is 0; this makes them reach it. NaN still propagates.
template <typename T>
TF_OPS_HOST_DEVICE T SafeMul(T x, T w) {
  const T big = static_cast<T>(1e30);
  const T finite_x = x > big ? big : (x < -big ? -big : x);
  return w == T(0) ? finite_x * w : x * w;
}

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

}  // namespace tf_ops

#endif  // TF_OPS_CC_ACTIVATION_MATH_H_
