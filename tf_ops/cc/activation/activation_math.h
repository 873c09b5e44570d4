// The math of every activation, stated once.
//
// This header is plain C++17 that nvcc also compiles: no TensorFlow, no Eigen.
// The CPU engine (activation_cpu.cc), the CUDA engine
// (cu/activation/activation_gpu.cu) and the XLA lowering (activation_xla.cc)
// all instantiate these functors, so the kernels, the lowerings and every
// derivative order cannot drift apart.
//
// An activation is a small struct with:
//   kName                 the op name without the "TfOps>" namespace;
//   kCyclesPerElement     rough CPU cost of the forward op, for the thread
//                         pool's cost model;
//   kGradTakesOutputs     what the grad op receives as v: the features x
//                         (false) or the outputs y = f(x) (true, Elu);
//   its attributes        as plain data members (float attrs are float32, as
//                         TensorFlow stores them);
// and three templates over the value type T:
//   Forward(x)            f(x);
//   Derivative(v)         f' expressed in v: f'(x), or for Elu f' as a
//                         function of y;
//   SecondDerivative(v)   d Derivative(v) / dv: f''(x), or for Elu the
//                         derivative of the y-form in y.
// The three ops every activation gets are composed from them at the end of
// this file. They are written over the primitives of math_primitives.h only
// (no `if` or `?:` on values: Select), so that T can be float or double on
// the CPU and in CUDA code, or XlaValue (xla_value.h) in the XLA lowering.
// Half and bfloat16 are computed in float and rounded once, by the engines.
//
// Conventions (branch at 0, NaN, infinities) follow TensorFlow's kernels; see
// shared/activations-math.md and docs/ops.md.

#ifndef TF_OPS_CC_ACTIVATION_MATH_H_
#define TF_OPS_CC_ACTIVATION_MATH_H_

#include "tf_ops/cc/core/math_primitives.h"

namespace tf_ops {

// LeakyRelu: f(x) = x if x > 0 else alpha * x.
// A select, not max(x, alpha * x): the two differ for alpha > 1 or alpha < 0.
// f' is piecewise constant: f'' = 0 (as TensorFlow's LeakyReluGrad gradient).
struct LeakyRelu {
  static constexpr const char* kName = "LeakyRelu";
  static constexpr int kCyclesPerElement = 2;
  static constexpr bool kGradTakesOutputs = false;
  float alpha = 0.2f;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    return Select(x > T(0), x, SafeMul(x, T(alpha)));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Derivative(T x) const {
    return Select(x > T(0), T(1), T(alpha));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T SecondDerivative(T) const {
    return T(0);
  }
};

// Elu: f(x) = x if x > 0 else alpha * (e^x - 1).
// The grad op takes the outputs y (as TensorFlow's EluGrad and CANN's do):
// f' = 1 where y > 0, else y + alpha, whose derivative in y is 0 or 1. This is
// only well defined when alpha >= 0 (for alpha < 0 a positive y could come
// from either branch), so the attribute check rejects negative alpha.
struct Elu {
  static constexpr const char* kName = "Elu";
  static constexpr int kCyclesPerElement = 20;
  static constexpr bool kGradTakesOutputs = true;
  float alpha = 1.0f;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    return Select(x > T(0), x, T(alpha) * Expm1(x));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Derivative(T y) const {
    return Select(y > T(0), T(1), y + T(alpha));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T SecondDerivative(T y) const {
    return Select(y > T(0), T(0), T(1));
  }
};

// Gelu: f(x) = x * Phi(x), Phi the standard normal CDF (exact form), or the
// tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as tf.nn.gelu.
// The tanh form is evaluated as x * sigmoid(z), z = 2u, which is the same
// function but keeps its accuracy for negative x where 1 + tanh(u) cancels.
// GeluFormula holds each form with the choice fixed at compile time; Gelu
// picks one per call, and Specialize() lets the CPU engine pick once per loop
// (a loop with both formulas in it does not vectorise).
template <bool kApproximate>
struct GeluFormula {
  static constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi)
  static constexpr double kTanhCoeff = 0.044715;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    if constexpr (kApproximate) {
      return LogisticLowerTail(x) * Logistic(Z(x)).s;
    } else {
      return SafeMul(x, Phi(x));
    }
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Derivative(T x) const {
    if constexpr (kApproximate) {
      // f' = s + x z' s (1 - s), s = sigmoid(z).
      const LogisticPair<T> l = Logistic(Z(x));
      const T xc = LogisticTails(x);
      return l.s + (xc * DZ(xc)) * (l.s * l.sm);
    } else {
      const NormalValues<T> n = Normal(x);  // f' = Phi(x) + x phi(x)
      return n.cdf + SafeMul(x, n.pdf);
    }
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T SecondDerivative(T x) const {
    if constexpr (kApproximate) {
      // f'' = s (1-s) (2 z' + x (1 - 2s) z'^2 + x z''), as two products with
      // s (1-s), which is 0 in both tails where the polynomials are infinite.
      const LogisticPair<T> l = Logistic(Z(x));
      const T dz = DZ(x), ss = l.s * l.sm;
      const T d2z = T(12 * kSqrt2OverPi * kTanhCoeff) * x;
      return SafeMul(dz * (T(2) + x * (l.sm - l.s) * dz), ss) +
             SafeMul(x * d2z, ss);
    } else {
      return SafeMul(T(2) - x * x, Pdf(x));  // f'' = phi(x) (2 - x^2)
    }
  }

  // Phi(x) and phi(x) (math_primitives.h's Normal).
  template <typename T>
  TF_OPS_HOST_DEVICE static T Phi(T x) {
    return Normal(x).cdf;
  }
  template <typename T>
  TF_OPS_HOST_DEVICE static T Pdf(T x) {
    return Normal(x).pdf;
  }
  // z = 2u = 2 sqrt(2/pi) (x + 0.044715 x^3), and its derivative z'.
  template <typename T>
  TF_OPS_HOST_DEVICE static T Z(T x) {
    return T(2 * kSqrt2OverPi) * (x + T(kTanhCoeff) * x * x * x);
  }
  template <typename T>
  TF_OPS_HOST_DEVICE static T DZ(T x) {
    return T(2 * kSqrt2OverPi) * (T(1) + T(3 * kTanhCoeff) * x * x);
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
  TF_OPS_HOST_DEVICE T Derivative(T x) const {
    return approximate ? GeluFormula<true>().Derivative(x)
                       : GeluFormula<false>().Derivative(x);
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T SecondDerivative(T x) const {
    return approximate ? GeluFormula<true>().SecondDerivative(x)
                       : GeluFormula<false>().SecondDerivative(x);
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

// Swish: f(x) = x * s, s = sigmoid(z), z = beta x; beta = 1 is SiLU.
// f' = s (1 + z (1 - s)); f'' = beta s (1 - s) (2 + z (1 - 2s)).
// SwishFormula<true> is SiLU, beta fixed at 1 (what models use), whose
// products take the cheaper guard (LogisticTails); SwishFormula<false> is any
// beta (a negative or tiny beta breaks the guard's premise: SafeMul). Swish
// picks one per call; Specialize() lets the CPU engine pick once per loop.
template <bool kUnitBeta>
struct SwishFormula {
  float beta = 1.0f;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    if constexpr (kUnitBeta) {
      return LogisticLowerTail(x) * Logistic(x).s;
    } else {
      return SafeMul(x, Logistic(Z(x)).s);
    }
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Derivative(T x) const {
    const T z = Z(x);
    const LogisticPair<T> l = Logistic(z);
    if constexpr (kUnitBeta) {
      return l.s + LogisticTails(z) * (l.s * l.sm);
    } else {
      return l.s + SafeMul(z, l.s * l.sm);
    }
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T SecondDerivative(T x) const {
    const T z = Z(x);
    const LogisticPair<T> l = Logistic(z);
    return T(beta) * SafeMul(T(2) + z * (l.sm - l.s), l.s * l.sm);
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Z(T x) const {
    if constexpr (kUnitBeta) {
      return x;
    } else {
      return SafeMul(x, T(beta));
    }
  }
};

struct Swish {
  static constexpr const char* kName = "Swish";
  static constexpr int kCyclesPerElement = 20;
  static constexpr bool kGradTakesOutputs = false;
  float beta = 1.0f;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    return beta == 1.0f ? SwishFormula<true>().Forward(x)
                        : SwishFormula<false>{beta}.Forward(x);
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Derivative(T x) const {
    return beta == 1.0f ? SwishFormula<true>().Derivative(x)
                        : SwishFormula<false>{beta}.Derivative(x);
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T SecondDerivative(T x) const {
    return SwishFormula<false>{beta}.SecondDerivative(x);
  }
  // Calls fn with the formula this op computes, as a compile-time choice.
  template <typename Fn>
  void Specialize(Fn&& fn) const {
    if (beta == 1.0f) {
      fn(SwishFormula<true>());
    } else {
      fn(SwishFormula<false>{beta});
    }
  }
};

// Mish: f(x) = x * t, t = tanh(softplus(x)). With n = e^x,
// t = n (n + 2) / (n (n + 2) + 2): one exponential, no overflow below the
// cut-off, beyond which t is 1 to working precision (1 - t < 2 e^-2x, under
// 1e-17 at x = 20). f' = t + x (1 - t^2) s, s = sigmoid(x), with
// 1 - t^2 = 4 (num + 1) / d^2.
struct Mish {
  static constexpr const char* kName = "Mish";
  static constexpr int kCyclesPerElement = 25;
  static constexpr bool kGradTakesOutputs = false;
  static constexpr double kCutoff = 20.0;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    const T n = Exp(x);
    const T num = n * (n + T(2));
    return Select(x > T(kCutoff), x, SafeMul(x, num / (num + T(2))));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Derivative(T x) const {
    const T n = Exp(x);
    const T num = n * (n + T(2));
    const T d = num + T(2);
    const T one_minus_t2 = T(4) * (num + T(1)) / (d * d);
    const T sigmoid = n / (T(1) + n);
    return Select(x > T(kCutoff), T(1),
                  num / d + SafeMul(x, one_minus_t2 * sigmoid));
  }
  // f'' = 2 D + x D (1 - s - 2 t s), D = (1 - t^2) s. No cut-off: f'' is
  // about -8 x e^-2x for large x (-6.3e-6 at x = 8), so it is computed from
  // e = e^-|x| in a form without cancellation on either side of 0: with
  // k = 1 + e, w = e (x > 0) or 1, v = 1 (x > 0) or e, q = k^2 + w^2,
  //   t = v (v + 2w) / q,  s = v / k,  1 - s = w / k,  1 - t^2 = (a k)^2,
  //   a = 2 w / q,  and  f'' = (a v) a (2k + x (w - 2 v^2 (v + 2w) / q)).
  // a v and a are each about 2 e^-x for large x, so f'' underflows only
  // where it is below the smallest float, not where e^-2x is.
  template <typename T>
  TF_OPS_HOST_DEVICE T SecondDerivative(T x) const {
    const T e = Exp(-Abs(x));
    const T k = T(1) + e;
    const T w = Select(x > T(0), e, T(1));
    const T v = Select(x > T(0), T(1), e);
    const T inv_q = T(1) / (k * k + w * w);
    const T a = T(2) * w * inv_q;
    const T bracket = T(2) * k + x * (w - T(2) * v * v * (v + T(2) * w) * inv_q);
    return SafeMul(SafeMul(bracket, a), a * v);  // 0 at +-inf
  }
};

// HardSwish (MobileNetV3): f(x) = x * relu6(x + 3) / 6, as
// keras.activations.hard_swish. f'(x) = 0 for x <= -3, (2x + 3) / 6 inside,
// 1 for x >= 3: at the two kinks the derivative TF's autodiff gives for the
// composite (Relu6Grad passes the gradient only strictly inside (0, 6));
// f'' = 1/3 strictly inside, else 0.
struct HardSwish {
  static constexpr const char* kName = "HardSwish";
  static constexpr int kCyclesPerElement = 4;
  static constexpr bool kGradTakesOutputs = false;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    T r = x + T(3);
    r = Select(r > T(0), r, T(0));  // relu6; NaN becomes 0 here, x carries it
    r = Select(r < T(6), r, T(6));
    return SafeMul(x, r * T(1.0 / 6.0));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Derivative(T x) const {
    const T inside = (T(2) * x + T(3)) * T(1.0 / 6.0);
    // NaN fails both tests and takes `inside`, which is NaN.
    return Select(x <= T(-3), T(0), Select(x >= T(3), T(1), inside));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T SecondDerivative(T x) const {
    return Select(And(x > T(-3), x < T(3)), T(1.0 / 3.0), T(0));
  }
};

// Celu (Barron 2017, "continuously differentiable ELU"): f(x) = x if x > 0
// else alpha * (e^(x / alpha) - 1). Unlike Elu with alpha != 1 its derivative
// is continuous at 0: f' = 1 for x > 0, else e^(x / alpha); f'' = 0 for x > 0,
// else e^(x / alpha) / alpha. alpha must be > 0 (and a normal float).
struct Celu {
  static constexpr const char* kName = "Celu";
  static constexpr int kCyclesPerElement = 20;
  static constexpr bool kGradTakesOutputs = false;
  float alpha = 1.0f;

  // Where |x / alpha| < 2^-100 (alpha huge), e^q - 1 = q in float and double
  // alike, so f = x; q itself may be subnormal there, and flushed to 0 on
  // the CPU, which would make alpha * Expm1(q) a zero.
  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    const T t = x / T(alpha);
    // Below 1e-30, alpha * (e^t - 1) is x to the last bit; and with a huge
    // alpha, t may be subnormal, which flushed kernels read as 0.
    const T negative = Select(Abs(t) < T(1e-30), x, T(alpha) * Expm1(t));
    return Select(x > T(0), x, negative);
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Derivative(T x) const {
    return Select(x > T(0), T(1), Exp(x / T(alpha)));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T SecondDerivative(T x) const {
    return Select(x > T(0), T(0), Exp(x / T(alpha)) / T(alpha));
  }
};

// Sigmoid: f(x) = 1 / (1 + e^-x), as tf.sigmoid; the gate of the original GLU
// (tf_ops.glu). With s = sigmoid(x) and 1 - s = sigmoid(-x) (Logistic's pair,
// no cancellation in either tail): f' = s (1 - s), f'' = s (1 - s) (1 - 2s),
// 1 - 2s written as (1 - s) - s.
struct Sigmoid {
  static constexpr const char* kName = "Sigmoid";
  static constexpr int kCyclesPerElement = 15;
  static constexpr bool kGradTakesOutputs = false;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    return Logistic(x).s;
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Derivative(T x) const {
    const LogisticPair<T> l = Logistic(x);
    return l.s * l.sm;
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T SecondDerivative(T x) const {
    const LogisticPair<T> l = Logistic(x);
    return l.s * l.sm * (l.sm - l.s);
  }
};

// Relu6: f(x) = min(max(x, 0), 6), as tf.nn.relu6 (what Keras's
// ReLU(max_value=6) and keras.activations.relu6 run). The clamp keeps NaN and
// the sign of a zero. f' = 1 strictly inside (0, 6), else 0, as TensorFlow's
// Relu6Grad; f'' = 0.
struct Relu6 {
  static constexpr const char* kName = "Relu6";
  static constexpr int kCyclesPerElement = 2;
  static constexpr bool kGradTakesOutputs = false;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    return Clamp(x, T(0), T(6));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Derivative(T x) const {
    return Select(And(x > T(0), x < T(6)), T(1), T(0));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T SecondDerivative(T) const {
    return T(0);
  }
};

// HardSigmoid: f(x) = relu6(x + 3) / 6, as keras.activations.hard_sigmoid
// (Keras 3's TensorFlow backend: the sum rounded, then clamped, then divided).
// f' = 1/6 where 0 < x + 3 < 6 (the rounded sum, as TensorFlow's Relu6Grad
// reads it), else 0; f'' = 0. The clamp keeps NaN.
struct HardSigmoid {
  static constexpr const char* kName = "HardSigmoid";
  static constexpr int kCyclesPerElement = 2;
  static constexpr bool kGradTakesOutputs = false;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    return Clamp(x + T(3), T(0), T(6)) / T(6);
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Derivative(T x) const {
    const T r = x + T(3);
    return Select(And(r > T(0), r < T(6)), T(1.0 / 6.0), T(0));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T SecondDerivative(T) const {
    return T(0);
  }
};

// Tanh: f(x) = tanh(x), as -expm1(-2|x|) / (2 + expm1(-2|x|)) with x's sign:
// no cancellation near 0 (2 sigmoid(2x) - 1 loses every digit there), and 1
// exactly at infinity. Below 1e-30 it is x itself (keeping -0, and a
// subnormal that flushed kernels would read as 0). The grad op takes the
// features, as Sigmoid's: f' = sech^2 x = 4 s (1 - s), s = sigmoid(2x), has
// no cancellation in the tails, where 1 - y^2 from rounded outputs y has none
// of its digits left, and no overflow for any v the grad op may be given.
// f'' = -2 tanh(x) f'(x).
struct Tanh {
  static constexpr const char* kName = "Tanh";
  static constexpr int kCyclesPerElement = 15;
  static constexpr bool kGradTakesOutputs = false;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    return Select(Abs(x) < T(1e-30), x, Signed(x, Magnitude(x)));
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Derivative(T x) const {
    const LogisticPair<T> l = Logistic(T(2) * x);
    return T(4) * l.s * l.sm;
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T SecondDerivative(T x) const {
    return T(-2) * Signed(x, Magnitude(x)) * Derivative(x);
  }

 private:
  // tanh |x|.
  template <typename T>
  TF_OPS_HOST_DEVICE static T Magnitude(T x) {
    const T t = Expm1(T(-2) * Abs(x));
    return -t / (T(2) + t);
  }
  // m with x's sign (one use of m: a select of m and -m keeps both).
  template <typename T>
  TF_OPS_HOST_DEVICE static T Signed(T x, T m) {
    return m * Select(x < T(0), T(-1), T(1));
  }
};

// ------------------------------------------------------ the three ops ----
// What each op computes, element by element, from the functor: the CPU and
// CUDA engines and the XLA lowering all call these.

// TfOps>{Act}: y = f(x).
template <typename Op, typename T>
TF_OPS_HOST_DEVICE T ForwardOf(const Op& op, T x) {
  return op.Forward(x);
}

// TfOps>{Act}Grad: backprops = gradients * f'(v).
template <typename Op, typename T>
TF_OPS_HOST_DEVICE T GradOf(const Op& op, T g, T v) {
  return g * op.Derivative(v);
}

// TfOps>{Act}GradGrad, the gradient of the grad op G(g, v) = g f'(v) for the
// upstream gradient u: d_gradients = u f'(v), d_v = u g f''(v) (IEEE
// products: an infinite or NaN u or g gives NaN even where f'' is 0, as the
// grad op does where f' is 0).
template <typename T>
struct GradGradValues {
  T d_gradients;
  T d_v;
};
template <typename Op, typename T>
TF_OPS_HOST_DEVICE GradGradValues<T> GradGradOf(const Op& op, T u, T g, T v) {
  return {u * op.Derivative(v), u * g * op.SecondDerivative(v)};
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_ACTIVATION_MATH_H_
