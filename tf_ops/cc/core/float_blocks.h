// Converting blocks of 16-bit storage values to float and back, for CPU
// engines that compute a block (or a row) in float: BitBlocks<S> through
// narrow_float.h's branch-free bit arithmetic (vectorises on any CPU; half
// costs ~20 instructions per element), HalfF16cBlocks through the F16C
// instructions, 8 at a time (every AVX2 CPU has them). Same rounding (nearest
// even), NaN, infinities and subnormals. `in` and `out` never overlap.

#ifndef TF_OPS_CC_CORE_FLOAT_BLOCKS_H_
#define TF_OPS_CC_CORE_FLOAT_BLOCKS_H_

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "tf_ops/cc/core/narrow_float.h"

namespace tf_ops {

template <typename S>  // cpu_storage::Half or BFloat16
struct BitBlocks {
  static void ToFloat(const uint16_t* __restrict in, float* __restrict out,
                      int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = S::Load(in[i]);
  }
  static void FromFloat(const float* __restrict in, uint16_t* __restrict out,
                        int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = S::Store(in[i]);
  }
};

#if defined(__x86_64__)
struct HalfF16cBlocks {
  __attribute__((target("avx2,f16c"))) static void ToFloat(
      const uint16_t* in, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                    reinterpret_cast<const __m128i*>(in + i))));
    }
    for (; i < n; ++i) out[i] = narrow_float::HalfToFloat(in[i]);
  }
  __attribute__((target("avx2,f16c"))) static void FromFloat(
      const float* in, uint16_t* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm_storeu_si128(
          reinterpret_cast<__m128i*>(out + i),
          _mm256_cvtps_ph(_mm256_loadu_ps(in + i),
                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; ++i) out[i] = narrow_float::FloatToHalf(in[i]);
  }
};
#endif  // __x86_64__

}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_FLOAT_BLOCKS_H_
