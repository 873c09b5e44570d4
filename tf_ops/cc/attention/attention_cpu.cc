// The attention family's CPU loops (attention_cpu.h), compiled once per
// instruction set (core/cpu_isa.h), each variant a `flatten` function so the
// block products below are vectorised for its target.
//
// Forward, FlashAttention-2's tiles: a work unit is one query block of one
// head; it walks the key blocks its row range can see (causal and window
// blocks outside it are skipped), keeps each row's running max and sum
// (the online softmax) and the output in float, and writes the output and
// the log-sum-exp once. Backward: a work unit is one query head; it walks the
// key blocks, recomputes the weights of each (query block, key block) tile
// from the log-sum-exp, and accumulates dq for the whole head and dk, dv for
// the key block. Heads of a group write their dk, dv to their own partial
// buffers, summed over the group in head order afterwards: no atomics, and a
// result that does not depend on the threads.
//
// Each thread packs the key/value head its work reads into float panels
// (K^T, K, V, V^T as each product needs them), again only when the head
// changes, so the products read contiguous float rows: every product is
// C += A B with B's rows contiguous, one register-blocked kernel (Gemm below)
// for all of them. The panels are one head's per thread, not every head's:
// memory beyond the inputs and outputs does not grow with batch or heads.
//
// bfloat16 inputs on a CPU with AVX512-BF16 (core/cpu_isa.h's
// ActiveAvx512Bf16) run the same tiles with bfloat16 products accumulated in
// float (Bf16Engine below); the other dtypes, and bfloat16 without it, widen
// to float (double for double) and use Gemm.

#include "tf_ops/cc/attention/attention_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string_view>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "tf_ops/cc/core/cpu_isa.h"
#include "tf_ops/cc/core/cpu_storage.h"
#include "tf_ops/cc/core/fast_math.h"
#include "tf_ops/cc/core/row_max.h"

namespace tf_ops {
namespace attention {
namespace {

// Tiles: a query block's float rows (64 x head_dim) and a key block's panel
// (head_dim x 128) stay in L1/L2 while a tile is computed.
constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 128;

template <typename C>
constexpr C NegInf() {
  return -std::numeric_limits<C>::infinity();
}

inline float ExpC(float x) { return fast_math::ExpF(x); }
inline double ExpC(double x) { return std::exp(x); }

// C[m, n] (+)= sum_k A[m, k] B[k, n] for m < M, n < N, k < K; A[m, k] at
// A[m * lda + k * ak] (ak = 1: A row-major; lda = 1: A stored transposed,
// so the backward's P^T and dS^T need no copy), rows of B and C `ldb`, `ldc`
// apart. Register tiles of kRows rows by two vectors of B's row, each A
// element broadcast.
template <typename C, int kBytes>
struct Gemm {
  typedef C V __attribute__((vector_size(kBytes)));
  static constexpr int kLanes = kBytes / sizeof(C);
  static constexpr int kCols = 2 * kLanes;
  static constexpr int kRows = 6;

  template <int R, bool kUnit>
  static void Tile(int64_t K, const C* A, int64_t lda, int64_t ak,
                   const C* B, int64_t ldb, C* Cm, int64_t ldc,
                   bool accumulate) {
    if constexpr (kUnit) ak = 1;
    V acc[R][2];
    for (int r = 0; r < R; ++r) {
      if (accumulate) {
        std::memcpy(&acc[r][0], Cm + r * ldc, sizeof(V));
        std::memcpy(&acc[r][1], Cm + r * ldc + kLanes, sizeof(V));
      } else {
        acc[r][0] = V{} ;
        acc[r][1] = V{};
      }
    }
    for (int64_t k = 0; k < K; ++k) {
      V b0, b1;
      std::memcpy(&b0, B + k * ldb, sizeof(V));
      std::memcpy(&b1, B + k * ldb + kLanes, sizeof(V));
      for (int r = 0; r < R; ++r) {
        const C a = A[r * lda + k * ak];
        acc[r][0] += a * b0;
        acc[r][1] += a * b1;
      }
    }
    for (int r = 0; r < R; ++r) {
      std::memcpy(Cm + r * ldc, &acc[r][0], sizeof(V));
      std::memcpy(Cm + r * ldc + kLanes, &acc[r][1], sizeof(V));
    }
  }

  template <bool kUnit>
  static void TileOfRows(int64_t rows, int64_t K, const C* A, int64_t lda,
                         int64_t ak, const C* B, int64_t ldb, C* Cm,
                         int64_t ldc, bool accumulate) {
    static_assert(kRows == 6, "the cases below are 1 to kRows rows");
    switch (rows) {
      case 6: Tile<6, kUnit>(K, A, lda, ak, B, ldb, Cm, ldc, accumulate); break;
      case 5: Tile<5, kUnit>(K, A, lda, ak, B, ldb, Cm, ldc, accumulate); break;
      case 4: Tile<4, kUnit>(K, A, lda, ak, B, ldb, Cm, ldc, accumulate); break;
      case 3: Tile<3, kUnit>(K, A, lda, ak, B, ldb, Cm, ldc, accumulate); break;
      case 2: Tile<2, kUnit>(K, A, lda, ak, B, ldb, Cm, ldc, accumulate); break;
      case 1: Tile<1, kUnit>(K, A, lda, ak, B, ldb, Cm, ldc, accumulate); break;
      default: break;
    }
  }

  // The last `cols` (< kCols) columns of C: B's copied into a block
  // zero-padded to kCols (kChunk of its rows at a time) and C's into a tile,
  // so they run the register tile too, where a loop over the columns left
  // was scalar code (65 keys: one column left, over half of the product's
  // time). k is still added in order: the columns are what Tile would give.
  template <bool kUnit>
  static void Tail(int64_t M, int64_t cols, int64_t K, const C* A,
                   int64_t lda, int64_t ak, const C* B, int64_t ldb, C* Cm,
                   int64_t ldc, bool accumulate) {
    constexpr int64_t kChunk = 128;
    alignas(64) C b[kChunk * kCols];
    alignas(64) C c[kRows * kCols];
    int64_t k0 = 0;
    do {
      const int64_t kn = std::min(kChunk, K - k0);
      for (int64_t k = 0; k < kn; ++k) {
        for (int64_t j = 0; j < kCols; ++j) {
          b[k * kCols + j] = j < cols ? B[(k0 + k) * ldb + j] : C(0);
        }
      }
      const bool add = accumulate || k0 > 0;
      for (int64_t m = 0; m < M; m += kRows) {
        const int64_t rows = std::min<int64_t>(kRows, M - m);
        C* out = Cm + m * ldc;
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t j = 0; j < kCols; ++j) {
            c[i * kCols + j] = add && j < cols ? out[i * ldc + j] : C(0);
          }
        }
        TileOfRows<kUnit>(rows, kn, A + m * lda + k0 * ak, lda, ak, b, kCols,
                          c, kCols, add);
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t j = 0; j < cols; ++j) out[i * ldc + j] = c[i * kCols + j];
        }
      }
      k0 += kChunk;
    } while (k0 < K);
  }

  // Register tiles of up to kRows rows over C's full kCols-wide column
  // blocks, then the columns left (Tail).
  template <bool kUnit>
  static void RunRows(int64_t M, int64_t N, int64_t K, const C* A,
                      int64_t lda, int64_t ak, const C* B, int64_t ldb,
                      C* Cm, int64_t ldc, bool accumulate) {
    const int64_t full = N - N % kCols;
    for (int64_t m = 0; m < M; m += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, M - m);
      for (int64_t n = 0; n < full; n += kCols) {
        TileOfRows<kUnit>(rows, K, A + m * lda, lda, ak, B + n, ldb,
                          Cm + m * ldc + n, ldc, accumulate);
      }
    }
    if (full < N && M > 0) {
      Tail<kUnit>(M, N - full, K, A, lda, ak, B + full, ldb, Cm + full, ldc,
                  accumulate);
    }
  }

  static void Run(int64_t M, int64_t N, int64_t K, const C* A, int64_t lda,
                  int64_t ak, const C* B, int64_t ldb, C* Cm, int64_t ldc,
                  bool accumulate) {
    if (ak == 1) {
      RunRows<true>(M, N, K, A, lda, 1, B, ldb, Cm, ldc, accumulate);
    } else {
      RunRows<false>(M, N, K, A, lda, ak, B, ldb, Cm, ldc, accumulate);
    }
  }
};

// Row reductions in 16 lanes (element c in lane c % 16) combined in a fixed
// order: a single running max or sum is a chain of dependent scalar ops that
// GCC may not reorder (no -ffast-math), as slow as the tile's products. The
// lanes end in a tree (8 + 8, 4 + 4, ...): 4 dependent steps, not 15 scalar
// ones read back from the stack, once per row of every tile.
constexpr int kLanes = 16;

// The lanes as one vector, and their tree. Vectors pass by reference: this
// code is compiled for every instruction set, and a 64-byte vector passed by
// value has a different ABI with AVX-512 than without.
template <typename C>
struct Lanes {
  typedef C V __attribute__((vector_size(kLanes * sizeof(C))));

  // out[l] = v[l ^ w] (w = 8, 4, 2, 1).
  static void Swap(const V& v, int w, V* out) {
    switch (w) {
      case 8:
        *out = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0,
                                       1, 2, 3, 4, 5, 6, 7);
        break;
      case 4:
        *out = __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13,
                                       14, 15, 8, 9, 10, 11);
        break;
      case 2:
        *out = __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11,
                                       8, 9, 14, 15, 12, 13);
        break;
      default:
        *out = __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11,
                                       10, 13, 12, 15, 14);
    }
  }
  static C Sum(const V& lanes) {
    V v = lanes, u;
    for (int w = 8; w > 0; w /= 2) {
      Swap(v, w, &u);
      v += u;
    }
    return v[0];
  }
  static C Sum(const C* lanes) {
    V v;
    std::memcpy(&v, lanes, sizeof(V));
    return Sum(v);
  }
  static C Max(const V& lanes) {  // NaN-free lanes (the loops pass NaN over)
    V v = lanes, u;
    for (int w = 8; w > 0; w /= 2) {
      Swap(v, w, &u);
      v = u > v ? u : v;
    }
    return v[0];
  }
};

// row[c] = e^(row[c] - mx) for c < n; returns their sum.
template <typename C>
C ExpAndSum(C* row, int64_t n, C mx) {
  C lanes[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      row[c + l] = ExpC(row[c + l] - mx);
      lanes[l] += row[c + l];
    }
  }
  for (int l = 0; c + l < n; ++l) {
    row[c + l] = ExpC(row[c + l] - mx);
    lanes[l] += row[c + l];
  }
  return Lanes<C>::Sum(lanes);
}

// sum_c a[c] * load(b[c]) for c < n, in lanes as ExpAndSum.
template <typename C, typename B, typename Load>
C RowDot(const C* a, const B* b, int64_t n, const Load& load) {
  C lanes[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += a[c + l] * load(b[c + l]);
  }
  for (int l = 0; c + l < n; ++l) lanes[l] += a[c + l] * load(b[c + l]);
  return Lanes<C>::Sum(lanes);
}

template <typename C>
std::unique_ptr<C[]> Buffer(int64_t n) {
  return std::unique_ptr<C[]>(new C[std::max<int64_t>(n, 1)]);
}

// The row stride of a transposed panel ([D, S]: K^T, V^T) of n-element rows:
// whole cache lines, an odd number of them. The products read a tile's B
// rows down such a panel; at a stride of a multiple of 2 KiB (S a multiple of
// 512 floats) they all fall in one or two of L1's 64 sets and evict each
// other, and so did the packing's stores.
template <typename E>
int64_t PanelStride(int64_t n) {
  constexpr int64_t kLine = 64 / sizeof(E);
  const int64_t lines = (n + kLine - 1) / kLine;
  return (lines | 1) * kLine;
}

// out[c * ldo + r] = load(in(r)[c]) for r < rows, c < cols, in 16 x 16
// blocks: each block's stores fill 16 whole cache lines, where a row at a
// time stores one element to each of `cols` lines.
template <typename Out, typename RowFn, typename Load>
void TransposeRows(const RowFn& in, int64_t rows, int64_t cols, Out* out,
                   int64_t ldo, const Load& load) {
  constexpr int64_t kBlock = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    const int64_t r1 = std::min(rows, r0 + kBlock);
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      const int64_t c1 = std::min(cols, c0 + kBlock);
      for (int64_t r = r0; r < r1; ++r) {
        const auto* row = in(r);
        for (int64_t c = c0; c < c1; ++c) out[c * ldo + r] = load(row[c]);
      }
    }
  }
}

// Vectors of 4-byte elements transposed in registers, where moving them one
// by one is a load and a store each. The panels (and the bfloat16 engine's
// per-head Q^T and dO^T and dK, dV rows) are such transposes, O(T D) per head:
// at short lengths beside O(T^2 D) products they would not be negligible
// element by element. Two widths, each a vector its users' instruction set
// has: GCC lowers a shuffle of a vector wider than the target's to scalar
// moves through the stack (what the float engine's 16 x 16 blocks were under
// AVX2: ~5% of the forward's own loops at T = 512, more at short T).
//
// 8 x 8 in 32-byte vectors (any x86-64 the engine dispatches to): 24
// two-vector shuffles per 64 elements; v[c] ends as column c.
typedef int32_t Dw8 __attribute__((vector_size(32)));

inline void Transpose8(Dw8 v[8]) {
  Dw8 a[8];  // a[2k]: rows 2k, 2k + 1 interleaved, columns 0, 1 | 4, 5
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    a[2 * k] = __builtin_shufflevector(v[2 * k], v[2 * k + 1], 0, 8, 1, 9, 4,
                                       12, 5, 13);
    a[2 * k + 1] = __builtin_shufflevector(v[2 * k], v[2 * k + 1], 2, 10, 3,
                                           11, 6, 14, 7, 15);
  }
  Dw8 b[8];  // b[4k + e], 128-bit lane L: rows 4k..4k+3 of column 4L + e
#pragma GCC unroll 2
  for (int k = 0; k < 2; ++k) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const Dw8 x = a[4 * k + h], y = a[4 * k + h + 2];
      b[4 * k + 2 * h] =
          __builtin_shufflevector(x, y, 0, 1, 8, 9, 4, 5, 12, 13);
      b[4 * k + 2 * h + 1] =
          __builtin_shufflevector(x, y, 2, 3, 10, 11, 6, 7, 14, 15);
    }
  }
#pragma GCC unroll 4
  for (int e = 0; e < 4; ++e) {
    v[e] = __builtin_shufflevector(b[e], b[4 + e], 0, 1, 2, 3, 8, 9, 10, 11);
    v[4 + e] =
        __builtin_shufflevector(b[e], b[4 + e], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

// 16 x 16 in 64-byte vectors (the AVX-512 bfloat16 engine): 64 two-vector
// shuffles per 256 elements.
typedef int32_t Dw16 __attribute__((vector_size(64)));

inline void Transpose16(Dw16 v[16]) {
  Dw16 a[16];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {  // 32-bit interleave of rows 2k, 2k + 1
    a[2 * k] = __builtin_shufflevector(v[2 * k], v[2 * k + 1], 0, 16, 1, 17,
                                       4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13,
                                       29);
    a[2 * k + 1] = __builtin_shufflevector(v[2 * k], v[2 * k + 1], 2, 18, 3,
                                           19, 6, 22, 7, 23, 10, 26, 11, 27,
                                           14, 30, 15, 31);
  }
  Dw16 b[16];  // b[4k + e], 128-bit lane L: rows 4k..4k+3 of column 4L + e
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const Dw16 x = a[4 * k + h], y = a[4 * k + h + 2];
      b[4 * k + 2 * h] = __builtin_shufflevector(
          x, y, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
      b[4 * k + 2 * h + 1] = __builtin_shufflevector(
          x, y, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
    }
  }
#pragma GCC unroll 4
  for (int e = 0; e < 4; ++e) {  // the 128-bit lanes, 4 x 4
    const Dw16 x0 = __builtin_shufflevector(b[e], b[4 + e], 0, 1, 2, 3, 16, 17,
                                            18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const Dw16 x1 = __builtin_shufflevector(b[e], b[4 + e], 8, 9, 10, 11, 24,
                                            25, 26, 27, 12, 13, 14, 15, 28, 29,
                                            30, 31);
    const Dw16 x2 = __builtin_shufflevector(b[8 + e], b[12 + e], 0, 1, 2, 3,
                                            16, 17, 18, 19, 4, 5, 6, 7, 20, 21,
                                            22, 23);
    const Dw16 x3 = __builtin_shufflevector(b[8 + e], b[12 + e], 8, 9, 10, 11,
                                            24, 25, 26, 27, 12, 13, 14, 15, 28,
                                            29, 30, 31);
    v[e] = __builtin_shufflevector(x0, x2, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18,
                                   19, 20, 21, 22, 23);
    v[4 + e] = __builtin_shufflevector(x0, x2, 8, 9, 10, 11, 12, 13, 14, 15,
                                       24, 25, 26, 27, 28, 29, 30, 31);
    v[8 + e] = __builtin_shufflevector(x1, x3, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17,
                                       18, 19, 20, 21, 22, 23);
    v[12 + e] = __builtin_shufflevector(x1, x3, 8, 9, 10, 11, 12, 13, 14, 15,
                                        24, 25, 26, 27, 28, 29, 30, 31);
  }
}


// A block of 16 rows by kCols 4-byte columns transposed: each output row's 16
// elements are one whole cache line's store (16 x 8: two Transpose8 blocks).
template <int kCols>
inline void TransposeBlock(const char* const src[16], int64_t c0, char* out,
                           int64_t ldo, int64_t r0) {
  if constexpr (kCols == 16) {
    Dw16 v[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      std::memcpy(&v[i], src[i] + 4 * c0, sizeof(Dw16));
    }
    Transpose16(v);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      std::memcpy(out + 4 * ((c0 + j) * ldo + r0), &v[j], sizeof(Dw16));
    }
  } else {
    static_assert(kCols == 8, "8 or 16 columns");
    Dw8 lo[8], hi[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      std::memcpy(&lo[i], src[i] + 4 * c0, sizeof(Dw8));
      std::memcpy(&hi[i], src[8 + i] + 4 * c0, sizeof(Dw8));
    }
    Transpose8(lo);
    Transpose8(hi);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      char* row = out + 4 * ((c0 + j) * ldo + r0);
      std::memcpy(row, &lo[j], sizeof(Dw8));
      std::memcpy(row + sizeof(Dw8), &hi[j], sizeof(Dw8));
    }
  }
}

// out[c * ldo + r] = in(r)[c] for r < rows, c < cols, 4-byte elements (in(r):
// row r's address): 16 x kCols blocks (TransposeBlock), the edges one by one.
// kCols 8 for code compiled for any instruction set, 16 for AVX-512's only.
template <int kCols = 8, typename RowFn>
inline void TransposeDwords(const RowFn& in, int64_t rows, int64_t cols,
                            void* out_v, int64_t ldo) {
  char* out = static_cast<char*>(out_v);
  int64_t r0 = 0;
  for (; r0 + 16 <= rows; r0 += 16) {
    const char* src[16];
    for (int i = 0; i < 16; ++i) {
      src[i] = reinterpret_cast<const char*>(in(r0 + i));
    }
    int64_t c0 = 0;
    for (; c0 + kCols <= cols; c0 += kCols) {
      TransposeBlock<kCols>(src, c0, out, ldo, r0);
    }
    for (; c0 < cols; ++c0) {
      for (int i = 0; i < 16; ++i) {
        std::memcpy(out + 4 * (c0 * ldo + r0 + i), src[i] + 4 * c0, 4);
      }
    }
  }
  for (; r0 < rows; ++r0) {
    const char* src = reinterpret_cast<const char*>(in(r0));
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(out + 4 * (c * ldo + r0), src + 4 * c, 4);
    }
  }
}

// One key/value head's float panels, the products' operands: K^T [D, S],
// K [S, D], V [S, Dv], V^T [Dv, S] (those a pass reads) and V's mean. The
// transposed ones' rows are `ld` apart (PanelStride).
template <typename C>
struct Panels {
  int64_t S, D, Dv, ld;
  bool with_k, with_v, with_vt;
  int64_t head = -1;  // the key/value head (b * K + kh) packed; -1: none yet
  std::unique_ptr<C[]> base;

  Panels(const AttentionParams& p, bool k, bool v, bool vt)
      : S(p.kv_len), D(p.head_dim), Dv(p.value_dim), ld(PanelStride<C>(S)),
        with_k(k), with_v(v), with_vt(vt), base(new C[Stride()]) {}
  int64_t Stride() const {
    return ld * D + (with_k ? S * D : 0) + (with_v ? S * Dv : 0) +
           (with_vt ? ld * Dv : 0) + Dv;
  }
  C* KT() const { return base.get(); }
  C* K() const { return KT() + ld * D; }
  C* V() const { return K() + (with_k ? S * D : 0); }
  C* VT() const { return V() + (with_v ? S * Dv : 0); }
  C* VMean() const { return VT() + (with_vt ? ld * Dv : 0); }
};

// A product C (+)= A B as Gemm<C, kBytes>::Run, compiled once per instruction
// set and called through this pointer: the engine's loops inline everything
// else, but one copy of the product kernel per variant keeps the library's
// compile time (and size) from growing with every call site.
template <typename C>
using GemmFn = void (*)(int64_t M, int64_t N, int64_t K, const C* A,
                        int64_t lda, int64_t ak, const C* B, int64_t ldb,
                        C* Cm, int64_t ldc, bool accumulate);

// The backward's work units, and the query heads (b, n) each walks in order.
// Plain: one unit per query head. By the bias (where the backward also sums
// the bias's gradient): one unit per index of the bias's own batch and head
// axes, walking the heads it is broadcast over, so that no two threads add to
// one element of the bias's sums and each adds in one fixed order.
struct BackwardSplit {
  int64_t units, inner, heads_out, heads_in;
  BackwardSplit(const AttentionParams& p, bool by_bias) {
    const bool per_batch = !by_bias || p.bias.strides[0] != 0;
    const bool per_head = !by_bias || p.bias.strides[1] != 0;
    heads_out = per_head ? p.heads : 1;
    heads_in = per_head ? 1 : p.heads;
    units = (per_batch ? p.batch : 1) * heads_out;
    inner = (per_batch ? 1 : p.batch) * heads_in;
  }
  void At(int64_t unit, int64_t i, int64_t* b, int64_t* n) const {
    *b = unit / heads_out + i / heads_in;
    *n = unit % heads_out + i % heads_in;
  }
};

// dS of one tile's rows (the gradient of the logits before the scale, `ds`
// rows kKeyBlock apart) added into the bias's sums.
template <typename C>
void AddBiasGrad(const AttentionParams& p, const C* ds, int64_t b, int64_t n,
                 int64_t t0, int64_t rows, int64_t s0, int64_t cols,
                 C* sums) {
  const int64_t st = p.bias.strides[3];
  for (int64_t r = 0; r < rows; ++r) {
    const C* row = ds + r * kKeyBlock;
    C* out = sums + p.BroadcastOffset(p.bias, b, n, t0 + r, s0);
    if (st == 1) {
      for (int64_t c = 0; c < cols; ++c) out[c] += row[c];
    } else {
      for (int64_t c = 0; c < cols; ++c) out[c * st] += row[c];
    }
  }
}

template <typename St>
struct Engine {
  using Stored = typename St::Stored;
  using C = std::conditional_t<std::is_same_v<Stored, double>, double, float>;

  const AttentionParams& p;
  GemmFn<C> gemm = nullptr;

  int64_t QueryBlocks() const {
    return (p.q_len + kQueryBlock - 1) / kQueryBlock;
  }

  // Packs key/value head `unit` (b * K + kh) into `panels`, unless they hold
  // it already.
  void Pack(Panels<C>& panels, const Stored* k, const Stored* v,
            int64_t unit) const {
    if (panels.head == unit) return;
    panels.head = unit;
    const int64_t b = unit / p.kv_heads, kh = unit % p.kv_heads;
    const int64_t S = p.kv_len, D = p.head_dim, Dv = p.value_dim;
    const auto krow = [&](int64_t s) { return k + p.KOffset(b, s, kh); };
    const auto vrow = [&](int64_t s) { return v + p.VOffset(b, s, kh); };
    const auto transpose = [&](const auto& row, int64_t cols, C* out) {
      if constexpr (std::is_same_v<Stored, float>) {  // bits as they are
        TransposeDwords(row, S, cols, out, panels.ld);
      } else {
        TransposeRows(row, S, cols, out, panels.ld, St::Load);
      }
    };
    transpose(krow, D, panels.KT());
    if (panels.with_vt) transpose(vrow, Dv, panels.VT());
    for (int64_t s = 0; s < S; ++s) {
      if (panels.with_k) {
        const Stored* row = krow(s);
        C* out = panels.K() + s * D;
        for (int64_t d = 0; d < D; ++d) out[d] = St::Load(row[d]);
      }
    }
    C* mean = panels.VMean();
    for (int64_t d = 0; d < Dv; ++d) mean[d] = 0;
    for (int64_t s = 0; s < S; ++s) {
      const Stored* row = vrow(s);
      if (panels.with_v) {
        C* out = panels.V() + s * Dv;
        for (int64_t d = 0; d < Dv; ++d) out[d] = St::Load(row[d]);
      }
      for (int64_t d = 0; d < Dv; ++d) mean[d] += St::Load(row[d]);
    }
    // No keys at all (S = 0): the output is 0, as Keras's empty sum.
    for (int64_t d = 0; d < Dv; ++d) mean[d] = S > 0 ? mean[d] / S : C(0);
  }

  // What a tile of logits needs after its product: nothing (every (t, s)
  // kept, no bias or cap), nothing at all (every key masked: the tile is
  // skipped, its weights are 0), or Finish, told whether it must read the mask
  // and check positions (causal, window).
  struct TileWork {
    bool skip = false;
    bool finish = false;
    bool read_mask = false;
    bool check_position = false;
  };

  TileWork Classify(int64_t b, int64_t n, int64_t t0, int64_t t1, int64_t s0,
                    int64_t s1) const {
    TileWork w;
    w.check_position =
        (p.causal && s1 - 1 > t0) ||
        (p.window >= 0 && (t1 - 1 - s0 >= p.window || s1 - 1 - t0 >= p.window));
    if (p.mask.data != nullptr) {
      bool kept = false, dropped = false;
      ScanMask(b, n, t0, t1 - t0, s0, s1 - s0, &kept, &dropped);
      if (!kept) {
        w.skip = true;
        return w;
      }
      w.read_mask = dropped;
    }
    w.finish = w.read_mask || w.check_position || p.bias.data != nullptr ||
               p.softcap > 0;
    return w;
  }

  // Whether the mask keeps any (t, s) of the tile, and drops any. A mask
  // broadcast over queries (keras-hub's padding) is read for one row only.
  void ScanMask(int64_t b, int64_t n, int64_t t0, int64_t rows, int64_t s0,
                int64_t cols, bool* kept, bool* dropped) const {
    // bool is one byte, 0 or 1: read as bytes so the loops vectorise.
    const uint8_t* base = static_cast<const uint8_t*>(p.mask.data) +
                          p.BroadcastOffset(p.mask, b, n, t0, s0);
    const int64_t ts = p.mask.strides[2], ms = p.mask.strides[3];
    const int64_t scan_rows = ts == 0 ? 1 : rows;
    const int64_t scan_cols = ms == 0 ? 1 : cols;
    unsigned any = 0, all = 1;
    for (int64_t r = 0; r < scan_rows && (any == 0 || all == 1); ++r) {
      const uint8_t* m = base + r * ts;
      if (ms == 1) {
        for (int64_t c = 0; c < scan_cols; ++c) {
          any |= m[c];
          all &= m[c];
        }
      } else {
        for (int64_t c = 0; c < scan_cols; ++c) {
          any |= m[c * ms];
          all &= m[c * ms];
        }
      }
    }
    *kept = any != 0;
    *dropped = all == 0;
  }

  // The logits of a tile (`s` holds scale q.k, rows x cols, ld kKeyBlock)
  // made final: bias added, soft-capped (g: the cap's derivative, if asked),
  // -inf where not kept (by the mask where w.read_mask, by position where
  // w.check_position). kept_any[r] is set where row r keeps a key.
  void Finish(const TileWork& w, C* s, C* g, int64_t b, int64_t n, int64_t t0,
              int64_t rows, int64_t s0, int64_t cols, bool* kept_any) const {
    const uint8_t* mask = static_cast<const uint8_t*>(p.mask.data);
    const Stored* bias = static_cast<const Stored*>(p.bias.data);
    const C cap = p.softcap;
    const int64_t ms = p.mask.strides[3];
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = t0 + r;
      C* row = s + r * kKeyBlock;
      if (bias != nullptr) {
        const Stored* brow = bias + p.BroadcastOffset(p.bias, b, n, t, s0);
        const int64_t st = p.bias.strides[3];
        for (int64_t c = 0; c < cols; ++c) row[c] += St::Load(brow[c * st]);
      }
      if (cap > 0) {
        C* grow = g + r * kKeyBlock;
        for (int64_t c = 0; c < cols; ++c) {
          const C th = std::tanh(row[c] / cap);
          row[c] = cap * th;
          if (g != nullptr) grow[c] = 1 - th * th;
        }
      }
      const uint8_t* mrow =
          w.read_mask ? mask + p.BroadcastOffset(p.mask, b, n, t, s0)
                      : nullptr;
      unsigned any = 0;
      if (!w.read_mask && !w.check_position) {
        any = 1;
      } else if (!w.check_position && ms == 1) {  // the common mask: a loop
        for (int64_t c = 0; c < cols; ++c) {     // that vectorises
          any |= mrow[c];
          row[c] = mrow[c] ? row[c] : NegInf<C>();
        }
      } else {
        for (int64_t c = 0; c < cols; ++c) {
          const bool kept = (mrow == nullptr || mrow[c * ms]) &&
                            p.KeptByPosition(t, s0 + c);
          any |= kept;
          row[c] = kept ? row[c] : NegInf<C>();
        }
      }
      kept_any[r] |= any != 0;
    }
  }

  // The key range [lo, hi) rows [t0, t1) can see.
  void KeyRange(int64_t t0, int64_t t1, int64_t* lo, int64_t* hi) const {
    *lo = 0;
    *hi = p.kv_len;
    if (p.causal) *hi = std::min(*hi, t1);
    if (p.window >= 0) {
      *lo = std::max<int64_t>(0, t0 - p.window + 1);
      *hi = std::min(*hi, t1 - 1 + p.window);
    }
  }

  // The query range [lo, hi) keys [s0, s1) are seen by.
  void QueryRange(int64_t s0, int64_t s1, int64_t* lo, int64_t* hi) const {
    *lo = 0;
    *hi = p.q_len;
    if (p.causal) *lo = std::max(*lo, s0);
    if (p.window >= 0) {
      *lo = std::max<int64_t>(*lo, s0 - p.window + 1);
      *hi = std::min(*hi, s1 - 1 + p.window);
    }
  }

  void ForwardUnits(const Stored* q, const Stored* k, const Stored* v,
                    Stored* out, C* lse, int64_t begin, int64_t end) const {
    const int64_t D = p.head_dim, Dv = p.value_dim;
    Panels<C> panels(p, false, true, false);
    auto qs = Buffer<C>(kQueryBlock * D);
    auto s = Buffer<C>(kQueryBlock * kKeyBlock);
    auto acc = Buffer<C>(kQueryBlock * Dv);
    C m[kQueryBlock], l[kQueryBlock];
    bool kept_any[kQueryBlock] = {};
    const int64_t blocks = QueryBlocks();
    for (int64_t u = begin; u < end; ++u) {
      const int64_t qb = u % blocks, bn = u / blocks;
      const int64_t b = bn / p.heads, n = bn % p.heads;
      const int64_t kv = b * p.kv_heads + n / p.group();
      const int64_t t0 = qb * kQueryBlock;
      const int64_t t1 = std::min(p.q_len, t0 + kQueryBlock);
      const int64_t rows = t1 - t0;
      for (int64_t r = 0; r < rows; ++r) {
        const Stored* row = q + p.QOffset(b, t0 + r, n);
        for (int64_t d = 0; d < D; ++d) {
          qs[r * D + d] = static_cast<C>(p.scale) * St::Load(row[d]);
        }
        m[r] = NegInf<C>();
        l[r] = 0;
        kept_any[r] = false;
        for (int64_t d = 0; d < Dv; ++d) acc[r * Dv + d] = 0;
      }
      int64_t lo, hi;
      KeyRange(t0, t1, &lo, &hi);
      Pack(panels, k, v, kv);
      const C* kt = panels.KT();
      const C* vv = panels.V();
      for (int64_t s0 = lo; s0 < hi; s0 += kKeyBlock) {
        const int64_t cols = std::min(kKeyBlock, hi - s0);
        const TileWork w = Classify(b, n, t0, t1, s0, s0 + cols);
        if (w.skip) continue;  // every key masked: weights 0
        gemm(rows, cols, D, qs.get(), D, 1, kt + s0, panels.ld, s.get(),
               kKeyBlock, false);
        if (w.finish) {
          Finish(w, s.get(), nullptr, b, n, t0, rows, s0, cols, kept_any);
        } else {
          for (int64_t r = 0; r < rows; ++r) kept_any[r] = true;
        }
        for (int64_t r = 0; r < rows; ++r) {
          C* row = s.get() + r * kKeyBlock;
          const C mx = RowMax(row, cols, m[r]);
          if (mx == NegInf<C>()) {  // nothing kept yet: weights 0
            for (int64_t c = 0; c < cols; ++c) row[c] = 0;
            continue;
          }
          const C alpha = m[r] == NegInf<C>() ? C(0) : ExpC(m[r] - mx);
          l[r] = l[r] * alpha + ExpAndSum(row, cols, mx);
          m[r] = mx;
          if (alpha != C(1)) {
            C* a = acc.get() + r * Dv;
            for (int64_t d = 0; d < Dv; ++d) a[d] *= alpha;
          }
        }
        gemm(rows, Dv, cols, s.get(), kKeyBlock, 1, vv + s0 * Dv, Dv,
               acc.get(), Dv, true);
      }
      const C* mean = panels.VMean();
      for (int64_t r = 0; r < rows; ++r) {
        Stored* o = out + p.OutOffset(b, t0 + r, n);
        C* lse_row = lse + p.LseOffset(b, n, t0 + r);
        if (!kept_any[r]) {  // Keras's uniform weights: the values' mean
          for (int64_t d = 0; d < Dv; ++d) o[d] = St::Store(mean[d]);
          *lse_row = NegInf<C>();
          continue;
        }
        const C inv = C(1) / l[r];
        for (int64_t d = 0; d < Dv; ++d) {
          o[d] = St::Store(acc[r * Dv + d] * inv);
        }
        *lse_row = m[r] + std::log(l[r]);
      }
    }
  }

  // A tile's final logits (rows kKeyBlock apart) made P = exp(logit - lse);
  // a dead row's weights reach only dv (the backward's dead_sum), so they are
  // 0 here.
  void ToProbabilities(C* s, const C* lse, int64_t b, int64_t n, int64_t t0,
                       int64_t rows, int64_t cols) const {
    for (int64_t r = 0; r < rows; ++r) {
      const C lr = lse[p.LseOffset(b, n, t0 + r)];
      C* row = s + r * kKeyBlock;
      if (lr == NegInf<C>()) {
        for (int64_t c = 0; c < cols; ++c) row[c] = 0;
      } else {
        for (int64_t c = 0; c < cols; ++c) row[c] = ExpC(row[c] - lr);
      }
    }
  }

  // P made dS = P (dP - delta), the gradient of the logits before the scale
  // (times the soft cap's derivative g, where there is a cap: then every
  // tile is finished, so g holds it); delta holds the tile's rows.
  void ToLogitGrads(C* s, const C* dp, const C* g, const C* delta,
                    int64_t rows, int64_t cols) const {
    for (int64_t r = 0; r < rows; ++r) {
      C* row = s + r * kKeyBlock;
      const C* dprow = dp + r * kKeyBlock;
      for (int64_t c = 0; c < cols; ++c) row[c] *= dprow[c] - delta[r];
      if (p.softcap > 0) {
        const C* grow = g + r * kKeyBlock;
        for (int64_t c = 0; c < cols; ++c) row[c] *= grow[c];
      }
    }
  }

  // Backward of units [begin, end) of `split`. dk_part and dv_part: every
  // query head's [S, D] and [S, Dv] float rows, where heads are grouped.
  // bias_sums: where not null, dS summed into the bias's gradient.
  void BackwardUnits(const Stored* q, const Stored* k, const Stored* v,
                     const Stored* out, const Stored* dout, const C* lse,
                     Stored* dq, Stored* dk, Stored* dv, C* dk_parts,
                     C* dv_parts, C* bias_sums, const BackwardSplit& split,
                     int64_t begin, int64_t end) const {
    const int64_t T = p.q_len, S = p.kv_len, D = p.head_dim,
                  Dv = p.value_dim;
    const bool grouped = p.group() > 1;
    Panels<C> panels(p, true, false, true);
    auto qs = Buffer<C>(T * D);
    auto dos = Buffer<C>(T * Dv);
    auto delta = Buffer<C>(T);
    auto dqa = Buffer<C>(T * D);
    auto s = Buffer<C>(kQueryBlock * kKeyBlock);
    auto g = Buffer<C>(kQueryBlock * kKeyBlock);
    auto dp = Buffer<C>(kQueryBlock * kKeyBlock);
    auto dkb = Buffer<C>(kKeyBlock * D);
    auto dvb = Buffer<C>(kKeyBlock * Dv);
    std::vector<C> dead_sum(Dv);
    bool kept_any[kQueryBlock] = {};
    // Unit u walks its heads w = u * inner + i, i < inner, in order.
    for (int64_t w = begin * split.inner; w < end * split.inner; ++w) {
      int64_t b, n;
      split.At(w / split.inner, w % split.inner, &b, &n);
      const int64_t kv = b * p.kv_heads + n / p.group();
      C* dk_part = grouped ? dk_parts + (b * p.heads + n) * S * D : nullptr;
      C* dv_part = grouped ? dv_parts + (b * p.heads + n) * S * Dv : nullptr;
      bool any_dead = false;
      std::fill(dead_sum.begin(), dead_sum.end(), C(0));
      for (int64_t t = 0; t < T; ++t) {
        const Stored* qrow = q + p.QOffset(b, t, n);
        for (int64_t d = 0; d < D; ++d) {
          qs[t * D + d] = static_cast<C>(p.scale) * St::Load(qrow[d]);
          dqa[t * D + d] = 0;
        }
        const Stored* orow = out + p.OutOffset(b, t, n);
        const Stored* grow = dout + p.OutOffset(b, t, n);
        for (int64_t d = 0; d < Dv; ++d) dos[t * Dv + d] = St::Load(grow[d]);
        delta[t] = RowDot(dos.get() + t * Dv, orow, Dv, St::Load);
        if (lse[p.LseOffset(b, n, t)] == NegInf<C>()) {
          any_dead = true;
          for (int64_t d = 0; d < Dv; ++d) dead_sum[d] += dos[t * Dv + d];
        }
      }
      const C dead_share = any_dead ? C(1) / static_cast<C>(S) : C(0);
      Pack(panels, k, v, kv);
      const C* kt = panels.KT();
      const C* kk = panels.K();
      const C* vt = panels.VT();
      for (int64_t s0 = 0; s0 < S; s0 += kKeyBlock) {
        const int64_t cols = std::min(kKeyBlock, S - s0);
        std::fill(dkb.get(), dkb.get() + cols * D, C(0));
        for (int64_t c = 0; c < cols; ++c) {
          for (int64_t d = 0; d < Dv; ++d) {
            dvb[c * Dv + d] = dead_sum[d] * dead_share;
          }
        }
        int64_t lo, hi;
        QueryRange(s0, s0 + cols, &lo, &hi);
        for (int64_t t0 = lo; t0 < hi; t0 += kQueryBlock) {
          const int64_t rows = std::min(kQueryBlock, hi - t0);
          const TileWork w = Classify(b, n, t0, t0 + rows, s0, s0 + cols);
          if (w.skip) continue;  // weights 0: nothing reaches any gradient
          gemm(rows, cols, D, qs.get() + t0 * D, D, 1, kt + s0, panels.ld,
                 s.get(), kKeyBlock, false);
          if (w.finish) {
            Finish(w, s.get(), g.get(), b, n, t0, rows, s0, cols, kept_any);
          }
          ToProbabilities(s.get(), lse, b, n, t0, rows, cols);
          // dV += P^T dO (P^T read in place)
          gemm(cols, Dv, rows, s.get(), 1, kKeyBlock, dos.get() + t0 * Dv, Dv,
                 dvb.get(), Dv, true);
          // dP = dO V^T
          gemm(rows, cols, Dv, dos.get() + t0 * Dv, Dv, 1, vt + s0,
                 panels.ld, dp.get(), kKeyBlock, false);
          ToLogitGrads(s.get(), dp.get(), g.get(), delta.get() + t0, rows, cols);
          if (bias_sums != nullptr) {
            AddBiasGrad(p, s.get(), b, n, t0, rows, s0, cols, bias_sums);
          }
          // dQ += dS K; dK += dS^T (scale Q)
          gemm(rows, D, cols, s.get(), kKeyBlock, 1, kk + s0 * D, D,
                 dqa.get() + t0 * D, D, true);
          gemm(cols, D, rows, s.get(), 1, kKeyBlock, qs.get() + t0 * D, D,
                 dkb.get(), D, true);
        }
        if (grouped) {
          std::memcpy(dk_part + s0 * D, dkb.get(), sizeof(C) * cols * D);
          std::memcpy(dv_part + s0 * Dv, dvb.get(), sizeof(C) * cols * Dv);
        } else {
          for (int64_t c = 0; c < cols; ++c) {
            Stored* krow = dk + p.KOffset(b, s0 + c, n / p.group());
            Stored* vrow = dv + p.VOffset(b, s0 + c, n / p.group());
            for (int64_t d = 0; d < D; ++d) krow[d] = St::Store(dkb[c * D + d]);
            for (int64_t d = 0; d < Dv; ++d) {
              vrow[d] = St::Store(dvb[c * Dv + d]);
            }
          }
        }
      }
      for (int64_t t = 0; t < T; ++t) {
        Stored* row = dq + p.QOffset(b, t, n);
        for (int64_t d = 0; d < D; ++d) {
          row[d] = St::Store(static_cast<C>(p.scale) * dqa[t * D + d]);
        }
      }
    }
  }

  // dk, dv of key/value rows [begin, end) (unit = (b * K + kh) * S + s):
  // the group's partials summed in head order.
  void ReduceGroups(const C* dk_part, const C* dv_part, Stored* dk,
                    Stored* dv, int64_t begin, int64_t end) const {
    const int64_t S = p.kv_len, D = p.head_dim, Dv = p.value_dim;
    const int64_t group = p.group();
    for (int64_t u = begin; u < end; ++u) {
      const int64_t s = u % S, bk = u / S;
      const int64_t b = bk / p.kv_heads, kh = bk % p.kv_heads;
      const int64_t n0 = b * p.heads + kh * group;
      Stored* krow = dk + p.KOffset(b, s, kh);
      Stored* vrow = dv + p.VOffset(b, s, kh);
      for (int64_t d = 0; d < D; ++d) {
        C sum = 0;
        for (int64_t j = 0; j < group; ++j) {
          sum += dk_part[((n0 + j) * S + s) * D + d];
        }
        krow[d] = St::Store(sum);
      }
      for (int64_t d = 0; d < Dv; ++d) {
        C sum = 0;
        for (int64_t j = 0; j < group; ++j) {
          sum += dv_part[((n0 + j) * S + s) * Dv + d];
        }
        vrow[d] = St::Store(sum);
      }
    }
  }

  // The bias's gradient, summed into acc (laid out as the bias, in C): units
  // [begin, end) of BiasGradUnits(p), each walking its query heads in order
  // and, per head, the tiles in the backward's order, so every element of acc
  // is summed by one thread in one fixed order. dS is the backward's: P (dP -
  // delta) times the soft cap's derivative, 0 where a key is not kept.
  void BiasGradUnits(const Stored* q, const Stored* k, const Stored* v,
                     const Stored* out, const Stored* dout, const C* lse,
                     C* acc, int64_t begin, int64_t end) const {
    const int64_t T = p.q_len, S = p.kv_len, D = p.head_dim,
                  Dv = p.value_dim;
    const BackwardSplit split(p, true);
    Panels<C> panels(p, false, false, true);
    auto qs = Buffer<C>(T * D);
    auto dos = Buffer<C>(T * Dv);
    auto delta = Buffer<C>(T);
    auto s = Buffer<C>(kQueryBlock * kKeyBlock);
    auto g = Buffer<C>(kQueryBlock * kKeyBlock);
    auto dp = Buffer<C>(kQueryBlock * kKeyBlock);
    bool kept_any[kQueryBlock] = {};
    for (int64_t u = begin; u < end; ++u) {
      for (int64_t i = 0; i < split.inner; ++i) {
        int64_t b, n;
        split.At(u, i, &b, &n);
        for (int64_t t = 0; t < T; ++t) {
          const Stored* qrow = q + p.QOffset(b, t, n);
          for (int64_t d = 0; d < D; ++d) {
            qs[t * D + d] = static_cast<C>(p.scale) * St::Load(qrow[d]);
          }
          const Stored* grow = dout + p.OutOffset(b, t, n);
          for (int64_t d = 0; d < Dv; ++d) dos[t * Dv + d] = St::Load(grow[d]);
          delta[t] = RowDot(dos.get() + t * Dv, out + p.OutOffset(b, t, n), Dv,
                            St::Load);
        }
        Pack(panels, k, v, b * p.kv_heads + n / p.group());
        for (int64_t s0 = 0; s0 < S; s0 += kKeyBlock) {
          const int64_t cols = std::min(kKeyBlock, S - s0);
          int64_t lo, hi;
          QueryRange(s0, s0 + cols, &lo, &hi);
          for (int64_t t0 = lo; t0 < hi; t0 += kQueryBlock) {
            const int64_t rows = std::min(kQueryBlock, hi - t0);
            const TileWork w = Classify(b, n, t0, t0 + rows, s0, s0 + cols);
            if (w.skip) continue;  // weights 0: so is dS
            gemm(rows, cols, D, qs.get() + t0 * D, D, 1, panels.KT() + s0,
                 panels.ld, s.get(), kKeyBlock, false);
            if (w.finish) {
              Finish(w, s.get(), g.get(), b, n, t0, rows, s0, cols, kept_any);
            }
            ToProbabilities(s.get(), lse, b, n, t0, rows, cols);
            gemm(rows, cols, Dv, dos.get() + t0 * Dv, Dv, 1, panels.VT() + s0,
                 panels.ld, dp.get(), kKeyBlock, false);
            ToLogitGrads(s.get(), dp.get(), g.get(), delta.get() + t0, rows,
                         cols);
            AddBiasGrad(p, s.get(), b, n, t0, rows, s0, cols, acc);
          }
        }
      }
    }
  }
};

#if defined(__x86_64__)
// ------------------------------------------------ bfloat16 products -------
// For bfloat16 inputs where ActiveAvx512Bf16() (core/cpu_isa.h): products of
// bfloat16 operands accumulated in float by AVX512-BF16's vdpbf16ps (each float
// lane += a0 b0 + a1 b1, a pair of adjacent k), as oneDNN's bfloat16 matmuls
// do: two products per float lane and instruction where the float kernel does
// one. Everything else is the float engine's: the online softmax, its running
// max and sum, the log-sum-exp, every accumulator and the tiles. Q, K, V and dO
// are bfloat16 already, so their operands are the inputs' bits rearranged,
// without rounding; the logits are scaled in float after Q K^T (a scaled query
// would be rounded again). P and dS are rounded to bfloat16 before the products
// that read them, as FlashAttention does for 16-bit inputs.
//
// Layout: an A operand row-major with each pair (k, k + 1) adjacent, read as
// one 32-bit element and broadcast; a B operand as rows of pairs,
// B2[j][n] = {B[2j][n], B[2j + 1][n]}, so that one 512-bit load holds 16
// columns. A reduction of odd length is padded with a zero in A; ranges the
// pairs index start even (a key or query range rounded down one: that row or
// column is outside the causal or window range, so Finish masks it).
//
// The backward computes dV^T = dO^T P and dK^T = Q^T dS (accumulated per key
// block, transposed once when stored) so that P and dS are B operands, pairs
// of rows, and no tile is transposed.

using Bf = uint16_t;
using Pair = uint32_t;

#define TF_OPS_BF16 TF_OPS_TARGET_AVX512_BF16

constexpr int64_t Even(int64_t n) { return n + (n & 1); }

// C[m, n] (+)= sum_k A[m, k] B[k, n] for m < M, n < N, over K2 pairs of k:
// A[m, 2j + i] at A[m * lda + 2j + i] (lda even), B as pairs, rows `ldb`
// pairs apart, C's rows `ldc` apart. Register tiles of kRows rows by 32
// columns (two vectors of 16 float lanes).
struct GemmBf16 {
  static constexpr int kRows = 8;
  // The row loops unrolled, so that the accumulators live in registers.

  template <int R>
  TF_OPS_BF16 static inline void Tile(int64_t K2, const Bf* A, int64_t lda,
                                      const Pair* B, int64_t ldb, float* Cm,
                                      int64_t ldc, __mmask16 m0, __mmask16 m1,
                                      bool accumulate) {
    __m512 acc[R][2];
    _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) {
      if (accumulate) {
        acc[r][0] = _mm512_maskz_loadu_ps(m0, Cm + r * ldc);
        acc[r][1] = _mm512_maskz_loadu_ps(m1, Cm + r * ldc + 16);
      } else {
        acc[r][0] = _mm512_setzero_ps();
        acc[r][1] = _mm512_setzero_ps();
      }
    }
    for (int64_t j = 0; j < K2; ++j) {
      const __m512bh b0 =
          (__m512bh)_mm512_maskz_loadu_epi32(m0, B + j * ldb);
      const __m512bh b1 =
          (__m512bh)_mm512_maskz_loadu_epi32(m1, B + j * ldb + 16);
      _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) {
        int32_t a;
        std::memcpy(&a, A + r * lda + 2 * j, sizeof(a));
        const __m512bh av = (__m512bh)_mm512_set1_epi32(a);
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
      }
    }
    _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) {
      _mm512_mask_storeu_ps(Cm + r * ldc, m0, acc[r][0]);
      _mm512_mask_storeu_ps(Cm + r * ldc + 16, m1, acc[r][1]);
    }
  }

  template <int R>
  TF_OPS_BF16 static inline void Rows(int64_t N, int64_t K2, const Bf* A,
                                      int64_t lda, const Pair* B, int64_t ldb,
                                      float* Cm, int64_t ldc,
                                      bool accumulate) {
    int64_t n = 0;
    for (; n + 32 <= N; n += 32) {
      Tile<R>(K2, A, lda, B + n, ldb, Cm + n, ldc, 0xffff, 0xffff,
              accumulate);
    }
    if (n < N) {
      const int64_t left = N - n;
      const __mmask16 m0 =
          left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
      const __mmask16 m1 =
          left > 16 ? static_cast<__mmask16>((1u << (left - 16)) - 1) : 0;
      Tile<R>(K2, A, lda, B + n, ldb, Cm + n, ldc, m0, m1, accumulate);
    }
  }

  TF_OPS_BF16 static inline void Run(int64_t M, int64_t N, int64_t K2,
                                     const Bf* A, int64_t lda, const Pair* B,
                                     int64_t ldb, float* Cm, int64_t ldc,
                                     bool accumulate) {
    int64_t m = 0;
    for (; m + kRows <= M; m += kRows) {
      Rows<kRows>(N, K2, A + m * lda, lda, B, ldb, Cm + m * ldc, ldc,
                  accumulate);
    }
    const Bf* a = A + m * lda;
    float* c = Cm + m * ldc;
    switch (M - m) {
      case 7: Rows<7>(N, K2, a, lda, B, ldb, c, ldc, accumulate); break;
      case 6: Rows<6>(N, K2, a, lda, B, ldb, c, ldc, accumulate); break;
      case 5: Rows<5>(N, K2, a, lda, B, ldb, c, ldc, accumulate); break;
      case 4: Rows<4>(N, K2, a, lda, B, ldb, c, ldc, accumulate); break;
      case 3: Rows<3>(N, K2, a, lda, B, ldb, c, ldc, accumulate); break;
      case 2: Rows<2>(N, K2, a, lda, B, ldb, c, ldc, accumulate); break;
      case 1: Rows<1>(N, K2, a, lda, B, ldb, c, ldc, accumulate); break;
      default: break;
    }
  }
};

// The product, compiled once and called through a pointer (as GemmFn).
using GemmBf16Fn = void (*)(int64_t M, int64_t N, int64_t K2, const Bf* A,
                            int64_t lda, const Pair* B, int64_t ldb,
                            float* Cm, int64_t ldc, bool accumulate);

inline __mmask16 FirstLanes(int64_t n) {
  return n >= 16 ? 0xffff : static_cast<__mmask16>((1u << n) - 1);
}

// dst[c] = bfloat16(src[c]) for c < n (rounded to nearest even), and
// dst[n] = 0 where n is odd: the pad of the last pair.
TF_OPS_BF16 inline void RoundRow(const float* src, int64_t n, Bf* dst) {
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 m = FirstLanes(n - c);
    const __m256i h =
        (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + c));
    _mm256_mask_storeu_epi16(dst + c, m, h);
  }
  if (n & 1) dst[n] = 0;
}

// dst[c] = {bfloat16(r0[c]), bfloat16(r1[c])} for c < n; r1 null: zeros (the
// pad of an odd number of rows). Where row0 (row1) is not null, the rounded
// r0 (r1) also as a row there, as RoundRow writes it.
TF_OPS_BF16 inline void RoundPairRows(const float* r0, const float* r1,
                                      int64_t n, Pair* dst, Bf* row0 = nullptr,
                                      Bf* row1 = nullptr) {
  // Lane 2c takes r0's c (element c of the conversion), 2c + 1 r1's (16 + c).
  alignas(64) static const uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kInterleave);
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 m = FirstLanes(n - c);
    const __m512 a = _mm512_maskz_loadu_ps(m, r0 + c);
    const __m512 b =
        r1 != nullptr ? _mm512_maskz_loadu_ps(m, r1 + c) : _mm512_setzero_ps();
    const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // a low, b high
    _mm512_mask_storeu_epi32(dst + c, m, _mm512_permutexvar_epi16(idx, h));
    if (row0 != nullptr) {
      _mm256_mask_storeu_epi16(row0 + c, m, (__m256i)_mm512_cvtneps_pbh(a));
    }
    if (row1 != nullptr) {
      _mm256_mask_storeu_epi16(row1 + c, m, (__m256i)_mm512_cvtneps_pbh(b));
    }
  }
  if (n & 1) {
    if (row0 != nullptr) row0[n] = 0;
    if (row1 != nullptr) row1[n] = 0;
  }
}

// max(start, row[0..n)), row first multiplied by `scale` in place where
// kScale. NaN is passed over, as RowMax does.
template <bool kScale>
TF_OPS_BF16 inline float MaxRow(float* row, int64_t n, float scale,
                                float start) {
  __m512 mx = _mm512_set1_ps(start);
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 m = FirstLanes(n - c);
    __m512 x = _mm512_maskz_loadu_ps(m, row + c);
    if constexpr (kScale) {
      x = _mm512_mul_ps(x, sc);
      _mm512_mask_storeu_ps(row + c, m, x);
    }
    mx = _mm512_mask_max_ps(mx, m, x, mx);  // x first: a NaN x keeps mx
  }
  return Lanes<float>::Max(mx);
}

// The sum of row[0..n), and the row rounded to bfloat16 at dst (RoundRow).
TF_OPS_BF16 inline float SumAndRound(const float* row, int64_t n, Bf* dst) {
  __m512 sum = _mm512_setzero_ps();
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 m = FirstLanes(n - c);
    const __m512 x = _mm512_maskz_loadu_ps(m, row + c);
    sum = _mm512_add_ps(sum, x);
    _mm256_mask_storeu_epi16(dst + c, m, (__m256i)_mm512_cvtneps_pbh(x));
  }
  if (n & 1) dst[n] = 0;
  return Lanes<float>::Sum(sum);
}

// One key/value head's operands: K^T as pairs along the head dimension
// [D/2][S] (Q K^T), K as pairs along keys [S/2][D] (dS K), V as pairs along
// keys [S/2][Dv] (P V), V^T as pairs along the value dimension [Dv/2][S]
// (dO V^T); those a pass reads, and V's mean (float). K^T's and V^T's rows
// are `ld` pairs apart (PanelStride).
struct PairPanels {
  int64_t S, D, Dv, ld;
  bool with_k, with_v, with_vt;
  int64_t head = -1;
  std::unique_ptr<Pair[]> kt, k, v, vt;
  std::unique_ptr<float[]> mean;

  PairPanels(const AttentionParams& p, bool wk, bool wv, bool wvt)
      : S(p.kv_len), D(p.head_dim), Dv(p.value_dim),
        ld(PanelStride<Pair>(p.kv_len)), with_k(wk), with_v(wv),
        with_vt(wvt), kt(Buffer<Pair>(Even(D) / 2 * ld)),
        k(Buffer<Pair>(wk ? Even(S) / 2 * D : 0)),
        v(Buffer<Pair>(wv ? Even(S) / 2 * Dv : 0)),
        vt(Buffer<Pair>(wvt ? Even(Dv) / 2 * ld : 0)),
        mean(Buffer<float>(Dv)) {}
};

inline Pair MakePair(Bf lo, Bf hi) {
  return static_cast<Pair>(lo) | (static_cast<Pair>(hi) << 16);
}

// The bfloat16 engine: the float engine's tiles, masks and softmax (the
// base), with products of bfloat16 pairs.
struct Bf16Engine : Engine<cpu_storage::BFloat16> {
  using St = cpu_storage::BFloat16;
  GemmBf16Fn gemm16 = nullptr;

  // Packs key/value head `unit` (b * K + kh), unless the panels hold it.
  TF_OPS_BF16 void Pack(PairPanels& panels, const Bf* k, const Bf* v,
                        int64_t unit) const {
    if (panels.head == unit) return;
    panels.head = unit;
    const int64_t b = unit / p.kv_heads, kh = unit % p.kv_heads;
    const int64_t S = p.kv_len, D = p.head_dim, Dv = p.value_dim;
    const auto krow = [&](int64_t s) { return k + p.KOffset(b, s, kh); };
    const auto vrow = [&](int64_t s) { return v + p.VOffset(b, s, kh); };
    PackAlongDim(krow, S, D, panels.kt.get(), panels.ld);
    if (panels.with_k) PackAlongKeys(krow, S, D, panels.k.get());
    if (panels.with_v) PackAlongKeys(vrow, S, Dv, panels.v.get());
    if (panels.with_vt) PackAlongDim(vrow, S, Dv, panels.vt.get(), panels.ld);
    if (!panels.with_v) return;  // the mean: the forward's dead rows only
    float* mean = panels.mean.get();
    for (int64_t d = 0; d < Dv; ++d) mean[d] = 0;
    for (int64_t s = 0; s < S; ++s) {
      const Bf* row = vrow(s);
      for (int64_t d = 0; d < Dv; ++d) mean[d] += St::Load(row[d]);
    }
    for (int64_t d = 0; d < Dv; ++d) mean[d] = S > 0 ? mean[d] / S : 0.0f;
  }

  // out[j * ld + s] = {row(s)[2j], row(s)[2j + 1]} (0 past `dim`): pairs
  // along the rows, [dim / 2][S], rows `ld` apart. An even dim makes each
  // pair a 4-byte element of the row: a transpose; an odd one is packed 16
  // keys at a time (each store part of one cache line).
  template <typename RowFn>
  TF_OPS_BF16 static void PackAlongDim(const RowFn& row, int64_t S,
                                       int64_t dim, Pair* out, int64_t ld) {
    if (dim % 2 == 0) {  // the rows' pairs are 4-byte elements: a transpose
      TransposeDwords<16>(row, S, dim / 2, out, ld);
      return;
    }
    const Bf* rows[16];
    for (int64_t s0 = 0; s0 < S; s0 += 16) {
      const int64_t n = std::min<int64_t>(16, S - s0);
      for (int64_t i = 0; i < n; ++i) rows[i] = row(s0 + i);
      for (int64_t d = 0; d < dim; d += 2) {
        Pair* o = out + d / 2 * ld + s0;
        if (d + 1 < dim) {
          for (int64_t i = 0; i < n; ++i) std::memcpy(o + i, rows[i] + d, 4);
        } else {
          for (int64_t i = 0; i < n; ++i) o[i] = MakePair(rows[i][d], 0);
        }
      }
    }
  }

  // out[j * dim + d] = {row(2j)[d], row(2j + 1)[d]} (0 past S): pairs along
  // the keys, [S / 2][dim].
  // Two rows interleaved 32 elements at a time.
  template <typename RowFn>
  TF_OPS_BF16 static void PackAlongKeys(const RowFn& row, int64_t S,
                                        int64_t dim, Pair* out) {
    alignas(64) static const uint16_t kLow[32] = {
        0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
        8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    const __m512i low = _mm512_load_si512(kLow);
    const __m512i high = _mm512_add_epi16(low, _mm512_set1_epi16(16));
    for (int64_t s = 0; s < S; s += 2) {
      const Bf* r0 = row(s);
      const Bf* r1 = s + 1 < S ? row(s + 1) : nullptr;
      Pair* o = out + s / 2 * dim;
      for (int64_t d = 0; d < dim; d += 32) {
        const int64_t n = dim - d;
        const __mmask32 m = n >= 32 ? ~__mmask32{0}
                                    : static_cast<__mmask32>((1u << n) - 1);
        const __m512i a = _mm512_maskz_loadu_epi16(m, r0 + d);
        const __m512i b = r1 != nullptr ? _mm512_maskz_loadu_epi16(m, r1 + d)
                                        : _mm512_setzero_si512();
        _mm512_mask_storeu_epi32(o + d, FirstLanes(n),
                                 _mm512_permutex2var_epi16(a, low, b));
        if (n > 16) {
          _mm512_mask_storeu_epi32(o + d + 16, FirstLanes(n - 16),
                                   _mm512_permutex2var_epi16(a, high, b));
        }
      }
    }
  }

  // The bfloat16 at p[0..16) (lanes m) as floats: each in a lane's high half.
  // Masked forms: the plain ones warn of an uninitialised value in GCC.
  TF_OPS_BF16 static __m512 Widen(__mmask16 m, const Bf* p) {
    const __m512i w = _mm512_maskz_cvtepu16_epi32(0xffff,
                                                  _mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w, 16));
  }

  // sum a[d] b[d] for d < n, in 16 lanes.
  TF_OPS_BF16 static float Dot(const Bf* a, const Bf* b, int64_t n) {
    __m512 sum = _mm512_setzero_ps();
    for (int64_t d = 0; d < n; d += 16) {
      const __mmask16 m = FirstLanes(n - d);
      const __m512 x = Widen(m, a + d), y = Widen(m, b + d);
      sum = _mm512_fmadd_ps(x, y, sum);
    }
    return Lanes<float>::Sum(sum);
  }

  // The logits of a tile, rows x cols at `s` (ld kKeyBlock), times the scale.
  static void Scale(float* s, int64_t rows, int64_t cols, float scale) {
    for (int64_t r = 0; r < rows; ++r) {
      float* row = s + r * kKeyBlock;
      for (int64_t c = 0; c < cols; ++c) row[c] *= scale;
    }
  }

  // As Engine::ForwardUnits.
  TF_OPS_BF16 void ForwardUnits(const Bf* q, const Bf* k, const Bf* v,
                                Bf* out, float* lse, int64_t begin,
                                int64_t end) const {
    const int64_t D = p.head_dim, Dv = p.value_dim, Dp = Even(D);
    const float scale = p.scale;
    PairPanels panels(p, false, true, false);
    auto qs = Buffer<Bf>(kQueryBlock * Dp);
    auto s = Buffer<float>(kQueryBlock * kKeyBlock);
    auto ps = Buffer<Bf>(kQueryBlock * kKeyBlock);
    auto acc = Buffer<float>(kQueryBlock * Dv);
    float m[kQueryBlock], l[kQueryBlock];
    bool kept_any[kQueryBlock] = {};
    const int64_t blocks = QueryBlocks();
    for (int64_t u = begin; u < end; ++u) {
      const int64_t qb = u % blocks, bn = u / blocks;
      const int64_t b = bn / p.heads, n = bn % p.heads;
      const int64_t kv = b * p.kv_heads + n / p.group();
      const int64_t t0 = qb * kQueryBlock;
      const int64_t t1 = std::min(p.q_len, t0 + kQueryBlock);
      const int64_t rows = t1 - t0;
      for (int64_t r = 0; r < rows; ++r) {
        const Bf* row = q + p.QOffset(b, t0 + r, n);
        for (int64_t d = 0; d < D; ++d) qs[r * Dp + d] = row[d];
        if (D & 1) qs[r * Dp + D] = 0;
        m[r] = NegInf<float>();
        l[r] = 0;
        kept_any[r] = false;
        for (int64_t d = 0; d < Dv; ++d) acc[r * Dv + d] = 0;
      }
      int64_t lo, hi;
      KeyRange(t0, t1, &lo, &hi);
      lo &= ~int64_t{1};
      Pack(panels, k, v, kv);
      for (int64_t s0 = lo; s0 < hi; s0 += kKeyBlock) {
        const int64_t cols = std::min(kKeyBlock, hi - s0);
        const TileWork w = Classify(b, n, t0, t1, s0, s0 + cols);
        if (w.skip) continue;  // every key masked: weights 0
        gemm16(rows, cols, Dp / 2, qs.get(), Dp, panels.kt.get() + s0,
               panels.ld, s.get(), kKeyBlock, false);
        if (w.finish) {  // else the scale is applied with the row max
          Scale(s.get(), rows, cols, scale);
          Finish(w, s.get(), nullptr, b, n, t0, rows, s0, cols, kept_any);
        } else {
          for (int64_t r = 0; r < rows; ++r) kept_any[r] = true;
        }
        for (int64_t r = 0; r < rows; ++r) {
          float* row = s.get() + r * kKeyBlock;
          Bf* prow = ps.get() + r * kKeyBlock;
          const float mx = w.finish ? MaxRow<false>(row, cols, 1.0f, m[r])
                                    : MaxRow<true>(row, cols, scale, m[r]);
          if (mx == NegInf<float>()) {  // nothing kept yet: weights 0
            for (int64_t c = 0; c < cols; ++c) row[c] = 0;
            RoundRow(row, cols, prow);
            continue;
          }
          const float alpha = m[r] == NegInf<float>() ? 0.0f : ExpC(m[r] - mx);
          for (int64_t c = 0; c < cols; ++c) row[c] = ExpC(row[c] - mx);
          l[r] = l[r] * alpha + SumAndRound(row, cols, prow);
          m[r] = mx;
          if (alpha != 1.0f) {
            float* a = acc.get() + r * Dv;
            for (int64_t d = 0; d < Dv; ++d) a[d] *= alpha;
          }
        }
        gemm16(rows, Dv, Even(cols) / 2, ps.get(), kKeyBlock,
               panels.v.get() + s0 / 2 * Dv, Dv, acc.get(), Dv, true);
      }
      const float* mean = panels.mean.get();
      for (int64_t r = 0; r < rows; ++r) {
        Bf* o = out + p.OutOffset(b, t0 + r, n);
        float* lse_row = lse + p.LseOffset(b, n, t0 + r);
        if (!kept_any[r]) {  // Keras's uniform weights: the values' mean
          for (int64_t d = 0; d < Dv; ++d) o[d] = St::Store(mean[d]);
          *lse_row = NegInf<float>();
          continue;
        }
        const float inv = 1.0f / l[r];
        for (int64_t d = 0; d < Dv; ++d) {
          o[d] = St::Store(acc[r * Dv + d] * inv);
        }
        *lse_row = m[r] + std::log(l[r]);
      }
    }
  }

  // As Engine::BackwardUnits.
  TF_OPS_BF16 void BackwardUnits(const Bf* q, const Bf* k, const Bf* v,
                                 const Bf* out, const Bf* dout,
                                 const float* lse, Bf* dq, Bf* dk, Bf* dv,
                                 float* dk_parts, float* dv_parts,
                                 float* bias_sums, const BackwardSplit& split,
                                 int64_t begin, int64_t end) const {
    const int64_t T = p.q_len, S = p.kv_len, D = p.head_dim,
                  Dv = p.value_dim;
    const int64_t Tp = Even(T), Dp = Even(D), Dvp = Even(Dv);
    const float scale = p.scale;
    const bool grouped = p.group() > 1;
    PairPanels panels(p, true, false, true);
    // Q and dO per head, row-major (A of Q K^T, dO V^T) and transposed (A of
    // Q^T dS, dO^T P), each with a zero pad where its pairs need one.
    auto q16 = Buffer<Bf>(T * Dp);
    auto qt16 = Buffer<Bf>(D * Tp);
    auto do16 = Buffer<Bf>(T * Dvp);
    auto dot16 = Buffer<Bf>(Dv * Tp);
    auto tpairs = Buffer<Pair>(Tp / 2 * std::max(D, Dv));
    auto delta = Buffer<float>(T);
    auto dqa = Buffer<float>(T * D);
    auto s = Buffer<float>(kQueryBlock * kKeyBlock);
    auto g = Buffer<float>(kQueryBlock * kKeyBlock);
    auto dp = Buffer<float>(kQueryBlock * kKeyBlock);
    auto p2 = Buffer<Pair>(kQueryBlock / 2 * kKeyBlock);
    auto ds2 = Buffer<Pair>(kQueryBlock / 2 * kKeyBlock);
    auto ds16 = Buffer<Bf>(kQueryBlock * kKeyBlock);
    auto dkt = Buffer<float>(D * kKeyBlock);   // dK^T of the key block
    auto dvt = Buffer<float>(Dv * kKeyBlock);  // dV^T of the key block
    auto dkb = Buffer<float>(kKeyBlock * D);   // the same as rows
    auto dvb = Buffer<float>(kKeyBlock * Dv);
    std::vector<float> dead_sum(Dv);
    bool kept_any[kQueryBlock] = {};
    // Unit u walks its heads w = u * inner + i, i < inner, in order.
    for (int64_t w = begin * split.inner; w < end * split.inner; ++w) {
      int64_t b, n;
      split.At(w / split.inner, w % split.inner, &b, &n);
      const int64_t kv = b * p.kv_heads + n / p.group();
      float* dk_part = grouped ? dk_parts + (b * p.heads + n) * S * D : nullptr;
      float* dv_part =
          grouped ? dv_parts + (b * p.heads + n) * S * Dv : nullptr;
      bool any_dead = false;
      std::fill(dead_sum.begin(), dead_sum.end(), 0.0f);
      for (int64_t t = 0; t < T; ++t) {
        const Bf* qrow = q + p.QOffset(b, t, n);
        for (int64_t d = 0; d < D; ++d) q16[t * Dp + d] = qrow[d];
        if (D & 1) q16[t * Dp + D] = 0;
        for (int64_t d = 0; d < D; ++d) dqa[t * D + d] = 0;
        const Bf* orow = out + p.OutOffset(b, t, n);
        const Bf* grow = dout + p.OutOffset(b, t, n);
        for (int64_t d = 0; d < Dv; ++d) do16[t * Dvp + d] = grow[d];
        if (Dv & 1) do16[t * Dvp + Dv] = 0;
        delta[t] = Dot(grow, orow, Dv);
        if (lse[p.LseOffset(b, n, t)] == NegInf<float>()) {
          any_dead = true;
          for (int64_t d = 0; d < Dv; ++d) dead_sum[d] += St::Load(grow[d]);
        }
      }
      // Q^T, dO^T with pairs along t: the pairs of rows, transposed.
      PackAlongKeys([&](int64_t t) { return q16.get() + t * Dp; }, T, D,
                    tpairs.get());
      TransposeDwords<16>([&](int64_t j) { return tpairs.get() + j * D; },
                          Tp / 2, D, qt16.get(), Tp / 2);
      PackAlongKeys([&](int64_t t) { return do16.get() + t * Dvp; }, T, Dv,
                    tpairs.get());
      TransposeDwords<16>([&](int64_t j) { return tpairs.get() + j * Dv; },
                          Tp / 2, Dv, dot16.get(), Tp / 2);
      const float dead_share = any_dead ? 1.0f / static_cast<float>(S) : 0.0f;
      Pack(panels, k, v, kv);
      for (int64_t s0 = 0; s0 < S; s0 += kKeyBlock) {
        const int64_t cols = std::min(kKeyBlock, S - s0);
        for (int64_t d = 0; d < D; ++d) {
          std::fill(dkt.get() + d * kKeyBlock, dkt.get() + d * kKeyBlock + cols,
                    0.0f);
        }
        for (int64_t d = 0; d < Dv; ++d) {
          std::fill(dvt.get() + d * kKeyBlock, dvt.get() + d * kKeyBlock + cols,
                    dead_sum[d] * dead_share);
        }
        int64_t lo, hi;
        QueryRange(s0, s0 + cols, &lo, &hi);
        lo &= ~int64_t{1};
        for (int64_t t0 = lo; t0 < hi; t0 += kQueryBlock) {
          const int64_t rows = std::min(kQueryBlock, hi - t0);
          const TileWork w = Classify(b, n, t0, t0 + rows, s0, s0 + cols);
          if (w.skip) continue;  // weights 0: nothing reaches any gradient
          gemm16(rows, cols, Dp / 2, q16.get() + t0 * Dp, Dp,
                 panels.kt.get() + s0, panels.ld, s.get(), kKeyBlock, false);
          float exp_scale = scale;  // the logits' scale, unless applied here
          if (w.finish) {
            Scale(s.get(), rows, cols, scale);
            Finish(w, s.get(), g.get(), b, n, t0, rows, s0, cols, kept_any);
            exp_scale = 1.0f;
          }
          // P = exp(logit - lse); a dead row's weights reach only dv
          // (dead_sum), so they are 0 here.
          for (int64_t r = 0; r < rows; ++r) {
            const float lr = lse[p.LseOffset(b, n, t0 + r)];
            float* row = s.get() + r * kKeyBlock;
            if (lr == NegInf<float>()) {
              for (int64_t c = 0; c < cols; ++c) row[c] = 0;
            } else {
              for (int64_t c = 0; c < cols; ++c) {
                row[c] = ExpC(row[c] * exp_scale - lr);
              }
            }
          }
          for (int64_t r = 0; r < rows; r += 2) {
            const float* next =
                r + 1 < rows ? s.get() + (r + 1) * kKeyBlock : nullptr;
            RoundPairRows(s.get() + r * kKeyBlock, next, cols,
                          p2.get() + r / 2 * kKeyBlock);
          }
          // dV^T += dO^T P
          gemm16(Dv, cols, Even(rows) / 2, dot16.get() + t0, Tp, p2.get(),
                 kKeyBlock, dvt.get(), kKeyBlock, true);
          // dP = dO V^T; dS = P (dP - delta) (times the cap's derivative)
          gemm16(rows, cols, Dvp / 2, do16.get() + t0 * Dvp, Dvp,
                 panels.vt.get() + s0, panels.ld, dp.get(), kKeyBlock,
                 false);
          for (int64_t r = 0; r < rows; ++r) {
            float* row = s.get() + r * kKeyBlock;
            const float* dprow = dp.get() + r * kKeyBlock;
            const float dl = delta[t0 + r];
            for (int64_t c = 0; c < cols; ++c) {
              row[c] = row[c] * (dprow[c] - dl);
            }
            if (p.softcap > 0) {  // then every tile is finished
              const float* grow = g.get() + r * kKeyBlock;
              for (int64_t c = 0; c < cols; ++c) row[c] *= grow[c];
            }
          }
          if (bias_sums != nullptr) {  // dS before it is rounded
            AddBiasGrad(p, s.get(), b, n, t0, rows, s0, cols, bias_sums);
          }
          // dS rounded once, as pairs of rows (B of Q^T dS) and as rows (A
          // of dS K).
          for (int64_t r = 0; r < rows; r += 2) {
            const bool pair = r + 1 < rows;
            RoundPairRows(s.get() + r * kKeyBlock,
                          pair ? s.get() + (r + 1) * kKeyBlock : nullptr, cols,
                          ds2.get() + r / 2 * kKeyBlock,
                          ds16.get() + r * kKeyBlock,
                          pair ? ds16.get() + (r + 1) * kKeyBlock : nullptr);
          }
          // dQ += dS K; dK^T += Q^T dS (the scale applied when stored)
          gemm16(rows, D, Even(cols) / 2, ds16.get(), kKeyBlock,
                 panels.k.get() + s0 / 2 * D, D, dqa.get() + t0 * D, D, true);
          gemm16(D, cols, Even(rows) / 2, qt16.get() + t0, Tp, ds2.get(),
                 kKeyBlock, dkt.get(), kKeyBlock, true);
        }
        // dK, dV rows of the block from dK^T, dV^T.
        TransposeDwords<16>(
            [&](int64_t d) { return dkt.get() + d * kKeyBlock; }, D, cols,
            dkb.get(), D);
        TransposeDwords<16>(
            [&](int64_t d) { return dvt.get() + d * kKeyBlock; }, Dv, cols,
            dvb.get(), Dv);
        const int64_t kh = n / p.group();
        for (int64_t c = 0; c < cols; ++c) {
          const float* kb = dkb.get() + c * D;
          const float* vb = dvb.get() + c * Dv;
          if (grouped) {
            float* kpart = dk_part + (s0 + c) * D;
            for (int64_t d = 0; d < D; ++d) kpart[d] = scale * kb[d];
            std::copy(vb, vb + Dv, dv_part + (s0 + c) * Dv);
          } else {
            Bf* krow = dk + p.KOffset(b, s0 + c, kh);
            Bf* vrow = dv + p.VOffset(b, s0 + c, kh);
            for (int64_t d = 0; d < D; ++d) krow[d] = St::Store(scale * kb[d]);
            for (int64_t d = 0; d < Dv; ++d) vrow[d] = St::Store(vb[d]);
          }
        }
      }
      for (int64_t t = 0; t < T; ++t) {
        Bf* row = dq + p.QOffset(b, t, n);
        for (int64_t d = 0; d < D; ++d) {
          row[d] = St::Store(scale * dqa[t * D + d]);
        }
      }
    }
  }
};

#undef TF_OPS_BF16
#endif  // defined(__x86_64__)

// The calls each instruction-set variant runs, with their buffers.
struct ForwardCall {
  Dtype dtype;
  const AttentionParams* p;
  const void *q, *k, *v;
  void* out;
  void* lse;
};

struct BackwardCall {
  Dtype dtype;
  const AttentionParams* p;
  const void *q, *k, *v, *out, *dout, *lse;
  void *dq, *dk, *dv;
  void *dk_part, *dv_part;
  void* bias_sums;  // null: no bias gradient in this pass
  BackwardSplit split;
};

struct BiasGradCall {
  Dtype dtype;
  const AttentionParams* p;
  const void *q, *k, *v, *out, *dout, *lse;
  void* sums;
};

template <typename C>
GemmFn<C> Pick(GemmFn<float> f, GemmFn<double> d) {
  if constexpr (std::is_same_v<C, float>) {
    return f;
  } else {
    return d;
  }
}

template <typename St>
void RunForward(St, const ForwardCall& c, int64_t begin, int64_t end,
                GemmFn<float> gf, GemmFn<double> gd) {
  using E = Engine<St>;
  using C = typename E::C;
  using Stored = typename St::Stored;
  E{*c.p, Pick<C>(gf, gd)}.ForwardUnits(
      static_cast<const Stored*>(c.q), static_cast<const Stored*>(c.k),
      static_cast<const Stored*>(c.v), static_cast<Stored*>(c.out),
      static_cast<C*>(c.lse), begin, end);
}

template <typename St>
void RunBackward(St, const BackwardCall& c, int64_t begin, int64_t end,
                 GemmFn<float> gf, GemmFn<double> gd) {
  using E = Engine<St>;
  using C = typename E::C;
  using Stored = typename St::Stored;
  E{*c.p, Pick<C>(gf, gd)}.BackwardUnits(
      static_cast<const Stored*>(c.q), static_cast<const Stored*>(c.k),
      static_cast<const Stored*>(c.v), static_cast<const Stored*>(c.out),
      static_cast<const Stored*>(c.dout), static_cast<const C*>(c.lse),
      static_cast<Stored*>(c.dq), static_cast<Stored*>(c.dk),
      static_cast<Stored*>(c.dv), static_cast<C*>(c.dk_part),
      static_cast<C*>(c.dv_part), static_cast<C*>(c.bias_sums), c.split,
      begin, end);
}

template <typename St>
void RunBiasGrad(St, const BiasGradCall& c, int64_t begin, int64_t end,
                 GemmFn<float> gf, GemmFn<double> gd) {
  using E = Engine<St>;
  using C = typename E::C;
  using Stored = typename St::Stored;
  E{*c.p, Pick<C>(gf, gd)}.BiasGradUnits(
      static_cast<const Stored*>(c.q), static_cast<const Stored*>(c.k),
      static_cast<const Stored*>(c.v), static_cast<const Stored*>(c.out),
      static_cast<const Stored*>(c.dout), static_cast<const C*>(c.lse),
      static_cast<C*>(c.sums), begin, end);
}

constexpr int VectorBytes(std::string_view isa) {
  return isa == "Avx512" ? 64 : 32;
}

#define TF_OPS_ATTENTION_GEMM(Name, C, Suffix, TARGET)                      \
  TF_OPS_ISA_ENTRY(TARGET) void Name##Suffix(               \
      int64_t M, int64_t N, int64_t K, const C* A, int64_t lda, int64_t ak,  \
      const C* B, int64_t ldb, C* Cm, int64_t ldc, bool accumulate) {        \
    Gemm<C, VectorBytes(#Suffix)>::Run(M, N, K, A, lda, ak, B, ldb, Cm, ldc, \
                                       accumulate);                          \
  }

#define TF_OPS_ISA_VARIANT(Suffix, TARGET, F16C)                       \
  TF_OPS_ATTENTION_GEMM(GemmFloat, float, Suffix, TARGET)                    \
  TF_OPS_ATTENTION_GEMM(GemmDouble, double, Suffix, TARGET)                  \
  TF_OPS_ISA_ENTRY(TARGET) void Forward##Suffix(            \
      const ForwardCall& c, int64_t begin, int64_t end) {                    \
    cpu_storage::WithStorage(c.dtype, [&](auto st) {                         \
      RunForward(st, c, begin, end, &GemmFloat##Suffix, &GemmDouble##Suffix); \
    });                                                                      \
  }                                                                          \
  TF_OPS_ISA_ENTRY(TARGET) void Backward##Suffix(           \
      const BackwardCall& c, int64_t begin, int64_t end) {                   \
    cpu_storage::WithStorage(c.dtype, [&](auto st) {                         \
      RunBackward(st, c, begin, end, &GemmFloat##Suffix,                     \
                  &GemmDouble##Suffix);                                      \
    });                                                                      \
  }                                                                          \
  TF_OPS_ISA_ENTRY(TARGET) void BiasGrad##Suffix(                            \
      const BiasGradCall& c, int64_t begin, int64_t end) {                   \
    cpu_storage::WithStorage(c.dtype, [&](auto st) {                         \
      RunBiasGrad(st, c, begin, end, &GemmFloat##Suffix,                     \
                  &GemmDouble##Suffix);                                      \
    });                                                                      \
  }

TF_OPS_FOR_EACH_CPU_ISA(TF_OPS_ISA_VARIANT)
#undef TF_OPS_ISA_VARIANT
#undef TF_OPS_ATTENTION_GEMM

#if defined(__x86_64__) && TF_OPS_AVX512_VARIANTS
TF_OPS_ISA_ENTRY(TF_OPS_TARGET_AVX512_BF16) void GemmBf16Avx512(
    int64_t M, int64_t N, int64_t K2, const Bf* A, int64_t lda, const Pair* B,
    int64_t ldb, float* Cm, int64_t ldc, bool accumulate) {
  GemmBf16::Run(M, N, K2, A, lda, B, ldb, Cm, ldc, accumulate);
}

TF_OPS_ISA_ENTRY(TF_OPS_TARGET_AVX512_BF16) void ForwardBf16(
    const ForwardCall& c, int64_t begin, int64_t end) {
  Bf16Engine{{*c.p}, &GemmBf16Avx512}.ForwardUnits(
      static_cast<const Bf*>(c.q), static_cast<const Bf*>(c.k),
      static_cast<const Bf*>(c.v), static_cast<Bf*>(c.out),
      static_cast<float*>(c.lse), begin, end);
}

TF_OPS_ISA_ENTRY(TF_OPS_TARGET_AVX512_BF16) void BackwardBf16(
    const BackwardCall& c, int64_t begin, int64_t end) {
  Bf16Engine{{*c.p}, &GemmBf16Avx512}.BackwardUnits(
      static_cast<const Bf*>(c.q), static_cast<const Bf*>(c.k),
      static_cast<const Bf*>(c.v), static_cast<const Bf*>(c.out),
      static_cast<const Bf*>(c.dout), static_cast<const float*>(c.lse),
      static_cast<Bf*>(c.dq), static_cast<Bf*>(c.dk), static_cast<Bf*>(c.dv),
      static_cast<float*>(c.dk_part), static_cast<float*>(c.dv_part),
      static_cast<float*>(c.bias_sums), c.split, begin, end);
}
#endif

// bfloat16 with AVX512-BF16: the bfloat16-product engine; otherwise the
// float engine of the active instruction set.
void Forward(const ForwardCall& c, int64_t begin, int64_t end) {
#if defined(__x86_64__) && TF_OPS_AVX512_VARIANTS
  if (c.dtype == Dtype::kBFloat16 && ActiveAvx512Bf16()) {
    return ForwardBf16(c, begin, end);
  }
#endif
  TF_OPS_CPU_ISA_DISPATCH(Forward, c, begin, end)
}

void Backward(const BackwardCall& c, int64_t begin, int64_t end) {
#if defined(__x86_64__) && TF_OPS_AVX512_VARIANTS
  if (c.dtype == Dtype::kBFloat16 && ActiveAvx512Bf16()) {
    return BackwardBf16(c, begin, end);
  }
#endif
  TF_OPS_CPU_ISA_DISPATCH(Backward, c, begin, end)
}

// Every dtype on the engine of the active instruction set (bfloat16 widened
// to float): the bias gradient is a pass of its own, not the backward's.
void BiasGrad(const BiasGradCall& c, int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(BiasGrad, c, begin, end)
}

// Rough cycles of one unit of work, for the pool's shard sizes.
int64_t TileCost(const AttentionParams& p, int64_t rows) {
  return std::max<int64_t>(
      1000, rows * p.kv_len * (p.head_dim + p.value_dim) / 8);
}

template <typename C>
void ForwardIn(Dtype dtype, const AttentionParams& p, const void* q,
               const void* k, const void* v, void* out, void* lse,
               const ParallelFor& parallel_for) {
  const int64_t blocks = (p.q_len + kQueryBlock - 1) / kQueryBlock;
  ForwardCall call{dtype, &p, q, k, v, out, lse};
  parallel_for(p.batch * p.heads * blocks,
               TileCost(p, std::min(kQueryBlock, p.q_len)),
               [&](int64_t begin, int64_t end) { Forward(call, begin, end); });
}

// A bias gradient summed inside the backward needs enough units for the
// threads (BackwardSplit by the bias); one shared by most heads (a [T, S]
// bias, say) gets the separate pass instead (BiasGradUnits).
constexpr int64_t kMinBiasUnits = 4;

bool BiasGradInBackward(const AttentionParams& p) {
  const BackwardSplit split(p, true);
  return split.units >= std::min(p.batch * p.heads, kMinBiasUnits);
}

// Scratch, in C elements: the heads' dk, dv partials where a group shares
// key/value heads; then, for half and bfloat16, the bias gradient's float sums
// (float and double sum in dbias itself).
template <typename C>
int64_t PartialElements(const AttentionParams& p) {
  if (p.group() == 1) return 0;
  return p.batch * p.heads * p.kv_len * (p.head_dim + p.value_dim);
}

bool SumsInPlace(Dtype dtype) {
  return dtype == Dtype::kFloat || dtype == Dtype::kDouble;
}

template <typename C>
void BackwardIn(Dtype dtype, const AttentionParams& p, const void* q,
                const void* k, const void* v, const void* out,
                const void* dout, const void* lse, void* dq, void* dk,
                void* dv, void* dbias, int64_t bias_elements, void* scratch,
                const ParallelFor& parallel_for) {
  C* dk_part = nullptr;
  C* dv_part = nullptr;
  if (p.group() > 1) {
    dk_part = static_cast<C*>(scratch);
    dv_part = dk_part + p.batch * p.heads * p.kv_len * p.head_dim;
  }
  C* sums = nullptr;
  if (dbias != nullptr) {
    sums = SumsInPlace(dtype)
               ? static_cast<C*>(dbias)
               : static_cast<C*>(scratch) + PartialElements<C>(p);
    std::fill(sums, sums + bias_elements, C(0));
  }
  const bool has_bias = sums != nullptr && p.bias.data != nullptr;
  const bool in_backward = has_bias && BiasGradInBackward(p);
  BackwardCall call{dtype, &p, q, k, v, out, dout, lse, dq, dk, dv,
                    dk_part, dv_part, in_backward ? sums : nullptr,
                    BackwardSplit(p, in_backward)};
  parallel_for(call.split.units,
               3 * call.split.inner * TileCost(p, p.q_len),
               [&](int64_t begin, int64_t end) { Backward(call, begin, end); });
  if (p.group() > 1) {
    parallel_for(p.batch * p.kv_heads * p.kv_len,
                 p.group() * (p.head_dim + p.value_dim) * 2,
                 [&](int64_t begin, int64_t end) {
                   cpu_storage::WithStorage(dtype, [&](auto st) {
                     using St = decltype(st);
                     using Stored = typename St::Stored;
                     if constexpr (std::is_same_v<typename Engine<St>::C, C>) {
                       Engine<St>{p}.ReduceGroups(
                           dk_part, dv_part, static_cast<Stored*>(dk),
                           static_cast<Stored*>(dv), begin, end);
                     }
                   });
                 });
  }
  if (has_bias && !in_backward) {
    const BackwardSplit split(p, true);
    BiasGradCall bias_call{dtype, &p, q, k, v, out, dout, lse, sums};
    parallel_for(split.units, 2 * split.inner * TileCost(p, p.q_len),
                 [&](int64_t begin, int64_t end) {
                   BiasGrad(bias_call, begin, end);
                 });
  }
  if (dbias == nullptr || SumsInPlace(dtype)) return;
  cpu_storage::WithStorage(dtype, [&](auto st) {
    using St = decltype(st);
    using Stored = typename St::Stored;
    if constexpr (std::is_same_v<typename Engine<St>::C, C>) {
      Stored* d = static_cast<Stored*>(dbias);
      for (int64_t i = 0; i < bias_elements; ++i) d[i] = St::Store(sums[i]);
    }
  });
}

}  // namespace

void CpuAttentionForward(Dtype dtype, const AttentionParams& p, const void* q,
                         const void* k, const void* v, void* out, void* lse,
                         const ParallelFor& parallel_for) {
  if (p.batch * p.heads * p.q_len == 0) return;
  if (dtype == Dtype::kDouble) {
    ForwardIn<double>(dtype, p, q, k, v, out, lse, parallel_for);
  } else {
    ForwardIn<float>(dtype, p, q, k, v, out, lse, parallel_for);
  }
}

int64_t CpuAttentionBackwardScratchBytes(Dtype dtype,
                                         const AttentionParams& p,
                                         int64_t bias_elements) {
  const int64_t sums = SumsInPlace(dtype) ? 0 : bias_elements;
  if (dtype == Dtype::kDouble) {
    return (PartialElements<double>(p) + sums) * sizeof(double);
  }
  return (PartialElements<float>(p) + sums) * sizeof(float);
}

void CpuAttentionBackward(Dtype dtype, const AttentionParams& p, const void* q,
                          const void* k, const void* v, const void* out,
                          const void* dout, const void* lse, void* dq,
                          void* dk, void* dv, void* dbias,
                          int64_t bias_elements, void* scratch,
                          const ParallelFor& parallel_for) {
  if (p.batch * p.heads == 0) {
    if (dbias != nullptr && bias_elements > 0) {  // a bias of size 1 somewhere
      cpu_storage::WithStorage(dtype, [&](auto st) {
        using Stored = typename decltype(st)::Stored;
        std::fill_n(static_cast<Stored*>(dbias), bias_elements, Stored(0));
      });
    }
    return;
  }
  if (dtype == Dtype::kDouble) {
    BackwardIn<double>(dtype, p, q, k, v, out, dout, lse, dq, dk, dv, dbias,
                       bias_elements, scratch, parallel_for);
  } else {
    BackwardIn<float>(dtype, p, q, k, v, out, dout, lse, dq, dk, dv, dbias,
                      bias_elements, scratch, parallel_for);
  }
}

}  // namespace attention
}  // namespace tf_ops
