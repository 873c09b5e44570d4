// Float exp, expm1, erfc and friends for the CPU engine, written so that the
// compiler can vectorise a loop calling them: no branches (selects only), no
// calls, no errno, no table look-ups, no float-to-integer conversions (their
// result is undefined for NaN and out-of-range values). The C library's
// expf/erfcf are scalar calls that stop the engine's loops from vectorising
// (10x slower than TF's Eigen code).
//
// Accuracy, measured by the accuracy tool against the C library in double
// (`accuracy_sweep --primitives`, tools/accuracy/: 2^22 inputs spread over
// all float bit patterns; --full for all; docs/ops.md has the activations'
// table), largest error on the AVX2 (FMA) / baseline AVX loops:
//   ExpF 0.92 / 1.18 ulp, Expm1F 1.6 / 1.7, ErfcF 5.7 / 6.1 (the former
//   version lost up to 66 / 112 in the tail), NormalCdfF 5.6, its density
//   1.9 / 2.0, LogisticF ~2.5, TanhSoftplusF 3.6 / 3.8, ReciprocalF 1.5 / 1.9.
// Special values follow the C library: exp(-inf) = 0, exp(+inf) = inf, NaN
// in gives NaN out, overflow gives inf. One deliberate difference: results
// below the smallest normal float (x < -87.34) are 0, not subnormal, as
// CUDA's fast exp and TF's flush-to-zero mode give. Subnormal arithmetic
// takes a microcode assist of ~100 cycles per vector on x86 when the thread
// does not flush them: in GELU's gradient, whose exp(-x^2/2) underflows for
// |x| > 13, it tripled the time of the whole loop.
//
// How they are made cheap: e^x = 2^n e^r with n = round(x / ln 2) found by
// the 1.5 * 2^23 rounding trick, which also leaves n in the low bits of the
// float, so 2^n is applied by an integer add to the exponent field of e^r (no
// conversions, no second multiply); e^r - 1 is one minimax polynomial shared
// by ExpF and Expm1F; erfc(z) is t P(t) e^(-z^2) with t = 1 / (1 + z / 2),
// one division and no second exponential. Cycles per element in an AVX2
// loop on AMD Zen 3 (engine_microbench), before -> now: ExpF 2.3 -> 1.0,
// Expm1F 3.0 -> 1.3, ErfcF 5.6 -> 3.3. With FMA (the AVX2 and AVX-512 loops)
// `a * b + c` is contracted to one rounding (-ffp-contract=fast); the
// baseline AVX loop rounds twice and is a little less accurate (the tool
// measures both).
//
// Plain C++17; activation_math.h uses these on the host only (CUDA has fast
// device versions of the C functions).

#ifndef TF_OPS_CC_FAST_MATH_H_
#define TF_OPS_CC_FAST_MATH_H_

#include <cstdint>

#include "tf_ops/cc/core/float_bits.h"

namespace tf_ops {
namespace fast_math {
namespace internal {

constexpr float kInf = __builtin_huge_valf();
// e^x is below FLT_MIN for x < kMinLog (the float just above ln FLT_MIN) and
// above FLT_MAX for x > kMaxLog (the float just below ln FLT_MAX).
constexpr float kMinLog = -87.33654022216797f;
constexpr float kMaxLog = 88.72283172607422f;

// x = n ln2 + r, |r| <= ln2 / 2 (Cody-Waite: ln2 in two parts, the first
// with few enough bits that n * it is exact). `shifted` is x / ln2 + 1.5 *
// 2^23, whose float bits end in n (two's complement), for |n| < 2^22.
struct Reduced {
  float shifted;
  float r;
};
inline Reduced ReduceLn2(float x) {
  const float kShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to int
  const float shifted = x * 1.44269504088896341f + kShift;
  const float n = shifted - kShift;
  float r = x - n * 0.693145751953125f;  // ln2 high part: n * it is exact
  r = r - n * 1.428606765330187045e-06f;  // ln2 low part
  return {shifted, r};
}

// The bits of 2^n, n = the integer in `shifted`'s low bits, already moved
// into the exponent field (shifting left by 23 drops 1.5 * 2^23's bits).
inline uint32_t ExponentOf(float shifted) { return FloatBits(shifted) << 23; }

// (e^r - 1 - r) / r^2 on |r| <= ln2 / 2, minimax: e^r - 1 = r + r^2 P(r) has
// a relative error below 2.6e-8 (0.43 * 2^-24) with these float coefficients.
inline float ExpPoly(float r) {
  return 5.000000000e-01f +
         r * (1.666657627e-01f +
              r * (4.166637361e-02f +
                   r * (8.363175206e-03f + r * 1.394111314e-03f)));
}

// e^(x + lo) for a small correction lo (kCorrection), else e^x.
template <bool kCorrection>
inline float Exp(float x, float lo) {
  const Reduced red = ReduceLn2(x);
  float r = red.r;
  if constexpr (kCorrection) r = r + lo;
  const float er = 1.0f + r * (1.0f + r * ExpPoly(r));  // e^r in [0.7, 1.42]
  // 2^n e^r by adding n to e^r's exponent: a normal float for x in [kMinLog,
  // kMaxLog] (there n is in [-126, 128] and e^r >= 1 when n = -126, < 1 when
  // n = 128); outside, the selects below replace whatever it gives.
  const float scaled = FloatFromBits(FloatBits(er) + ExponentOf(red.shifted));
  // Past FLT_MAX: x + inf = inf; NaN: x + inf = NaN; below FLT_MIN: 0. (Two
  // flat selects: nested ones led GCC to duplicate the callers' work into
  // each arm before vectorising.)
  const float high = x <= kMaxLog ? scaled : x + kInf;
  return x < kMinLog ? 0.0f : high;
}

}  // namespace internal

// e^x.
inline float ExpF(float x) { return internal::Exp<false>(x, 0.0f); }

// e^x - 1, accurate near 0: 2^n (e^r - 1) + (2^n - 1), one formula for all x
// (for n = 0 it is the polynomial alone, with no cancellation).
inline float Expm1F(float x) {
  using namespace internal;
  // Below -87, e^x - 1 is -1 to float precision; clamping keeps n >= -126.
  const float xc = x < -87.0f ? -87.0f : x;  // NaN stays NaN
  const Reduced red = ReduceLn2(xc);
  const float r = red.r;
  const float q = r + r * (r * ExpPoly(r));  // e^r - 1
  // Half of 2^n (2^128 itself is not a float): 2^(n-1), or 0 for n = -126.
  const float half_scale =
      FloatFromBits(ExponentOf(red.shifted) + (126u << 23));
  const float result = 2.0f * (half_scale * q + (half_scale - 0.5f));
  const float checked = xc <= kMaxLog ? result : x + kInf;  // inf; NaN
  // e^x - 1 = x below 2^-25: keeps -0 (the sum above gives +0) and the
  // smallest x, whose q / 2 would underflow.
  const float ax = x < 0.0f ? -x : x;
  return ax < 0x1p-25f ? x : checked;
}

// 1 / a for a positive normal a, without a division: an estimate from the
// bits (0x7ef311c3 - bits(a), within 12.5%), refined by two cubically
// convergent steps y <- y (1 + e + e^2), e = 1 - a y, to a relative error
// below 2^-24 before the last roundings (y (1 + q), not y + y q: in
// flush-to-zero mode y q underflows when y is below ~2^-100). For a > 8e37
// (1/a < 1.25e-38, about FLT_MIN; infinity included) the result is 0, as
// flush-to-zero mode makes it; NaN gives NaN.
// Measured on AMD Zen 3 (tools/accuracy/engine_microbench), 1 / a is faster
// (its divider runs beside the FMA units, 0.36 against 0.64 cycles per
// element), so LogisticF and TanhSoftplusF divide; this is for CPUs whose
// vector division is slow (Intel's AVX-512 VDIVPS: ~16 cycles per vector).
inline float ReciprocalF(float a) {
  const float y0 = FloatFromBits(0x7ef311c3u - FloatBits(a));
  const float e0 = 1.0f - a * y0;
  const float y1 = y0 * (1.0f + (e0 + e0 * e0));
  const float e1 = 1.0f - a * y1;
  const float y2 = y1 * (1.0f + (e1 + e1 * e1));
  return a > 8e37f ? 0.0f : y2;
}

// The logistic function s = 1 / (1 + e^-z) and its complement 1 - s, both
// accurate in their tails (sm = e^-z s where s > 1/2), from one exponential.
struct LogisticPair {
  float s, sm;  // sigma(z), 1 - sigma(z)
};
inline LogisticPair LogisticF(float z) {
  const float e = ExpF(-z);
  const float s = 1.0f / (1.0f + e);
  return {s, s > 0.5f ? e * s : 1.0f - s};
}

// tanh(softplus(x)) = tanh(log(1 + e^x)) = n (n + 2) / (n (n + 2) + 2), n =
// e^x: one exponential; for x > 20 it is 1 to float precision (1 - t < 2
// e^-2x), where n (n + 2) would overflow.
inline float TanhSoftplusF(float x) {
  const float n = ExpF(x < 20.0f ? x : 20.0f);
  const float num = n * (n + 2.0f);
  const float t = num / (num + 2.0f);
  return x < 20.0f ? t : (x == x ? 1.0f : x);
}

namespace internal {

// erfc(z) e^(z^2) / t for t = 1 / (1 + z / 2) and z in [0, 10] (t in [1/6,
// 1]; erfc(10) = 2e-45 is 0 in float): a minimax polynomial in t (relative
// error 2^-25.6; 1.5 * 2^-24 evaluated in float with FMA). So erfc(z) =
// t P(t) e^(-z^2), the Gaussian factor computed on its own: Press et al.'s
// erfcc, e^(-z^2 + Q(t)) t, puts both in one exponential, but its Q sums
// terms up to 1.5 to near 0 at small z (4-8 ulps lost there), and the
// Gaussian alone can be shared with the density (NormalCdfPdfF).
inline float ErfcxOverT(float t) {
  return 2.820644975e-01f +
         t * (2.828570306e-01f +
              t * (2.386449873e-01f +
                   t * (2.255410403e-01f +
                        t * (-9.831493348e-02f +
                             t * (4.212685823e-01f +
                                  t * (-6.700148582e-01f +
                                       t * (4.289220870e-01f +
                                            t * (-1.232517511e-01f +
                                                 t * 1.228329167e-02f))))))));
}

// e^(-k a^2) for k = 1 or 1/2 and |a| up to ~14, with a^2 taken exactly:
// a = hi + lo, hi its top 12 significant bits, so that hi^2 and 2 hi lo are
// exact in float with or without FMA; e^(-k hi^2 - k (2 hi lo + lo^2)) is
// e^x with a small correction. The exponent is up to ~100, where rounding
// a^2 would cost up to ~50 ulps of the result.
inline float ExpMinusSquare(float a, float k) {
  const float a_hi = FloatFromBits(FloatBits(a) & 0xfffff000u);
  const float a_lo = a - a_hi;
  const float sq_hi = (a_hi * a_hi) * k;                         // exact
  const float sq_lo = (a_lo * (a_hi + a_hi) + a_lo * a_lo) * k;  // small
  return Exp<true>(-sq_hi, -sq_lo);
}

}  // namespace internal

// erfc(z); erfc(-z) = 2 - erfc(z).
inline float ErfcF(float z) {
  const float az0 = z < 0.0f ? -z : z;
  const float az = az0 > 10.0f ? 10.0f : az0;  // NaN stays NaN
  const float t = 1.0f / (1.0f + 0.5f * az);
  const float tail =
      t * internal::ErfcxOverT(t) * internal::ExpMinusSquare(az, 1.0f);
  return z < 0.0f ? 2.0f - tail : tail;
}

// The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2 and density phi(x)
// = e^(-x^2 / 2) / sqrt(2 pi), sharing one exponential (Gelu's gradient needs
// both). The Gaussian is taken from x exactly, not from a rounded x / sqrt 2,
// whose error the far left tail magnifies ~x^2 times (the 200+ ulps of Gelu's
// forward op for x < -10 with ErfcF).
struct NormalPair {
  float cdf, pdf;
};
inline NormalPair NormalCdfPdfF(float x) {
  const float ax0 = x < 0.0f ? -x : x;
  const float ax = ax0 > 14.0f ? 14.0f : ax0;  // Phi(-14) = 8e-45: 0
  const float t = 1.0f / (1.0f + 0.35355339059327376f * ax);  // z / 2
  const float gauss = internal::ExpMinusSquare(ax, 0.5f);      // e^(-x^2/2)
  const float tail = 0.5f * t * internal::ErfcxOverT(t) * gauss;
  // (A NaN whose payload is in its low 12 bits loses it to the split in
  // ExpMinusSquare and gives gauss = 0; the cdf has t's NaN.)
  const float pdf = x == x ? 0.3989422804014327f * gauss : x;
  return {x < 0.0f ? tail : 1.0f - tail, pdf};
}

// Phi(x) alone.
inline float NormalCdfF(float x) { return NormalCdfPdfF(x).cdf; }


// sin(x) and cos(x) of a float angle, from one range reduction (the rotary
// embedding's rotations: tf_ops/cc/rotary/). The reduction x = k pi/2 + r,
// |r| <= pi/4, runs in double: k = round(x 2/pi) by the 1.5 * 2^52 rounding
// trick (which leaves k mod 4, the quadrant, in the low bits of the double),
// and r = x - k P1 - k P2 - k P3 with pi/2 in three parts, the first two of
// 28 significant bits so that k P1 and k P2 are exact for |k| < 2^25. r is
// then exact to ~1e-16 for |x| < 2^25 pi/2 (5.3e7: positions times
// frequencies far beyond float's exact integers, 2^24), and sin r, cos r are
// Taylor polynomials in double (terms to r^11 / r^12: error below 1e-11 at
// pi/4), rounded once to float: within a hair of correctly rounded. Beyond
// 5.3e7 the error grows with |x|; from 2^50 (where k is no longer an exact
// integer) the result is NaN, as it is for +-inf and NaN. sin(-0) = -0.
// Branch-free, vectorisable (float <-> double conversions, no table).
struct SinCosPairF {
  float sin, cos;
};
inline SinCosPairF SinCosF(float x) {
  const double xd = x;
  const double kShift = 6755399441055744.0;  // 1.5 * 2^52
  const double shifted = xd * 0.6366197723675814 + kShift;  // x / (pi/2)
  const double k = shifted - kShift;
  double r = xd - k * 0x1.921fb54p+0;  // pi/2, high 28 bits: exact product
  r = r - k * 0x1.10b4612p-30;         // next 28 bits: exact product
  r = r - k * -0x1.676733ae8fe48p-60;  // the rest
  const double z = r * r;
  const double s =
      r + r * z * (-1.0 / 6 + z * (1.0 / 120 + z * (-1.0 / 5040 +
                   z * (1.0 / 362880 + z * (-1.0 / 39916800)))));
  const double c =
      1.0 + z * (-0.5 + z * (1.0 / 24 + z * (-1.0 / 720 + z * (1.0 / 40320 +
                 z * (-1.0 / 3628800 + z * (1.0 / 479001600))))));
  // sin(r + k pi/2), cos(r + k pi/2) by the quadrant q = k mod 4: swap for
  // odd q; sin negated for q = 2, 3, cos for q = 1, 2.
  const uint64_t q = DoubleBits(shifted);
  const bool odd = (q & 1) != 0;
  const double sin_r = odd ? c : s;
  const double cos_r = odd ? s : c;
  const double ax = xd < 0.0 ? -xd : xd;
  const bool in_range = ax < 0x1p50;  // NaN: false
  // (x = -0 reduces to r = +0: sin keeps x's zero.)
  const double sin_x = ax == 0.0 ? xd : (q & 2) != 0 ? -sin_r : sin_r;
  const double cos_x = ((q + 1) & 2) != 0 ? -cos_r : cos_r;
  const double nan = __builtin_nan("");
  return {static_cast<float>(in_range ? sin_x : nan),
          static_cast<float>(in_range ? cos_x : nan)};
}

}  // namespace fast_math
}  // namespace tf_ops

#endif  // TF_OPS_CC_FAST_MATH_H_
