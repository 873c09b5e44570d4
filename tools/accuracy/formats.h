// The storage formats the accuracy tool sweeps (float32, half, bfloat16): how
// their bits decode to exact values, independently of narrow_float.h and the
// engine's conversions, and what an ulp is in each.
//
// An ulp of a value y in a format is the distance between the two numbers of
// the format that bracket |y| (for y in the format: the gap above it, the
// usual ulp(y) = 2^(floor(log2 |y|) - p + 1)), with two refinements:
//   - float32 and bfloat16 results come out of float arithmetic that
//     TensorFlow runs in flush-to-zero mode, where there are no subnormals:
//     the format's numbers next to 0 are +-FLT_MIN, so below FLT_MIN one ulp
//     is FLT_MIN. Flushing a subnormal result to 0 costs at most 1 ulp.
//   - half keeps its subnormals (they are normal floats while computing), so
//     below 2^-14 one ulp is the subnormal spacing 2^-24.
// Above the largest finite number, the ulp of the largest finite number.
//
// The underflow tail. In flush-to-zero mode an intermediate below FLT_MIN is
// zero, and some results are such an intermediate times a factor up to ~2^7:
// x * sigma(x) = x e^x / (1 + e^x) for x in [-92.4, -87.3], x * Phi(x) for x
// in [-13.5, -13.1], and the terms of their derivatives. There the result is
// 0, or misses a term, while the exact one is a normal float up to ~2^-119.
// So float32 and bfloat16 results whose exact magnitude is below TailBound()
// = 2^-112 (2^14 times FLT_MIN, a margin of 2^7 over those factors) are
// reported apart, with their absolute error in units of FLT_MIN; above it
// every error is in ulps. half has no tail: its whole range is far above
// float's underflow.

#ifndef TF_OPS_TOOLS_ACCURACY_FORMATS_H_
#define TF_OPS_TOOLS_ACCURACY_FORMATS_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "tf_ops/cc/core/dtype.h"

namespace tf_ops {
namespace accuracy {

struct Format {
  const char* name;   // as tests/op_specs.py names the dtype
  Dtype dtype;        // the engine's
  int bits;           // 32 or 16
  int precision;      // significand bits, the implicit one included
  int min_exponent;   // exponent of the smallest normal
  int max_exponent;   // exponent of the largest finite number
  bool flush_gap;     // no subnormals in results: see above
  uint32_t one;       // the bits of 1.0 (the upstream gradient)

  // Derived once (the sweep calls Ulp() billions of times).
  double min_normal, max_finite, ulp_of_max, overflow, subnormal_ulp,
      tail_bound, ulp_per_power;

  Format(const char* n, Dtype d, int b, int p, int emin, int emax, bool gap,
         uint32_t one_bits)
      : name(n), dtype(d), bits(b), precision(p), min_exponent(emin),
        max_exponent(emax), flush_gap(gap), one(one_bits) {
    min_normal = std::ldexp(1.0, emin);
    max_finite = std::ldexp(2.0 - std::ldexp(1.0, 1 - p), emax);
    ulp_of_max = std::ldexp(1.0, emax - p + 1);
    // Round-to-nearest-even takes this and above to infinity.
    overflow = max_finite + ulp_of_max / 2;
    subnormal_ulp = gap ? min_normal : std::ldexp(1.0, emin - p + 1);
    tail_bound = gap ? std::ldexp(1.0, -112) : 0.0;
    ulp_per_power = std::ldexp(1.0, 1 - p);
  }

  // The exact value of `b` (low `bits` bits), subnormals as they are.
  double Decode(uint32_t b) const {
    if (bits == 32) {
      float f;
      std::memcpy(&f, &b, sizeof(f));
      return f;
    }
    if (dtype == Dtype::kBFloat16) {  // the high half of a float
      const uint32_t wide = b << 16;
      float f;
      std::memcpy(&f, &wide, sizeof(f));
      return f;
    }
    // IEEE binary16: 1 sign, 5 exponent (bias 15), 10 fraction bits.
    const double sign = (b & 0x8000u) ? -1.0 : 1.0;
    const int e = static_cast<int>((b >> 10) & 0x1fu);
    const int m = static_cast<int>(b & 0x3ffu);
    if (e == 31) {
      return m == 0 ? sign * std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::quiet_NaN();
    }
    if (e == 0) return sign * std::ldexp(m, -24);
    return sign * std::ldexp(1024 + m, e - 25);
  }

  // Subnormal values of a format whose inputs go through float arithmetic in
  // flush-to-zero (denormals-are-zero) mode read as zeros of their sign.
  bool SubnormalInputsAreZero() const { return flush_gap; }

  double MinNormal() const { return min_normal; }
  double MaxFinite() const { return max_finite; }
  // Exact results below this magnitude are in the underflow tail.
  double TailBound() const { return tail_bound; }

  // One ulp at magnitude `scale` (see the file comment): the power of two at
  // or below |scale|, times 2^(1 - precision).
  double Ulp(double scale) const {
    const double a = std::fabs(scale);
    if (!(a >= min_normal)) return subnormal_ulp;  // also 0
    if (a > max_finite) return ulp_of_max;
    uint64_t b;
    std::memcpy(&b, &a, sizeof(b));
    b &= 0x7ff0000000000000ull;
    double power;
    std::memcpy(&power, &b, sizeof(power));
    return power * ulp_per_power;
  }

  // 1 / Ulp(scale), exactly (a power of two), without a division.
  double InverseUlp(double scale) const {
    const double a = std::fabs(scale);
    if (!(a >= min_normal)) return 1 / subnormal_ulp;
    if (a > max_finite) return 1 / ulp_of_max;
    uint64_t b;
    std::memcpy(&b, &a, sizeof(b));
    const uint64_t inverse_power = (2046 - (b >> 52)) << 52;
    double inverse;
    std::memcpy(&inverse, &inverse_power, sizeof(inverse));
    return inverse / ulp_per_power;
  }

  // Whether round-to-nearest-even of `v` in this format is an infinity.
  bool RoundsToInfinity(double v) const { return std::fabs(v) >= overflow; }
};

inline const Format kFloat32("float32", Dtype::kFloat, 32, 24, -126, 127, true,
                             0x3f800000u);
inline const Format kHalf("half", Dtype::kHalf, 16, 11, -14, 15, false,
                          0x3c00u);
inline const Format kBFloat16("bfloat16", Dtype::kBFloat16, 16, 8, -126, 127,
                              true, 0x3f80u);

// The error of `got` against the exact `want`, in ulps of `scale` (>= |want|);
// infinite when a NaN, an infinity or an overflow is wrong:
//   want NaN: got must be NaN;  want +-inf, or beyond the format's range (it
//   rounds to an infinity): got must be that infinity, or is measured against
//   the largest finite number's ulp if finite;  got NaN or inf otherwise: inf.
inline double ErrorInUlps(const Format& f, double got, double want,
                          double scale) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (got == want) return 0;  // the common case of exact ops, zeros
  if (std::isnan(want)) return std::isnan(got) ? 0.0 : kInf;
  if (std::isnan(got)) return kInf;
  if (f.RoundsToInfinity(want)) {
    if (got == std::copysign(kInf, want)) return 0.0;
    if (std::isinf(got) || std::isinf(want)) return kInf;
    return std::fabs(got - want) / f.Ulp(f.MaxFinite());
  }
  if (std::isinf(got)) return kInf;
  // Below the smallest normal, the flush-to-zero gap (even if the terms of a
  // derivative are larger).
  const double inverse_ulp = f.flush_gap && std::fabs(want) < f.MinNormal()
                                 ? 1 / f.MinNormal()
                                 : f.InverseUlp(scale);
  return std::fabs(got - want) * inverse_ulp;
}

}  // namespace accuracy
}  // namespace tf_ops

#endif  // TF_OPS_TOOLS_ACCURACY_FORMATS_H_
