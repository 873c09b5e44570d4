// CUDA-on-CPU: __half and __nv_bfloat16 (cuda_fp16.h, cuda_bf16.h) as plain
// C++ types holding the same 16 bits, with CUDA's host conversions: from
// float (round to nearest even) and back, implicitly as nvcc allows without
// __CUDA_NO_HALF_CONVERSIONS__. The rounding is the CPU engine's
// (narrow_float.h), so a value converts identically on both sides of the
// self-test. Arithmetic goes through float (the kernels compute in float and
// round once when they store).

#ifndef TF_OPS_TESTS_GPU_CUDA_ON_CPU_HALF_TYPES_H_
#define TF_OPS_TESTS_GPU_CUDA_ON_CPU_HALF_TYPES_H_

#include <cstdint>

#include "tf_ops/cc/core/narrow_float.h"

namespace cuda_on_cpu {

// One 16-bit float type; Traits says how its bits convert to float.
template <typename Traits>
struct Float16Storage {
  uint16_t __x;

  Float16Storage() = default;  // trivial: __shared__ arrays of it need no guard
  Float16Storage(float f) : __x(Traits::FromFloat(f)) {}
  Float16Storage(double d) : __x(Traits::FromFloat(static_cast<float>(d))) {}
  Float16Storage(int i) : __x(Traits::FromFloat(static_cast<float>(i))) {}
  Float16Storage(unsigned i) : __x(Traits::FromFloat(static_cast<float>(i))) {}
  Float16Storage(long long i)
      : __x(Traits::FromFloat(static_cast<float>(i))) {}
  Float16Storage(long i) : __x(Traits::FromFloat(static_cast<float>(i))) {}
  operator float() const { return Traits::ToFloat(__x); }

  static Float16Storage FromBits(uint16_t bits) {
    Float16Storage h;
    h.__x = bits;
    return h;
  }
};

struct HalfTraits {
  static uint16_t FromFloat(float f) {
    return tf_ops::narrow_float::FloatToHalf(f);
  }
  static float ToFloat(uint16_t h) {
    return tf_ops::narrow_float::HalfToFloat(h);
  }
};
struct BFloat16Traits {
  static uint16_t FromFloat(float f) {
    return tf_ops::narrow_float::FloatToBFloat16(f);
  }
  static float ToFloat(uint16_t b) {
    return tf_ops::narrow_float::BFloat16ToFloat(b);
  }
};

}  // namespace cuda_on_cpu

using __half = cuda_on_cpu::Float16Storage<cuda_on_cpu::HalfTraits>;
using __nv_bfloat16 = cuda_on_cpu::Float16Storage<cuda_on_cpu::BFloat16Traits>;
using half = __half;
using nv_bfloat16 = __nv_bfloat16;
static_assert(sizeof(__half) == 2 && sizeof(__nv_bfloat16) == 2,
              "16-bit floats must have the device layout");

struct alignas(4) __half2 {
  __half x, y;
};
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return static_cast<float>(h); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return static_cast<float>(b); }
inline __half __ushort_as_half(unsigned short bits) {
  return __half::FromBits(bits);
}
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) {
  return __nv_bfloat16::FromBits(bits);
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
inline __half2 __floats2half2_rn(float a, float b) { return {a, b}; }
inline __half2 __float2half2_rn(float a) { return {a, a}; }
inline float __low2float(__half2 h) { return h.x; }
inline float __high2float(__half2 h) { return h.y; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {a, b}; }
inline float __low2float(__nv_bfloat162 h) { return h.x; }
inline float __high2float(__nv_bfloat162 h) { return h.y; }

#endif  // TF_OPS_TESTS_GPU_CUDA_ON_CPU_HALF_TYPES_H_
