// The accuracy tool's reference: every activation and its derivative stated
// again, independently of activation_math.h, from the definitions in
// shared/activations-math.md (and docs/ops.md), in a wider type R (double,
// or long double to check that double is enough) with the C library's
// erfc, expm1, exp, tanh, log1p, cosh.
//
// One specialisation of Reference<Op> per functor in activation_list.h. A new
// activation does not compile into the tool until it has one here: the
// primary template's static_assert names it.
//
// Each specialisation gives:
//   Variants()      the attribute values to sweep, the default first (the
//                   documented variants of tests/op_specs.py after it);
//   Forward(op, x)  f(x) for finite x;
//   Grad(op, v)     f'(.) for finite v, the grad op's second input (the
//                   features x, or the outputs y for Elu), with the upstream
//                   gradient 1; as {value, scale}: see Value;
//   Limits(op)      the values at +-inf, which the formulas cannot always
//                   evaluate (inf * 0), as docs/ops.md states them.
//
// Identities used where the literal formula would lose the answer in R itself
// (these are restatements of the math, not of the kernels' code):
//   (1 + tanh u) / 2 = sigma(2u)           (cancels to 0 for u << 0)
//   1 - tanh(a)^2   = 1 / cosh(a)^2         (cancels to 0 for a >> 0)
//   softplus(x)     = x + log1p(e^-x), x > 0 (e^x overflows)
//   Phi(x)          = erfc(-x / sqrt 2) / 2  (1 + erf cancels for x << 0)

#ifndef TF_OPS_TOOLS_ACCURACY_REFERENCE_H_
#define TF_OPS_TOOLS_ACCURACY_REFERENCE_H_

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "tf_ops/cc/activation/activation_math.h"

namespace tf_ops {
namespace accuracy {

// A derivative and the scale its error is measured against. f' is a sum of
// terms for Gelu, Swish and Mish (activations-math.md), which cancel where f'
// crosses zero (gelu' at x = -0.75, swish' at z = -1.28, mish' at -1.19):
// there no evaluation in float can be accurate relative to f' itself, only to
// the terms. `scale` is the sum of the terms' magnitudes; it equals |value|
// wherever there is no cancellation, so the error in ulps of `scale` is the
// ordinary ulp error there. Forward values are measured against |value|.
template <typename R>
struct Value {
  R value;
  R scale;
};

template <typename R>
Value<R> Plain(R v) {
  return {v, std::fabs(v)};
}

// Values at x = +inf and -inf: f(+inf), f(-inf), f'(+inf), f'(-inf).
struct Limits {
  double forward_pos, forward_neg, grad_pos, grad_neg;
};

// An attribute variant. `full`: `accuracy_sweep --full` sweeps it over every
// float32 input (the default attributes, and Gelu's second formula); the
// other variants get the sampled inputs (--sample) there too, to keep the
// full sweep near an hour on 2 cores.
template <typename Op>
struct Variant {
  Op op;
  std::string attrs;  // "alpha=0.2", "" when the op has no attributes
  bool full = false;
};

// A float attribute as docs and tests/op_specs.py write it: 0.2, 1, -0.3.
inline std::string AttrString(float a) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(a));
  return buf;
}

template <typename R>
R Logistic(R z) {  // 1 / (1 + e^-z) without overflow; sigma(-z) = 1 - sigma(z)
  const R e = std::exp(-std::fabs(z));
  return z >= 0 ? R(1) / (R(1) + e) : e / (R(1) + e);
}

template <typename Op>
struct Reference {
  static_assert(sizeof(Op) == 0,
                "tools/accuracy/reference.h has no Reference<Op> for this "
                "activation: state its f and f' there (from the math, not "
                "from activation_math.h) so the accuracy tool covers it");
};

constexpr double kInf = std::numeric_limits<double>::infinity();

// ------------------------------------------------------------- LeakyRelu ---
template <>
struct Reference<LeakyRelu> {
  static std::vector<Variant<LeakyRelu>> Variants() {
    std::vector<Variant<LeakyRelu>> v;
    for (float a : {0.2f, 0.0f, 1.0f, 1.5f, -0.3f}) {
      LeakyRelu op;
      op.alpha = a;
      v.push_back({op, "alpha=" + AttrString(a), v.empty()});
    }
    return v;
  }
  template <typename R>
  static R Forward(const LeakyRelu& op, R x) {
    return x > 0 ? x : R(op.alpha) * x;
  }
  template <typename R>
  static Value<R> Grad(const LeakyRelu& op, R v) {
    return Plain(v > 0 ? R(1) : R(op.alpha));
  }
  static Limits LimitsOf(const LeakyRelu& op) {
    const double a = op.alpha;
    return {kInf, a > 0 ? -kInf : (a < 0 ? kInf : -0.0), 1.0, a};
  }
};

// ------------------------------------------------------------------- Elu ---
template <>
struct Reference<Elu> {
  static std::vector<Variant<Elu>> Variants() {
    std::vector<Variant<Elu>> v;
    for (float a : {1.0f, 0.2f, 0.0f, 1.5f}) {
      Elu op;
      op.alpha = a;
      v.push_back({op, "alpha=" + AttrString(a), v.empty()});
    }
    return v;
  }
  template <typename R>
  static R Forward(const Elu& op, R x) {
    return x > 0 ? x : R(op.alpha) * std::expm1(x);
  }
  // The grad op takes the outputs y: f' = 1 where y > 0, else y + alpha.
  template <typename R>
  static Value<R> Grad(const Elu& op, R y) {
    return Plain(y > 0 ? R(1) : y + R(op.alpha));
  }
  static Limits LimitsOf(const Elu& op) {
    // f(-inf) = -alpha (-0 for alpha = 0); f' from the outputs y = +inf, -inf.
    return {kInf, -static_cast<double>(op.alpha), 1.0, -kInf};
  }
};

// ------------------------------------------------------------------ Gelu ---
template <>
struct Reference<Gelu> {
  static std::vector<Variant<Gelu>> Variants() {
    Gelu exact, tanh_form;
    exact.approximate = false;
    tanh_form.approximate = true;
    return {{exact, "approximate=false", true},
            {tanh_form, "approximate=true", true}};
  }
  template <typename R>
  static R Forward(const Gelu& op, R x) {
    if (op.approximate) return x * Logistic(TwoU(x));
    return x * Phi(x);
  }
  template <typename R>
  static Value<R> Grad(const Gelu& op, R x) {
    if (op.approximate) {
      // f' = (1 + t)/2 + x (1 - t^2)/2 u', t = tanh u, u' = sqrt(2/pi) (1 +
      // 3 * 0.044715 x^2); with s = sigma(2u): (1 + t)/2 = s, (1 - t^2)/2 =
      // 2 s (1 - s).
      const R z = TwoU(x);
      const R s = Logistic(z), sm = Logistic(-z);
      const R u_prime =
          std::sqrt(R(2) / Pi<R>()) * (R(1) + R(3) * Coeff<R>() * x * x);
      const R second = R(2) * x * s * sm * u_prime;
      return {s + second, s + std::fabs(second)};
    }
    // f' = Phi(x) + x phi(x).
    const R phi = std::exp(-x * x / R(2)) / std::sqrt(R(2) * Pi<R>());
    const R cdf = Phi(x);
    return {cdf + x * phi, cdf + std::fabs(x * phi)};
  }
  static Limits LimitsOf(const Gelu&) { return {kInf, -0.0, 1.0, 0.0}; }

  template <typename R>
  static R Pi() {
    return R(3.14159265358979323846264338327950288L);
  }
  template <typename R>
  static R Coeff() {  // 0.044715, as a decimal constant of R
    return R(0.044715L);
  }
  template <typename R>
  static R Phi(R x) {
    return std::erfc(-x / std::sqrt(R(2))) / R(2);
  }
  template <typename R>
  static R TwoU(R x) {  // 2u = 2 sqrt(2/pi) (x + 0.044715 x^3)
    return R(2) * std::sqrt(R(2) / Pi<R>()) * (x + Coeff<R>() * x * x * x);
  }
};

// ----------------------------------------------------------------- Swish ---
template <>
struct Reference<Swish> {
  static std::vector<Variant<Swish>> Variants() {
    std::vector<Variant<Swish>> v;
    for (float b : {1.0f, 0.5f, 2.0f, 0.0f, -1.0f}) {
      Swish op;
      op.beta = b;
      v.push_back({op, "beta=" + AttrString(b), v.empty()});
    }
    return v;
  }
  template <typename R>
  static R Forward(const Swish& op, R x) {
    return x * Logistic(R(op.beta) * x);
  }
  // f' = s (1 + z (1 - s)) = s + z s (1 - s), z = beta x, s = sigma(z).
  template <typename R>
  static Value<R> Grad(const Swish& op, R x) {
    const R z = R(op.beta) * x;
    const R s = Logistic(z), sm = Logistic(-z);
    const R second = z * s * sm;
    return {s + second, s + std::fabs(second)};
  }
  static Limits LimitsOf(const Swish& op) {
    const double b = op.beta;
    if (b == 0) return {kInf, -kInf, 0.5, 0.5};
    if (b > 0) return {kInf, -0.0, 1.0, 0.0};
    return {0.0, -kInf, 0.0, 1.0};
  }
};

// ------------------------------------------------------------------ Mish ---
template <>
struct Reference<Mish> {
  static std::vector<Variant<Mish>> Variants() { return {{Mish(), "", true}}; }
  template <typename R>
  static R Softplus(R x) {
    return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  }
  template <typename R>
  static R Forward(const Mish&, R x) {
    return x * std::tanh(Softplus(x));
  }
  // f' = t + x (1 - t^2) sigma(x), t = tanh(softplus x).
  template <typename R>
  static Value<R> Grad(const Mish&, R x) {
    const R sp = Softplus(x);
    const R t = std::tanh(sp);
    const R c = std::cosh(sp);
    const R second = x / (c * c) * Logistic(x);
    return {t + second, std::fabs(t) + std::fabs(second)};
  }
  static Limits LimitsOf(const Mish&) { return {kInf, -0.0, 1.0, 0.0}; }
};

// ------------------------------------------------------------- HardSwish ---
template <>
struct Reference<HardSwish> {
  static std::vector<Variant<HardSwish>> Variants() {
    return {{HardSwish(), "", true}};
  }
  template <typename R>
  static R Forward(const HardSwish&, R x) {
    const R relu6 = std::fmin(std::fmax(x + R(3), R(0)), R(6));
    return x * relu6 / R(6);
  }
  // f' = 0 for x <= -3, (2x + 3) / 6 inside, 1 for x >= 3 (docs/ops.md).
  template <typename R>
  static Value<R> Grad(const HardSwish&, R x) {
    return Plain(x <= -3 ? R(0) : (x >= 3 ? R(1) : (R(2) * x + R(3)) / R(6)));
  }
  static Limits LimitsOf(const HardSwish&) { return {kInf, -0.0, 1.0, 0.0}; }
};

// ------------------------------------------------------------------ Celu ---
template <>
struct Reference<Celu> {
  static std::vector<Variant<Celu>> Variants() {
    std::vector<Variant<Celu>> v;
    for (float a : {1.0f, 0.5f, 3.0f}) {
      Celu op;
      op.alpha = a;
      v.push_back({op, "alpha=" + AttrString(a), v.empty()});
    }
    return v;
  }
  // f = x for x > 0, else alpha (e^(x / alpha) - 1); x / alpha exact in R.
  template <typename R>
  static R Forward(const Celu& op, R x) {
    return x > 0 ? x : R(op.alpha) * std::expm1(x / R(op.alpha));
  }
  // f' = 1 for x > 0, else e^(x / alpha) (continuous at 0).
  template <typename R>
  static Value<R> Grad(const Celu& op, R x) {
    return Plain(x > 0 ? R(1) : std::exp(x / R(op.alpha)));
  }
  static Limits LimitsOf(const Celu& op) {
    return {kInf, -static_cast<double>(op.alpha), 1.0, 0.0};
  }
};

// --------------------------------------------------------------- Sigmoid ---
template <>
struct Reference<Sigmoid> {
  static std::vector<Variant<Sigmoid>> Variants() {
    return {{Sigmoid{}, "", true}};
  }
  // f = 1 / (1 + e^-x); f' = f (1 - f), with 1 - f = f(-x) (no cancellation
  // for large x).
  template <typename R>
  static R Forward(const Sigmoid&, R x) {
    return Logistic(x);
  }
  template <typename R>
  static Value<R> Grad(const Sigmoid&, R x) {
    return Plain(Logistic(x) * Logistic(-x));
  }
  static Limits LimitsOf(const Sigmoid&) { return {1.0, 0.0, 0.0, 0.0}; }
};

// ----------------------------------------------------------------- Relu6 ---
template <>
struct Reference<Relu6> {
  static std::vector<Variant<Relu6>> Variants() {
    return {{Relu6{}, "", true}};
  }
  template <typename R>
  static R Forward(const Relu6&, R x) {
    return x < 0 ? R(0) : (x > 6 ? R(6) : x);
  }
  // f' = 1 strictly inside (0, 6), as TensorFlow's Relu6Grad.
  template <typename R>
  static Value<R> Grad(const Relu6&, R x) {
    return Plain(x > 0 && x < 6 ? R(1) : R(0));
  }
  static Limits LimitsOf(const Relu6&) { return {6.0, 0.0, 0.0, 0.0}; }
};

// ----------------------------------------------------------- HardSigmoid ---
template <>
struct Reference<HardSigmoid> {
  static std::vector<Variant<HardSigmoid>> Variants() {
    return {{HardSigmoid{}, "", true}};
  }
  template <typename R>
  static R Forward(const HardSigmoid&, R x) {
    const R r = x + 3;
    return (r < 0 ? R(0) : (r > 6 ? R(6) : r)) / 6;
  }
  // f' = 1/6 where 0 < x + 3 < 6 with the sum rounded to float, as Keras's
  // composite and the functor decide it (the sweep's inputs are floats; the
  // largest float below 3 has a sum that rounds to 6, so f' = 0 there).
  template <typename R>
  static Value<R> Grad(const HardSigmoid&, R x) {
    const float r = static_cast<float>(x) + 3.0f;
    return Plain(r > 0 && r < 6 ? R(1) / 6 : R(0));
  }
  static Limits LimitsOf(const HardSigmoid&) { return {1.0, 0.0, 0.0, 0.0}; }
};

// ------------------------------------------------------------------ Tanh ---
template <>
struct Reference<Tanh> {
  static std::vector<Variant<Tanh>> Variants() {
    return {{Tanh{}, "", true}};
  }
  template <typename R>
  static R Forward(const Tanh&, R x) {
    return std::tanh(x);
  }
  // f' = 1 / cosh^2 x (no cancellation; 0 once cosh overflows).
  template <typename R>
  static Value<R> Grad(const Tanh&, R x) {
    const R c = std::cosh(x);
    return Plain(R(1) / (c * c));
  }
  static Limits LimitsOf(const Tanh&) { return {1.0, -1.0, 0.0, 0.0}; }
};

// f and f' at any input, NaN and infinities included. NaN in gives NaN out.
template <typename Op, typename R>
R ForwardAt(const Op& op, R x) {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) {
    const Limits l = Reference<Op>::LimitsOf(op);
    return R(x > 0 ? l.forward_pos : l.forward_neg);
  }
  return Reference<Op>::Forward(op, x);
}

// At v = NaN the formula decides, as TensorFlow's grad kernels do: NaN for
// most, alpha for LeakyRelu (`v > 0 ? 1 : alpha`, as TF's LeakyReluGrad).
template <typename Op, typename R>
Value<R> GradAt(const Op& op, R v) {
  if (std::isinf(v)) {
    const Limits l = Reference<Op>::LimitsOf(op);
    return Plain(R(v > 0 ? l.grad_pos : l.grad_neg));
  }
  return Reference<Op>::Grad(op, v);
}

}  // namespace accuracy
}  // namespace tf_ops

#endif  // TF_OPS_TOOLS_ACCURACY_REFERENCE_H_
