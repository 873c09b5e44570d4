// fast_math.h's functions on their own, for `accuracy_sweep --primitives`
// (every float input against the C library in double) and the
// microbenchmark (their cost per element). One struct per function:
//   kName, operator()(float)  the function under test;
//   Reference(double)         the exact value from the C library in double;
//   InDomain(double)          the inputs it is specified for (others skipped);
//   kBenchLo, kBenchHi        a typical input range, for the microbenchmark.
// TF_OPS_FOR_EACH_PRIMITIVE lists them.

#ifndef TF_OPS_TOOLS_ACCURACY_PRIMITIVES_H_
#define TF_OPS_TOOLS_ACCURACY_PRIMITIVES_H_

#include <cmath>

#include "tf_ops/cc/core/fast_math.h"

namespace tf_ops {
namespace accuracy {
namespace primitives {

inline bool Any(double) { return true; }

struct ExpF {
  static constexpr const char* kName = "ExpF";
  static constexpr float kBenchLo = -20, kBenchHi = 20;
  float operator()(float x) const { return fast_math::ExpF(x); }
  static double Reference(double x) { return std::exp(x); }
  static bool InDomain(double x) { return Any(x); }
};

struct Expm1F {
  static constexpr const char* kName = "Expm1F";
  static constexpr float kBenchLo = -5, kBenchHi = 5;
  float operator()(float x) const { return fast_math::Expm1F(x); }
  static double Reference(double x) { return std::expm1(x); }
  static bool InDomain(double x) { return Any(x); }
};

struct ErfcF {
  static constexpr const char* kName = "ErfcF";
  static constexpr float kBenchLo = -6, kBenchHi = 6;
  float operator()(float x) const { return fast_math::ErfcF(x); }
  static double Reference(double x) { return std::erfc(x); }
  static bool InDomain(double x) { return Any(x); }
};

struct NormalCdfF {
  static constexpr const char* kName = "NormalCdfF";
  static constexpr float kBenchLo = -8, kBenchHi = 8;
  float operator()(float x) const { return fast_math::NormalCdfF(x); }
  static double Reference(double x) {
    return std::erfc(-x / std::sqrt(2.0)) / 2;
  }
  static bool InDomain(double x) { return Any(x); }
};

// The density NormalCdfPdfF returns alongside.
struct NormalPdfF {
  static constexpr const char* kName = "NormalCdfPdfF.pdf";
  static constexpr float kBenchLo = -8, kBenchHi = 8;
  float operator()(float x) const { return fast_math::NormalCdfPdfF(x).pdf; }
  static double Reference(double x) {
    return std::exp(-x * x / 2) / std::sqrt(2 * 3.14159265358979323846);
  }
  static bool InDomain(double x) { return Any(x); }
};

// Specified for positive normal inputs (and +inf).
struct ReciprocalF {
  static constexpr const char* kName = "ReciprocalF";
  static constexpr float kBenchLo = 1, kBenchHi = 100;
  float operator()(float x) const { return fast_math::ReciprocalF(x); }
  static double Reference(double x) { return 1 / x; }
  static bool InDomain(double x) { return x >= 0x1p-126 || std::isnan(x); }
};

struct LogisticF {
  static constexpr const char* kName = "LogisticF";
  static constexpr float kBenchLo = -20, kBenchHi = 20;
  float operator()(float x) const { return fast_math::LogisticF(x).s; }
  static double Reference(double x) {
    return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x));
  }
  static bool InDomain(double x) { return Any(x); }
};

// 1 - sigma(x), which LogisticF returns alongside.
struct LogisticComplementF {
  static constexpr const char* kName = "LogisticF.complement";
  static constexpr float kBenchLo = -20, kBenchHi = 20;
  float operator()(float x) const { return fast_math::LogisticF(x).sm; }
  static double Reference(double x) { return LogisticF::Reference(-x); }
  static bool InDomain(double x) { return Any(x); }
};

struct TanhSoftplusF {
  static constexpr const char* kName = "TanhSoftplusF";
  static constexpr float kBenchLo = -10, kBenchHi = 10;
  float operator()(float x) const { return fast_math::TanhSoftplusF(x); }
  static double Reference(double x) {
    const double sp =
        x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
    return std::tanh(sp);
  }
  static bool InDomain(double x) { return Any(x); }
};

// sin and cos from SinCosF, specified for |x| < 2^25 pi/2 (where its
// reduction is exact; the rotary embedding's angles).
inline bool InReducedRange(double x) {
  return std::fabs(x) < 5.2e7 || std::isnan(x);
}

struct SinF {
  static constexpr const char* kName = "SinCosF.sin";
  static constexpr float kBenchLo = -1000, kBenchHi = 1000;
  float operator()(float x) const { return fast_math::SinCosF(x).sin; }
  static double Reference(double x) { return std::sin(x); }
  static bool InDomain(double x) { return InReducedRange(x); }
};

struct CosF {
  static constexpr const char* kName = "SinCosF.cos";
  static constexpr float kBenchLo = -1000, kBenchHi = 1000;
  float operator()(float x) const { return fast_math::SinCosF(x).cos; }
  static double Reference(double x) { return std::cos(x); }
  static bool InDomain(double x) { return InReducedRange(x); }
};

// Gelu's forward and derivative as activation_math.h computed them before
// (through ErfcF of a rounded -x / sqrt 2, and a separate exponential), and
// through NormalCdfPdfF, which math_primitives.h's Normal now uses for host
// floats: the measurement that justified the change. The derivatives are swept for x < -1.5 only: around its zero
// at -0.75 the error is absolute (the op sweep measures it in ulps of the
// terms), which would hide the tail this is about.
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

inline double GeluReference(double x) { return x * std::erfc(-x / std::sqrt(2.0)) / 2; }
inline double GeluDerivativeReference(double x) {
  return std::erfc(-x / std::sqrt(2.0)) / 2 +
         x * std::exp(-x * x / 2) / std::sqrt(2 * 3.14159265358979323846);
}

struct GeluNow {
  static constexpr const char* kName = "gelu(x) now";
  static constexpr float kBenchLo = -8, kBenchHi = 8;
  float operator()(float x) const {
    return x * (0.5f * fast_math::ErfcF(-kInvSqrt2 * x));
  }
  static double Reference(double x) { return GeluReference(x); }
  static bool InDomain(double x) { return std::isfinite(x); }
};

struct GeluWithNormalCdf {
  static constexpr const char* kName = "gelu(x) by NormalCdfF";
  static constexpr float kBenchLo = -8, kBenchHi = 8;
  float operator()(float x) const { return x * fast_math::NormalCdfF(x); }
  static double Reference(double x) { return GeluReference(x); }
  static bool InDomain(double x) { return std::isfinite(x); }
};

struct GeluDerivativeNow {
  static constexpr const char* kName = "gelu'(x) now";
  static constexpr float kBenchLo = -8, kBenchHi = 8;
  float operator()(float x) const {
    const float phi = kInvSqrt2Pi * fast_math::ExpF(-0.5f * x * x);
    return 0.5f * fast_math::ErfcF(-kInvSqrt2 * x) + x * phi;
  }
  static double Reference(double x) { return GeluDerivativeReference(x); }
  static bool InDomain(double x) { return x < -1.5; }
};

struct GeluDerivativeWithNormalCdfPdf {
  static constexpr const char* kName = "gelu'(x) by NormalCdfPdfF";
  static constexpr float kBenchLo = -8, kBenchHi = 8;
  float operator()(float x) const {
    const fast_math::NormalPair n = fast_math::NormalCdfPdfF(x);
    return n.cdf + x * n.pdf;
  }
  static double Reference(double x) { return GeluDerivativeReference(x); }
  static bool InDomain(double x) { return x < -1.5; }
};

}  // namespace primitives
}  // namespace accuracy
}  // namespace tf_ops

#define TF_OPS_FOR_EACH_PRIMITIVE(X) \
  X(ExpF)                            \
  X(Expm1F)                          \
  X(ErfcF)                           \
  X(NormalCdfF)                      \
  X(NormalPdfF)                      \
  X(ReciprocalF)                     \
  X(LogisticF)                       \
  X(LogisticComplementF)             \
  X(TanhSoftplusF)                   \
  X(SinF)                            \
  X(CosF)                            \
  X(GeluNow)                         \
  X(GeluWithNormalCdf)               \
  X(GeluDerivativeNow)               \
  X(GeluDerivativeWithNormalCdfPdf)

#endif  // TF_OPS_TOOLS_ACCURACY_PRIMITIVES_H_
