// The largest element of a row, for CPU engines compiled once per
// instruction set (core/cpu_isa.h): the softmax's and the attention's row
// max. NaN is passed over (a loop that wants it must see it elsewhere: the
// softmax's sum does).
//
// Written with 32-byte GCC vectors because GCC keeps a lane-wise
// `x > m ? x : m` scalar unless the vector is one the target has: 32 bytes is
// a compare and blend (or vmaxps) with AVX2 and with AVX-512, where a 64-byte
// vector under AVX2 became 16 scalar compares and moves per 16 elements. Max
// is exact, so the order lanes are combined in does not change the result.

#ifndef TF_OPS_CC_CORE_ROW_MAX_H_
#define TF_OPS_CC_CORE_ROW_MAX_H_

#include <cstdint>
#include <cstring>

namespace tf_ops {

// max(start, row[0..n)) for C = float or double; NaN elements are passed
// over (start is not NaN).
template <typename C>
C RowMax(const C* row, int64_t n, C start) {
  typedef C V __attribute__((vector_size(32)));
  constexpr int kWidth = 32 / sizeof(C);
  constexpr int kVectors = 2;  // two independent chains a step
  V acc[kVectors];
  for (int k = 0; k < kVectors; ++k) acc[k] = V{} + start;
  int64_t c = 0;
  for (; c + kVectors * kWidth <= n; c += kVectors * kWidth) {
    for (int k = 0; k < kVectors; ++k) {
      V x;
      std::memcpy(&x, row + c + k * kWidth, sizeof(V));
      acc[k] = x > acc[k] ? x : acc[k];
    }
  }
  V v = acc[1] > acc[0] ? acc[1] : acc[0];
  // The lanes in a tree of shuffles (log2 kWidth steps), not kWidth - 1
  // dependent scalar steps.
  if constexpr (kWidth == 8) {
    V u = __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3);
    v = u > v ? u : v;
    u = __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5);
    v = u > v ? u : v;
    u = __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6);
    v = u > v ? u : v;
  } else {
    static_assert(kWidth == 4, "float or double");
    V u = __builtin_shufflevector(v, v, 2, 3, 0, 1);
    v = u > v ? u : v;
    u = __builtin_shufflevector(v, v, 1, 0, 3, 2);
    v = u > v ? u : v;
  }
  C m = v[0];
  for (; c < n; ++c) m = row[c] > m ? row[c] : m;
  return m;
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_ROW_MAX_H_
