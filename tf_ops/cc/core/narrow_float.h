// Conversions between float and the 16-bit floats (IEEE binary16 "half" and
// bfloat16), on raw bits and without branches, so that a loop over them
// vectorises on any CPU (no F16C intrinsics, no Eigen). The CPU engine converts
// a block of 16-bit values to float, runs the float loop, and converts back:
// the math is computed in float and rounded once, as on the GPU.
//
// Rounding is to nearest, ties to even; overflow gives infinity; subnormals
// are kept; NaN stays NaN (quietened). These match Eigen::half / bfloat16.

#ifndef TF_OPS_CC_NARROW_FLOAT_H_
#define TF_OPS_CC_NARROW_FLOAT_H_

#include <cstdint>

#include "tf_ops/cc/core/float_bits.h"

namespace tf_ops {
namespace narrow_float {

// binary16 -> float. The exponent is rebiased by 112 (= 127 - 15); infinities
// and NaN get the rest of the float exponent range; zeros and subnormals are
// renormalised exactly by a float subtraction of 2^-14.
inline float HalfToFloat(uint16_t h) {
  const uint32_t magnitude = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exponent = magnitude & 0x0f800000u;
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t normal = magnitude + (112u << 23);
  const uint32_t special = normal + (112u << 23);  // inf or NaN
  const float subnormal = FloatFromBits(magnitude + (113u << 23)) -
                          FloatFromBits(113u << 23);  // also gives +0
  const uint32_t bits = exponent == 0x0f800000u ? special
                        : exponent == 0        ? FloatBits(subnormal)
                                               : normal;
  return FloatFromBits(bits | sign);
}

// float -> binary16, rounding to nearest even.
inline uint16_t FloatToHalf(float f) {
  const uint32_t bits = FloatBits(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t a = bits & 0x7fffffffu;
  // Normal results: rebias, then round the 13 dropped bits to nearest even.
  const uint32_t odd = (a >> 13) & 1u;
  const uint32_t normal = (a - (112u << 23) + 0xfffu + odd) >> 13;
  // Subnormal results: adding 0.5 (2^-1) shifts the value so that the float
  // adder rounds it at binary16's smallest subnormal, 2^-24.
  const uint32_t subnormal =
      FloatBits(FloatFromBits(a) + FloatFromBits(126u << 23)) - (126u << 23);
  const uint32_t overflow = a > 0x7f800000u ? 0x7e00u : 0x7c00u;  // NaN : inf
  const uint32_t h = a >= (143u << 23)  ? overflow  // |f| >= 65536 or inf/NaN
                     : a < (113u << 23) ? subnormal
                                        : normal;
  // A normal that rounds up past 65504 lands on 0x7c00 (inf), as it should.
  return static_cast<uint16_t>(h | sign);
}

// bfloat16 -> float: the high half of the float's bits.
inline float BFloat16ToFloat(uint16_t b) {
  return FloatFromBits(static_cast<uint32_t>(b) << 16);
}

// float -> bfloat16, rounding to nearest even; NaN is quietened, not rounded
// (rounding could carry a NaN's payload into infinity). The NaN test is a
// float compare and the select is on the 32-bit value, narrowed once at the
// end: written so, GCC vectorises it to ~10 instructions per 8 values (the
// select on 16-bit halves it was before cost a pack and two unpacks more).
inline uint16_t FloatToBFloat16(float f) {
  const uint32_t bits = FloatBits(f);
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  const uint32_t quiet_nan = bits | 0x00400000u;
  return static_cast<uint16_t>((f != f ? quiet_nan : rounded) >> 16);
}

}  // namespace narrow_float
}  // namespace tf_ops

#endif  // TF_OPS_CC_NARROW_FLOAT_H_
