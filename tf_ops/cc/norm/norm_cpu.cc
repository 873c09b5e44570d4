// The normalisation ops' CPU loops (norm_cpu.h), compiled once per
// instruction set as fused_cpu.cc's: each variant is a function with GCC's
// `target` and `flatten` attributes, so that norm_math.h's formulas are
// inlined and vectorised for that target. Row sums run in kLanes independent
// lanes (which vectorise without reassociation) added in a fixed order.

#include "tf_ops/cc/norm/norm_cpu.h"

#include <algorithm>
#include <cstdint>

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

template <typename S>
using Compute = decltype(S::Load(typename S::Stored()));

// The sum of f(j) for j in [0, n), in kLanes lanes then in lane order.
template <typename C, typename F>
inline C LaneSum(int64_t n, const F& f) {
  C lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) lanes[k] += f(j + k);
  }
  for (int k = 0; j < n; ++j, ++k) lanes[k] += f(j);
  C sum = 0;
  for (int k = 0; k < kLanes; ++k) sum += lanes[k];
  return sum;
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
  for (int64_t row = begin; row < end; ++row) {
    const int64_t at = row * n;
    const Stored* src = static_cast<const Stored*>(x_raw) + at;
    Stored* y = static_cast<Stored*>(y_raw) + at;
    if (r_raw != nullptr) {
      // h = x + r, rounded: the row normalised is the h returned.
      const Stored* r = static_cast<const Stored*>(r_raw) + at;
      Stored* h = static_cast<Stored*>(h_raw) + at;
#pragma GCC ivdep
      for (int64_t j = 0; j < n; ++j) {
        h[j] = S::Store(S::Load(src[j]) + S::Load(r[j]));
      }
      src = h;
    }
    C mean = 0;
    if (centered) {
      const C sum = LaneSum<C>(n, [&](int64_t j) { return S::Load(src[j]); });
      mean = norm::RowMean(centered, sum, count);
    }
    const C sum_sq = LaneSum<C>(n, [&](int64_t j) {
      const C d = norm::Deviation(S::Load(src[j]), mean);
      return d * d;
    });
    const C rstd = norm::RowRstd(sum_sq, count, eps);
    if (beta != nullptr) {
#pragma GCC ivdep
      for (int64_t j = 0; j < n; ++j) {
        y[j] = S::Store(norm::NormOutput(
            norm::Normalized(S::Load(src[j]), mean, rstd), gamma[j],
            beta[j]));
      }
    } else {
#pragma GCC ivdep
      for (int64_t j = 0; j < n; ++j) {
        y[j] = S::Store(norm::NormOutput(
            norm::Normalized(S::Load(src[j]), mean, rstd), gamma[j],
            C(0)));
      }
    }
    if (mean_out != nullptr) mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// The column pass of K rows at once (K = kGroup, or 1 for a tile's last
// rows): dx for each row, and the rows' g * xhat and g added together before
// they meet the tile's partial sums, which are then read and written once
// per K rows. The grouping depends on the shape alone.
constexpr int kGroup = 4;

template <typename S, int K, bool kDh>
inline void GradColumns(int64_t n, const typename S::Stored* const* dy,
                        const typename S::Stored* const* x,
                        const typename S::Stored* const* dh,
                        typename S::Stored* const* dx,
                        const Compute<S>* gamma, const Compute<S>* mean,
                        const Compute<S>* rstd,
                        const norm::GradRowConstants<Compute<S>>* c,
                        typename S::Acc* acc_gamma, typename S::Acc* acc_beta) {
  using C = Compute<S>;
  using Acc = typename S::Acc;
#pragma GCC ivdep
  for (int64_t j = 0; j < n; ++j) {
    const C gamma_j = gamma[j];
    C sum_g_xhat = 0, sum_g = 0;
    for (int k = 0; k < K; ++k) {
      const C g = S::Load(dy[k][j]);
      const C xhat = norm::Normalized(S::Load(x[k][j]), mean[k], rstd[k]);
      sum_g_xhat += g * xhat;
      sum_g += g;
      C d = norm::NormInputGrad(g * gamma_j, xhat, rstd[k], c[k]);
      if (kDh) d += S::Load(dh[k][j]);
      dx[k][j] = S::Store(d);
    }
    acc_gamma[j] += static_cast<Acc>(sum_g_xhat);
    acc_beta[j] += static_cast<Acc>(sum_g);
  }
}

template <typename S>
void GradTiles(const NormGradTiling& t, const void* dy_raw, const void* x_raw,
               const void* gamma_raw, const void* mean_raw,
               const void* rstd_raw, const void* dh_raw, void* dx_raw,
               void* partials_raw, int64_t tile_begin, int64_t tile_end) {
  using Stored = typename S::Stored;
  using C = Compute<S>;
  using Acc = typename S::Acc;
  const int64_t n = t.shape.cols;
  const bool centered = t.shape.centered;
  const C count = static_cast<C>(n);
  const C* gamma = static_cast<const C*>(gamma_raw);
  const C* mean_in = static_cast<const C*>(mean_raw);
  const C* rstd_in = static_cast<const C*>(rstd_raw);
  Acc* partials = static_cast<Acc*>(partials_raw);
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    Acc* acc_gamma = partials + tile * 2 * n;
    Acc* acc_beta = acc_gamma + n;
    std::fill(acc_gamma, acc_gamma + 2 * n, Acc(0));
    const int64_t r0 = tile * t.row_block;
    const int64_t r1 = std::min(t.shape.rows, r0 + t.row_block);
    for (int64_t row = r0; row < r1;) {
      const int rows_here = r1 - row >= kGroup ? kGroup : 1;
      const Stored* dy[kGroup];
      const Stored* x[kGroup];
      const Stored* dh[kGroup];
      Stored* dx[kGroup];
      C mean[kGroup], rstd[kGroup];
      norm::GradRowConstants<C> c[kGroup];
      for (int k = 0; k < rows_here; ++k) {
        const int64_t at = (row + k) * n;
        dy[k] = static_cast<const Stored*>(dy_raw) + at;
        x[k] = static_cast<const Stored*>(x_raw) + at;
        dh[k] = dh_raw == nullptr ? nullptr
                                  : static_cast<const Stored*>(dh_raw) + at;
        dx[k] = static_cast<Stored*>(dx_raw) + at;
        mean[k] = centered && mean_in != nullptr ? mean_in[row + k] : C(0);
        rstd[k] = rstd_in[row + k];
        const Stored* dyk = dy[k];
        const Stored* xk = x[k];
        const C m = mean[k], rs = rstd[k];
        const C sum_gg = centered ? LaneSum<C>(n, [&](int64_t j) {
          return S::Load(dyk[j]) * gamma[j];
        }) : C(0);
        const C sum_gg_xhat = LaneSum<C>(n, [&](int64_t j) {
          return S::Load(dyk[j]) * gamma[j] *
                 norm::Normalized(S::Load(xk[j]), m, rs);
        });
        c[k] = norm::GradConstants(centered, sum_gg, sum_gg_xhat, count);
      }
      if (rows_here == kGroup) {
        if (dh_raw != nullptr) {
          GradColumns<S, kGroup, true>(n, dy, x, dh, dx, gamma, mean, rstd, c,
                                       acc_gamma, acc_beta);
        } else {
          GradColumns<S, kGroup, false>(n, dy, x, dh, dx, gamma, mean, rstd, c,
                                        acc_gamma, acc_beta);
        }
      } else if (dh_raw != nullptr) {
        GradColumns<S, 1, true>(n, dy, x, dh, dx, gamma, mean, rstd, c,
                                acc_gamma, acc_beta);
      } else {
        GradColumns<S, 1, false>(n, dy, x, dh, dx, gamma, mean, rstd, c,
                                 acc_gamma, acc_beta);
      }
      row += rows_here;
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
    GradTiles<decltype(s)>(t, dy, x, gamma, mean, rstd, dh, dx, partials,
                           tile_begin, tile_end);
  });
}

#define TF_OPS_NORM_ISA_VARIANT(Suffix, TARGET, F16C)                         \
  TARGET __attribute__((flatten, noinline)) void NormForward##Suffix(        \
      Dtype dtype, const NormShape& shape, double epsilon, const void* x,    \
      const void* r, const void* gamma, const void* beta, void* h, void* y,  \
      void* mean, void* rstd, int64_t begin, int64_t end) {                  \
    ForwardAny(dtype, shape, epsilon, x, r, gamma, beta, h, y, mean, rstd,   \
               begin, end);                                                  \
  }                                                                          \
  TARGET __attribute__((flatten, noinline)) void NormGrad##Suffix(           \
      Dtype dtype, const NormGradTiling& t, const void* dy, const void* x,   \
      const void* gamma, const void* mean, const void* rstd, const void* dh, \
      void* dx, void* partials, int64_t tile_begin, int64_t tile_end) {      \
    GradAny(dtype, t, dy, x, gamma, mean, rstd, dh, dx, partials,            \
            tile_begin, tile_end);                                           \
  }

TF_OPS_FOR_EACH_CPU_ISA(TF_OPS_NORM_ISA_VARIANT)
#undef TF_OPS_NORM_ISA_VARIANT

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

void CpuNormForward(Dtype dtype, const NormShape& shape, double epsilon,
                    const void* x, const void* residual, const void* gamma,
                    const void* beta, void* h, void* y, void* mean, void* rstd,
                    int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(NormForward,
                          dtype, shape, epsilon, x, residual, gamma,
                       beta, h, y, mean, rstd, begin, end)
}

void CpuNormGradTiles(Dtype dtype, const NormGradTiling& tiling,
                      const void* dy, const void* x, const void* gamma,
                      const void* mean, const void* rstd, const void* dh,
                      void* dx, void* partials, int64_t tile_begin,
                      int64_t tile_end) {
  TF_OPS_CPU_ISA_DISPATCH(NormGrad, dtype, tiling, dy, x, gamma, mean, rstd, dh,
                       dx, partials, tile_begin, tile_end)
}

void CpuNormGradReduce(Dtype dtype, const NormGradTiling& t,
                       const void* partials_raw, void* dgamma_raw,
                       void* dbeta_raw, int64_t begin, int64_t end) {
  WithStorage(dtype, [&](auto s) {
    using S = decltype(s);
    using Acc = typename S::Acc;
    using C = Compute<S>;
    const Acc* partials = static_cast<const Acc*>(partials_raw);
    C* dgamma = static_cast<C*>(dgamma_raw);
    C* dbeta = static_cast<C*>(dbeta_raw);
    const int64_t n = t.shape.cols;
    for (int64_t c = begin; c < end; ++c) {
      Acc sum_gamma = 0, sum_beta = 0;
      for (int64_t tile = 0; tile < t.row_tiles; ++tile) {
        sum_gamma += partials[tile * 2 * n + c];
        sum_beta += partials[tile * 2 * n + n + c];
      }
      dgamma[c] = static_cast<C>(sum_gamma);
      if (dbeta != nullptr) dbeta[c] = static_cast<C>(sum_beta);
    }
  });
}

}  // namespace tf_ops
