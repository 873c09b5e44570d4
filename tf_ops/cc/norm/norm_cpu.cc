// The normalisation ops' CPU loops (norm_cpu.h), compiled once per
// instruction set as fused_cpu.cc's: each variant is a function with GCC's
// `target` and `flatten` attributes, so that norm_math.h's formulas are
// inlined and vectorised for that target. Row sums run in kLanes independent
// lanes (which vectorise without reassociation) added in a fixed order.
//
// Memory is the cost (a row's arithmetic is a few vector instructions per
// element), so each row comes from memory once: its passes after the first
// read it from the L1/L2 cache, and the last pass over a row (or a group of
// rows) prefetches the next, so that the next row's first pass finds it in
// cache while this one computes. A pass writes an element only after its
// last read of the inputs an output may share (the kernels hand an input's
// buffer to an output when TensorFlow allows).

#include "tf_ops/cc/norm/norm_cpu.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tf_ops/cc/core/cpu_isa.h"
#include "tf_ops/cc/core/cpu_storage.h"
#include "tf_ops/cc/norm/norm_math.h"

namespace tf_ops {
namespace {

using cpu_storage::WithStorage;

constexpr int kLanes = 16;
// Backward tiles: at least this many elements each, and at most
// kMaxRowTiles of them (their partial sums stay a few MB at 16384 columns).
constexpr int64_t kTileElements = int64_t{1} << 17;
constexpr int64_t kMaxRowTiles = 32;
constexpr int64_t kCacheLine = 64;

template <typename S>
using Compute = decltype(S::Load(typename S::Stored()));

// lanes[k] += f(j) for j in [begin, end), j - begin = k mod kLanes.
template <typename C, typename F>
inline void LaneAdd(C* lanes, int64_t begin, int64_t end, const F& f) {
  int64_t j = begin;
  for (; j + kLanes <= end; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) lanes[k] += f(j + k);
  }
  for (int k = 0; j < end; ++j, ++k) lanes[k] += f(j);
}

template <typename C>
inline C LaneTotal(const C* lanes) {
  C sum = 0;
  for (int k = 0; k < kLanes; ++k) sum += lanes[k];
  return sum;
}

// The sum of f(j) for j in [0, n), in kLanes lanes then in lane order.
template <typename C, typename F>
inline C LaneSum(int64_t n, const F& f) {
  C lanes[kLanes] = {};
  LaneAdd(lanes, 0, n, f);
  return LaneTotal(lanes);
}

// The sums of fa(j) and fb(j), as LaneSum's, in one sweep of the row: a
// block of it for each, while the block is in the L1 cache. (One loop with
// both sums leads GCC to vectorise across j, with strided loads.)
template <typename C>
struct Pair {
  C a, b;
};
template <typename C, typename FA, typename FB>
inline Pair<C> LaneSum2(int64_t n, const FA& fa, const FB& fb) {
  constexpr int64_t kBlock = 32 * kLanes;
  C a[kLanes] = {}, b[kLanes] = {};
  for (int64_t j = 0; j < n; j += kBlock) {
    const int64_t end = std::min(n, j + kBlock);
    LaneAdd(a, j, end, fa);
    LaneAdd(b, j, end, fb);
  }
  return {LaneTotal(a), LaneTotal(b)};
}

// body(j) for j in [0, n), kChunkBytes of `Stored` at a time; before each
// chunk, prefetch(j) for the index j of each cache line in it asks for the
// same lines of the rows the next pass will read. (The chunk's bound is not
// a constant, so that GCC vectorises its loop rather than unrolling it.)
constexpr int64_t kChunkBytes = 16 * kCacheLine;

template <typename Stored, typename Prefetch, typename Body>
inline void ByChunk(int64_t n, const Prefetch& prefetch, const Body& body) {
  constexpr int64_t kChunk = kChunkBytes / sizeof(Stored);
  constexpr int64_t kLine = kCacheLine / sizeof(Stored);
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t j1 = std::min(n, j0 + kChunk);
    for (int64_t j = j0; j < j1; j += kLine) prefetch(j);
#pragma GCC ivdep
    for (int64_t j = j0; j < j1; ++j) body(j);
  }
}

template <typename S>
void ForwardRows(const NormShape& shape, double epsilon, const void* x_raw,
                 const void* r_raw, const void* gamma_raw,
                 const void* beta_raw, void* h_raw, void* y_raw,
                 void* mean_raw, void* rstd_raw, int64_t begin, int64_t end) {
  using Stored = typename S::Stored;
  using C = Compute<S>;
  const int64_t n = shape.cols;
  const bool centered = shape.centered;
  const C eps = static_cast<C>(epsilon), count = static_cast<C>(n);
  const C* gamma = static_cast<const C*>(gamma_raw);
  const C* beta = static_cast<const C*>(beta_raw);
  C* mean_out = static_cast<C*>(mean_raw);
  C* rstd_out = static_cast<C*>(rstd_raw);
  const Stored* x_all = static_cast<const Stored*>(x_raw);
  const Stored* r_all = static_cast<const Stored*>(r_raw);
  for (int64_t row = begin; row < end; ++row) {
    const int64_t at = row * n;
    const Stored* src = x_all + at;
    Stored* y = static_cast<Stored*>(y_raw) + at;
    // The next row's inputs, fetched during this row's last pass (this
    // row's again after the shard's last: a prefetch of cached lines).
    const int64_t next_at = row + 1 < end ? at + n : at;
    const Stored* next_x = x_all + next_at;
    const Stored* next_r = r_all == nullptr ? nullptr : r_all + next_at;
    // The first pass sums the row: for layer norm its elements (the mean),
    // for RMS norm their squared deviations from 0 (the variance's sum). With
    // a residual it also stores h = x + r, rounded (the row normalised is the
    // h returned), and sums h as it stores it.
    const auto first_pass = [&](const auto& term) -> C {
      if (r_all == nullptr) {
        return LaneSum<C>(n, [&](int64_t j) { return term(S::Load(src[j])); });
      }
      const Stored* r = r_all + at;
      Stored* h = static_cast<Stored*>(h_raw) + at;
      return LaneSum<C>(n, [&](int64_t j) {
        h[j] = S::Store(S::Load(src[j]) + S::Load(r[j]));
        return term(S::Load(h[j]));
      });
    };
    C mean = 0, sum_sq = 0;
    if (centered) {
      const C sum = first_pass([](C v) { return v; });
      mean = norm::RowMean(centered, sum, count);
    } else {
      sum_sq = first_pass([](C v) {
        const C d = norm::Deviation(v, C(0));
        return d * d;
      });
    }
    if (r_all != nullptr) src = static_cast<const Stored*>(h_raw) + at;
    if (centered) {  // the second pass: squared deviations from the mean
      sum_sq = LaneSum<C>(n, [&](int64_t j) {
        const C d = norm::Deviation(S::Load(src[j]), mean);
        return d * d;
      });
    }
    const C rstd = norm::RowRstd(sum_sq, count, eps);
    const auto prefetch = [&](int64_t j) {
      __builtin_prefetch(next_x + j);
      if (r_all != nullptr) __builtin_prefetch(next_r + j);
    };
    if (beta != nullptr) {
      ByChunk<Stored>(n, prefetch, [&](int64_t j) {
        y[j] = S::Store(norm::NormOutput(
            norm::Normalized(S::Load(src[j]), mean, rstd), gamma[j], beta[j]));
      });
    } else {
      ByChunk<Stored>(n, prefetch, [&](int64_t j) {
        y[j] = S::Store(norm::NormOutput(
            norm::Normalized(S::Load(src[j]), mean, rstd), gamma[j], C(0)));
      });
    }
    if (mean_out != nullptr) mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// One row of the backward (norm_cpu.h's tiles): its two sums in one pass,
// then the column pass, which writes dx and adds g * xhat and g into the
// tile's partial sums (in the compute type) while it prefetches the next
// row. (Grouping rows in one column pass, to touch the partial sums once per
// group, measured slower: more streams at once, 4K-aliased loads and stores.)
template <typename S, bool kCentered, bool kDh>
inline void GradRow(int64_t n, const typename S::Stored* dy,
                    const typename S::Stored* x, const typename S::Stored* dh,
                    typename S::Stored* dx, const Compute<S>* gamma,
                    Compute<S> mean, Compute<S> rstd, int64_t next,
                    Compute<S>* acc_gamma, Compute<S>* acc_beta) {
  using Stored = typename S::Stored;
  using C = Compute<S>;
  const C count = static_cast<C>(n);
  C sum_gg = 0, sum_gg_xhat = 0;
  if (kCentered) {
    const Pair<C> sums = LaneSum2<C>(
        n, [&](int64_t j) { return S::Load(dy[j]) * gamma[j]; },
        [&](int64_t j) {
          return S::Load(dy[j]) * gamma[j] *
                 norm::Normalized(S::Load(x[j]), mean, rstd);
        });
    sum_gg = sums.a;
    sum_gg_xhat = sums.b;
  } else {
    sum_gg_xhat = LaneSum<C>(n, [&](int64_t j) {
      return S::Load(dy[j]) * gamma[j] *
             norm::Normalized(S::Load(x[j]), mean, rstd);
    });
  }
  const norm::GradRowConstants<C> c =
      norm::GradConstants(kCentered, sum_gg, sum_gg_xhat, count);
  const auto prefetch = [&](int64_t j) {
    __builtin_prefetch(dy + next + j);
    __builtin_prefetch(x + next + j);
    if (kDh) __builtin_prefetch(dh + next + j);
  };
  ByChunk<Stored>(n, prefetch, [&](int64_t j) {
    // Every load of the column before any store: dx and the two partial
    // sums a multiple of 4 KiB from what is read would otherwise stall the
    // loads on the stores before them (4K aliasing).
    const C acc_g = acc_gamma[j], acc_b = kCentered ? acc_beta[j] : C(0);
    const C gv = S::Load(dy[j]);
    const C xhat = norm::Normalized(S::Load(x[j]), mean, rstd);
    C d = norm::NormInputGrad(gv * gamma[j], xhat, rstd, c);
    if (kDh) d += S::Load(dh[j]);
    dx[j] = S::Store(d);
    acc_gamma[j] = acc_g + gv * xhat;
    if (kCentered) acc_beta[j] = acc_b + gv;  // RMS norm has no beta
  });
}

template <typename S, bool kCentered, bool kDh>
void GradTiles(const NormGradTiling& t, const void* dy_raw, const void* x_raw,
               const void* gamma_raw, const void* mean_raw,
               const void* rstd_raw, const void* dh_raw, void* dx_raw,
               void* partials_raw, int64_t tile_begin, int64_t tile_end) {
  using Stored = typename S::Stored;
  using C = Compute<S>;
  const int64_t n = t.shape.cols;
  const C* gamma = static_cast<const C*>(gamma_raw);
  const C* mean_in = static_cast<const C*>(mean_raw);
  const C* rstd_in = static_cast<const C*>(rstd_raw);
  C* partials = static_cast<C*>(partials_raw);
  // The shard's last row prefetches itself (cached lines).
  const int64_t shard_end = std::min(t.shape.rows, tile_end * t.row_block);
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    C* acc_gamma = partials + tile * 2 * n;
    C* acc_beta = acc_gamma + n;
    std::fill(acc_gamma, acc_gamma + 2 * n, C(0));
    const int64_t r0 = tile * t.row_block;
    const int64_t r1 = std::min(t.shape.rows, r0 + t.row_block);
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t at = row * n;
      GradRow<S, kCentered, kDh>(
          n, static_cast<const Stored*>(dy_raw) + at,
          static_cast<const Stored*>(x_raw) + at,
          kDh ? static_cast<const Stored*>(dh_raw) + at : nullptr,
          static_cast<Stored*>(dx_raw) + at, gamma,
          kCentered ? mean_in[row] : C(0), rstd_in[row],
          row + 1 < shard_end ? n : 0, acc_gamma, acc_beta);
    }
  }
}

void ForwardAny(Dtype dtype, const NormShape& shape, double epsilon,
                const void* x, const void* r, const void* gamma,
                const void* beta, void* h, void* y, void* mean, void* rstd,
                int64_t begin, int64_t end) {
  WithStorage(dtype, [&](auto s) {
    ForwardRows<decltype(s)>(shape, epsilon, x, r, gamma, beta, h, y, mean,
                             rstd, begin, end);
  });
}

void GradAny(Dtype dtype, const NormGradTiling& t, const void* dy,
             const void* x, const void* gamma, const void* mean,
             const void* rstd, const void* dh, void* dx, void* partials,
             int64_t tile_begin, int64_t tile_end) {
  WithStorage(dtype, [&](auto s) {
    using S = decltype(s);
    const auto run = [&](auto centered, auto with_dh) {
      GradTiles<S, decltype(centered)::value, decltype(with_dh)::value>(
          t, dy, x, gamma, mean, rstd, dh, dx, partials, tile_begin, tile_end);
    };
    using Yes = std::true_type;
    using No = std::false_type;
    if (t.shape.centered) {
      dh != nullptr ? run(Yes(), Yes()) : run(Yes(), No());
    } else {
      dh != nullptr ? run(No(), Yes()) : run(No(), No());
    }
  });
}

#define TF_OPS_ISA_VARIANT(Suffix, TARGET, F16C)                         \
  TF_OPS_ISA_ENTRY(TARGET) void NormForward##Suffix(        \
      Dtype dtype, const NormShape& shape, double epsilon, const void* x,    \
      const void* r, const void* gamma, const void* beta, void* h, void* y,  \
      void* mean, void* rstd, int64_t begin, int64_t end) {                  \
    ForwardAny(dtype, shape, epsilon, x, r, gamma, beta, h, y, mean, rstd,   \
               begin, end);                                                  \
  }                                                                          \
  TF_OPS_ISA_ENTRY(TARGET) void NormGrad##Suffix(           \
      Dtype dtype, const NormGradTiling& t, const void* dy, const void* x,   \
      const void* gamma, const void* mean, const void* rstd, const void* dh, \
      void* dx, void* partials, int64_t tile_begin, int64_t tile_end) {      \
    GradAny(dtype, t, dy, x, gamma, mean, rstd, dh, dx, partials,            \
            tile_begin, tile_end);                                           \
  }

TF_OPS_FOR_EACH_CPU_ISA(TF_OPS_ISA_VARIANT)
#undef TF_OPS_ISA_VARIANT

}  // namespace

NormGradTiling MakeNormGradTiling(const NormShape& shape) {
  NormGradTiling t;
  t.shape = shape;
  const int64_t cols = std::max<int64_t>(1, shape.cols);
  const int64_t by_size = (kTileElements + cols - 1) / cols;
  const int64_t by_count = (shape.rows + kMaxRowTiles - 1) / kMaxRowTiles;
  t.row_block = std::max<int64_t>(1, std::max(by_size, by_count));
  t.row_tiles = (shape.rows + t.row_block - 1) / t.row_block;
  return t;
}

int64_t NormForwardCyclesPerRow(Dtype dtype, const NormShape& shape) {
  // About a cycle per byte a row moves (read and written), plus the row's
  // fixed costs.
  const int64_t bytes = dtype == Dtype::kDouble  ? 8
                        : dtype == Dtype::kFloat ? 4
                                                 : 2;
  return 2 * bytes * shape.cols + 40;
}

int64_t NormGradCyclesPerTile(Dtype dtype, const NormGradTiling& tiling) {
  // A row's backward moves half as much again as its forward.
  return tiling.row_block * NormForwardCyclesPerRow(dtype, tiling.shape) * 3 /
         2;
}

void CpuNormForward(Dtype dtype, const NormShape& shape, double epsilon,
                    const void* x, const void* residual, const void* gamma,
                    const void* beta, void* h, void* y, void* mean, void* rstd,
                    int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(NormForward, dtype, shape, epsilon, x, residual,
                          gamma, beta, h, y, mean, rstd, begin, end)
}

void CpuNormGradTiles(Dtype dtype, const NormGradTiling& tiling,
                      const void* dy, const void* x, const void* gamma,
                      const void* mean, const void* rstd, const void* dh,
                      void* dx, void* partials, int64_t tile_begin,
                      int64_t tile_end) {
  TF_OPS_CPU_ISA_DISPATCH(NormGrad, dtype, tiling, dy, x, gamma, mean, rstd,
                          dh, dx, partials, tile_begin, tile_end)
}

void CpuNormGradReduce(Dtype dtype, const NormGradTiling& t,
                       const void* partials_raw, void* dgamma_raw,
                       void* dbeta_raw, int64_t begin, int64_t end) {
  WithStorage(dtype, [&](auto s) {
    using C = Compute<decltype(s)>;
    const C* partials = static_cast<const C*>(partials_raw);
    C* dgamma = static_cast<C*>(dgamma_raw);
    C* dbeta = static_cast<C*>(dbeta_raw);
    const int64_t n = t.shape.cols;
    // The tiles' sums added in tile order, in double, several columns at a
    // time (each tile's row of partials is contiguous).
    constexpr int64_t kCols = 64;
    for (int64_t c0 = begin; c0 < end; c0 += kCols) {
      const int64_t c1 = std::min(end, c0 + kCols);
      double sum_gamma[kCols] = {}, sum_beta[kCols] = {};
      for (int64_t tile = 0; tile < t.row_tiles; ++tile) {
        const C* pg = partials + tile * 2 * n;
        const C* pb = pg + n;
        for (int64_t c = c0; c < c1; ++c) {
          sum_gamma[c - c0] += static_cast<double>(pg[c]);
          sum_beta[c - c0] += static_cast<double>(pb[c]);
        }
      }
      for (int64_t c = c0; c < c1; ++c) {
        dgamma[c] = static_cast<C>(sum_gamma[c - c0]);
        if (dbeta != nullptr) dbeta[c] = static_cast<C>(sum_beta[c - c0]);
      }
    }
  });
}

}  // namespace tf_ops
