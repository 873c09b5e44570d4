// The batch-norm ops' CPU engine (batch_norm_cpu.h). The loops over x are
// compiled once per instruction set as fused_cpu.cc's (GCC `target` and
// `flatten`), for each activation and storage dtype; the per-channel work is
// plain loops over the channels.

#include "tf_ops/cc/batch_norm/batch_norm_cpu.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "tf_ops/cc/batch_norm/batch_norm_math.h"
#include "tf_ops/cc/core/cpu_isa.h"
#include "tf_ops/cc/core/cpu_storage.h"

namespace tf_ops {
namespace {

using cpu_storage::WithFixedFormula;
using cpu_storage::WithStorage;

// Elements per reduction tile: large enough that partial sums are a small
// fraction of the traffic, small enough to spread over the cores.
constexpr int64_t kTileElements = int64_t{1} << 15;
// Independent running sums along a row of one channel (inner > 1).
constexpr int kLanes = 16;

// The tensor as a matrix of rows x cols: cols = channels (inner = 1, a row per
// outer index) or inner (rows = outer * channels, one channel per row), cut
// into tiles of row_block x col_block. Partial sums: one per (row tile,
// channel) when inner = 1, else one per (row, column tile).
struct Tiling {
  BatchNormLayout layout;
  int64_t rows, cols, row_block, col_block, row_tiles, col_tiles;
  bool by_channel() const { return layout.inner == 1; }
  int64_t tiles() const { return row_tiles * col_tiles; }
  int64_t partials() const {
    return by_channel() ? row_tiles * cols : rows * col_tiles;
  }
};

Tiling MakeTiling(BatchNormLayout l) {
  Tiling t;
  t.layout = l;
  t.cols = l.inner == 1 ? l.channels : l.inner;
  t.rows = l.inner == 1 ? l.outer : l.outer * l.channels;
  if (t.cols == 0 || t.rows == 0) t.rows = 0;
  t.col_block = std::max<int64_t>(1, std::min(t.cols, kTileElements));
  t.row_block = std::max<int64_t>(1, kTileElements / t.col_block);
  t.row_tiles = (t.rows + t.row_block - 1) / t.row_block;
  t.col_tiles = (t.cols + t.col_block - 1) / t.col_block;
  return t;
}

// Scratch: two arrays of partial sums, then per-channel arrays.
enum ChannelArray { kPivot, kMean, kScale, kShift, kRstd, kC1, kC0, kSumA,
                    kSumB, kChannelArrays };

template <typename S>
using Compute = decltype(S::Load(typename S::Stored()));

template <typename S>
struct Scratch {
  using Acc = typename S::Acc;
  using Cm = Compute<S>;
  Acc* a;  // partial sums: a, b
  Acc* b;
  double* channel_base;
  int64_t channels;
  Cm* channel(ChannelArray k) const {
    return reinterpret_cast<Cm*>(channel_base + k * channels);
  }
};
template <typename S>
Scratch<S> ScratchOf(double* scratch, const Tiling& t) {
  Scratch<S> s;
  const int64_t p = t.partials();
  s.a = reinterpret_cast<typename S::Acc*>(scratch);
  s.b = reinterpret_cast<typename S::Acc*>(scratch + p);
  s.channel_base = scratch + 2 * p;
  s.channels = t.layout.channels;
  return s;
}

// ---------------------------------------------------------- loops ------

// Shifted sums of x - pivot and its square, per tile.
template <typename S>
void StatsTileRange(const void* x_raw, const Tiling& t, Scratch<S> sc,
                    int64_t tile_begin, int64_t tile_end) {
  using Stored = typename S::Stored;
  using Acc = typename S::Acc;
  using Cm = Compute<S>;
  const Stored* x = static_cast<const Stored*>(x_raw);
  const Cm* pivot = sc.channel(kPivot);
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const int64_t rt = tile / t.col_tiles, ct = tile % t.col_tiles;
    const int64_t r0 = rt * t.row_block, r1 = std::min(t.rows, r0 + t.row_block);
    const int64_t c0 = ct * t.col_block, c1 = std::min(t.cols, c0 + t.col_block);
    const int64_t len = c1 - c0;
    if (t.by_channel()) {
      Acc* a = sc.a + rt * t.cols + c0;
      Acc* b = sc.b + rt * t.cols + c0;
      std::fill(a, a + len, Acc(0));
      std::fill(b, b + len, Acc(0));
      const Cm* k = pivot + c0;
      for (int64_t r = r0; r < r1; ++r) {
        const Stored* xr = x + r * t.cols + c0;
#pragma GCC ivdep
        for (int64_t j = 0; j < len; ++j) {
          const Acc d = static_cast<Acc>(S::Load(xr[j]) - k[j]);
          a[j] += d;
          b[j] += d * d;
        }
      }
    } else {
      for (int64_t r = r0; r < r1; ++r) {
        const Stored* xr = x + r * t.cols + c0;
        const Cm k = pivot[r % t.layout.channels];
        Acc la[kLanes] = {}, lb[kLanes] = {};
        int64_t j = 0;
        for (; j + kLanes <= len; j += kLanes) {
#pragma GCC ivdep
          for (int q = 0; q < kLanes; ++q) {
            const Acc d = static_cast<Acc>(S::Load(xr[j + q]) - k);
            la[q] += d;
            lb[q] += d * d;
          }
        }
        for (int q = 0; j < len; ++j, ++q) {
          const Acc d = static_cast<Acc>(S::Load(xr[j]) - k);
          la[q] += d;
          lb[q] += d * d;
        }
        Acc sa = 0, sb = 0;
        for (int q = 0; q < kLanes; ++q) {
          sa += la[q];
          sb += lb[q];
        }
        sc.a[r * t.col_tiles + ct] = sa;
        sc.b[r * t.col_tiles + ct] = sb;
      }
    }
  }
}

// Sums of dz and dz * (x - mean) per tile; with kWriteDx also dx = scale * dz
// (the inference grad's single pass). dx may be dy or x.
template <typename Op, typename S, bool kWriteDx>
void GradSumsTileRange(const Op& op, const void* dy_raw, const void* x_raw,
                       void* dx_raw, const Tiling& t, Scratch<S> sc,
                       int64_t tile_begin, int64_t tile_end) {
  using Stored = typename S::Stored;
  using Acc = typename S::Acc;
  using Cm = Compute<S>;
  const Stored* dy = static_cast<const Stored*>(dy_raw);
  const Stored* x = static_cast<const Stored*>(x_raw);
  Stored* dx = static_cast<Stored*>(dx_raw);
  const Cm* mean = sc.channel(kMean);
  const Cm* scale = sc.channel(kScale);
  const Cm* shift = sc.channel(kShift);
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const int64_t rt = tile / t.col_tiles, ct = tile % t.col_tiles;
    const int64_t r0 = rt * t.row_block, r1 = std::min(t.rows, r0 + t.row_block);
    const int64_t c0 = ct * t.col_block, c1 = std::min(t.cols, c0 + t.col_block);
    const int64_t len = c1 - c0;
    if (t.by_channel()) {
      Acc* a = sc.a + rt * t.cols + c0;
      Acc* b = sc.b + rt * t.cols + c0;
      std::fill(a, a + len, Acc(0));
      std::fill(b, b + len, Acc(0));
      const Cm *m = mean + c0, *s = scale + c0, *h = shift + c0;
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t at = r * t.cols + c0;
#pragma GCC ivdep
        for (int64_t j = 0; j < len; ++j) {
          const Cm xv = S::Load(x[at + j]);
          const Cm d = NormalizeDz(op, S::Load(dy[at + j]), xv, s[j], h[j]);
          if constexpr (kWriteDx) dx[at + j] = S::Store(s[j] * d);
          a[j] += static_cast<Acc>(d);
          b[j] += static_cast<Acc>(d * (xv - m[j]));
        }
      }
    } else {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t at = r * t.cols + c0;
        const int64_t c = r % t.layout.channels;
        const Cm m = mean[c], s = scale[c], h = shift[c];
        Acc la[kLanes] = {}, lb[kLanes] = {};
        int64_t j = 0;
        for (; j + kLanes <= len; j += kLanes) {
#pragma GCC ivdep
          for (int q = 0; q < kLanes; ++q) {
            const Cm xv = S::Load(x[at + j + q]);
            const Cm d = NormalizeDz(op, S::Load(dy[at + j + q]), xv, s, h);
            if constexpr (kWriteDx) dx[at + j + q] = S::Store(s * d);
            la[q] += static_cast<Acc>(d);
            lb[q] += static_cast<Acc>(d * (xv - m));
          }
        }
        for (int q = 0; j < len; ++j, ++q) {
          const Cm xv = S::Load(x[at + j]);
          const Cm d = NormalizeDz(op, S::Load(dy[at + j]), xv, s, h);
          if constexpr (kWriteDx) dx[at + j] = S::Store(s * d);
          la[q] += static_cast<Acc>(d);
          lb[q] += static_cast<Acc>(d * (xv - m));
        }
        Acc sa = 0, sb = 0;
        for (int q = 0; q < kLanes; ++q) {
          sa += la[q];
          sb += lb[q];
        }
        sc.a[r * t.col_tiles + ct] = sa;
        sc.b[r * t.col_tiles + ct] = sb;
      }
    }
  }
}

// Elementwise passes over [begin, end): y = f(x * scale + shift), or the
// training grad's dx. `run(i, len, c_or_null)` walks runs that share the
// channel arrays' indexing: inner = 1, a run of channels from c; inner > 1,
// a run of one channel.
template <typename Fn>
void ForRuns(BatchNormLayout l, int64_t begin, int64_t end, const Fn& fn) {
  for (int64_t i = begin; i < end;) {
    if (l.inner == 1) {
      const int64_t c = i % l.channels;
      const int64_t len = std::min(l.channels - c, end - i);
      fn(i, len, c, true);
      i += len;
    } else {
      const int64_t k = i % l.inner;
      const int64_t len = std::min(l.inner - k, end - i);
      fn(i, len, (i / l.inner) % l.channels, false);
      i += len;
    }
  }
}

template <typename Op, typename S>
void ForwardRange(const Op& op, const void* x_raw, void* y_raw,
                  BatchNormLayout l, Scratch<S> sc, int64_t begin,
                  int64_t end) {
  using Stored = typename S::Stored;
  using Cm = Compute<S>;
  const Stored* x = static_cast<const Stored*>(x_raw);
  Stored* y = static_cast<Stored*>(y_raw);
  const Cm* scale = sc.channel(kScale);
  const Cm* shift = sc.channel(kShift);
  ForRuns(l, begin, end, [&](int64_t i, int64_t len, int64_t c, bool vec) {
    const Stored* xi = x + i;
    Stored* yi = y + i;
    if (vec) {
      const Cm *s = scale + c, *h = shift + c;
#pragma GCC ivdep
      for (int64_t j = 0; j < len; ++j) {
        yi[j] = S::Store(NormalizeForward(op, S::Load(xi[j]), s[j], h[j]));
      }
    } else {
      const Cm s = scale[c], h = shift[c];
#pragma GCC ivdep
      for (int64_t j = 0; j < len; ++j) {
        yi[j] = S::Store(NormalizeForward(op, S::Load(xi[j]), s, h));
      }
    }
  });
}

template <typename Op, typename S>
void TrainingDxRange(const Op& op, const void* dy_raw, const void* x_raw,
                     void* dx_raw, BatchNormLayout l, Scratch<S> sc,
                     int64_t begin, int64_t end) {
  using Stored = typename S::Stored;
  using Cm = Compute<S>;
  const Stored* dy = static_cast<const Stored*>(dy_raw);
  const Stored* x = static_cast<const Stored*>(x_raw);
  Stored* dx = static_cast<Stored*>(dx_raw);
  const Cm* mean = sc.channel(kMean);
  const Cm* scale = sc.channel(kScale);
  const Cm* shift = sc.channel(kShift);
  const Cm* c1 = sc.channel(kC1);
  const Cm* c0 = sc.channel(kC0);
  ForRuns(l, begin, end, [&](int64_t i, int64_t len, int64_t c, bool vec) {
    if (vec) {
#pragma GCC ivdep
      for (int64_t j = 0; j < len; ++j) {
        const int64_t k = c + j;
        dx[i + j] = S::Store(TrainingDx(
            op, S::Load(dy[i + j]), S::Load(x[i + j]), mean[k],
            ChannelAffine<Cm>{scale[k], shift[k], Cm(0)},
            TrainingDxCoefficients<Cm>{c1[k], c0[k]}));
      }
    } else {
      const Cm m = mean[c];
      const ChannelAffine<Cm> a{scale[c], shift[c], Cm(0)};
      const TrainingDxCoefficients<Cm> co{c1[c], c0[c]};
#pragma GCC ivdep
      for (int64_t j = 0; j < len; ++j) {
        dx[i + j] = S::Store(
            TrainingDx(op, S::Load(dy[i + j]), S::Load(x[i + j]), m, a, co));
      }
    }
  });
}

// ------------------------------------------- dtype and formula dispatch ---

template <typename Op, typename Fn>
void WithFormulaAndStorage(const Op& op, Dtype dtype, const Fn& fn) {
  WithFixedFormula(
      op,
      [&](auto fixed) { WithStorage(dtype, [&](auto s) { fn(fixed, s); }); },
      0);
}

// The loops take the scratch untyped: each variant types it for its dtype.
template <typename Op>
void ForwardAny(const Op& op, Dtype dtype, const void* x, void* y,
                const Tiling& t, double* scratch, int64_t begin,
                int64_t end) {
  WithFormulaAndStorage(op, dtype, [&](auto fixed, auto s) {
    using S = decltype(s);
    ForwardRange<decltype(fixed), S>(fixed, x, y, t.layout,
                                     ScratchOf<S>(scratch, t), begin, end);
  });
}
template <typename Op>
void TrainingDxAny(const Op& op, Dtype dtype, const void* dy, const void* x,
                   void* dx, const Tiling& t, double* scratch, int64_t begin,
                   int64_t end) {
  WithFormulaAndStorage(op, dtype, [&](auto fixed, auto s) {
    using S = decltype(s);
    TrainingDxRange<decltype(fixed), S>(fixed, dy, x, dx, t.layout,
                                        ScratchOf<S>(scratch, t), begin, end);
  });
}
template <typename Op>
void GradSumsAny(const Op& op, Dtype dtype, const void* dy, const void* x,
                 void* dx, const Tiling& t, double* scratch,
                 int64_t tile_begin, int64_t tile_end) {
  WithFormulaAndStorage(op, dtype, [&](auto fixed, auto s) {
    using S = decltype(s);
    if (dx == nullptr) {
      GradSumsTileRange<decltype(fixed), S, false>(
          fixed, dy, x, dx, t, ScratchOf<S>(scratch, t), tile_begin, tile_end);
    } else {
      GradSumsTileRange<decltype(fixed), S, true>(
          fixed, dy, x, dx, t, ScratchOf<S>(scratch, t), tile_begin, tile_end);
    }
  });
}
inline void StatsAny(Dtype dtype, const void* x, const Tiling& t,
                     double* scratch, int64_t tile_begin, int64_t tile_end) {
  WithStorage(dtype, [&](auto s) {
    using S = decltype(s);
    StatsTileRange<S>(x, t, ScratchOf<S>(scratch, t), tile_begin, tile_end);
  });
}

#define TF_OPS_BN_ISA_VARIANT(Suffix, TARGET, F16C)                           \
  template <typename Op>                                                      \
  TARGET __attribute__((flatten, noinline)) void Forward##Suffix(             \
      const Op& op, Dtype dtype, const void* x, void* y, const Tiling& t,     \
      double* scratch, int64_t begin, int64_t end) {                          \
    ForwardAny(op, dtype, x, y, t, scratch, begin, end);                      \
  }                                                                           \
  template <typename Op>                                                      \
  TARGET __attribute__((flatten, noinline)) void TrainingDx##Suffix(          \
      const Op& op, Dtype dtype, const void* dy, const void* x, void* dx,     \
      const Tiling& t, double* scratch, int64_t begin, int64_t end) {         \
    TrainingDxAny(op, dtype, dy, x, dx, t, scratch, begin, end);              \
  }                                                                           \
  template <typename Op>                                                      \
  TARGET __attribute__((flatten, noinline)) void GradSums##Suffix(            \
      const Op& op, Dtype dtype, const void* dy, const void* x, void* dx,     \
      const Tiling& t, double* scratch, int64_t begin, int64_t end) {         \
    GradSumsAny(op, dtype, dy, x, dx, t, scratch, begin, end);                \
  }                                                                           \
  TARGET __attribute__((flatten, noinline)) void Stats##Suffix(               \
      Dtype dtype, const void* x, const Tiling& t, double* scratch,           \
      int64_t begin, int64_t end) {                                           \
    StatsAny(dtype, x, t, scratch, begin, end);                               \
  }

TF_OPS_FOR_EACH_CPU_ISA(TF_OPS_BN_ISA_VARIANT)
#undef TF_OPS_BN_ISA_VARIANT

template <typename Op>
void Forward(const Op& op, Dtype dtype, const void* x, void* y,
             const Tiling& t, double* scratch, int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(Forward, op, dtype, x, y, t, scratch, begin, end)
}
template <typename Op>
void TrainingDxPass(const Op& op, Dtype dtype, const void* dy, const void* x,
                    void* dx, const Tiling& t, double* scratch, int64_t begin,
                    int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(TrainingDx,
                          op, dtype, dy, x, dx, t, scratch, begin, end)
}
template <typename Op>
void GradSums(const Op& op, Dtype dtype, const void* dy, const void* x,
              void* dx, const Tiling& t, double* scratch, int64_t begin,
              int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(GradSums,
                          op, dtype, dy, x, dx, t, scratch, begin, end)
}
void Stats(Dtype dtype, const void* x, const Tiling& t, double* scratch,
           int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(Stats, dtype, x, t, scratch, begin, end)
}

// ------------------------------------------------- per-channel steps ----

// The partial sums of channel c, added in a fixed order.
template <typename Acc>
void ReduceChannel(const Tiling& t, const Acc* a, const Acc* b, int64_t c,
                   Acc* sum_a, Acc* sum_b) {
  Acc sa = 0, sb = 0;
  if (t.by_channel()) {
    for (int64_t rt = 0; rt < t.row_tiles; ++rt) {
      sa += a[rt * t.cols + c];
      sb += b[rt * t.cols + c];
    }
  } else {
    for (int64_t r = c; r < t.rows; r += t.layout.channels) {
      for (int64_t ct = 0; ct < t.col_tiles; ++ct) {
        sa += a[r * t.col_tiles + ct];
        sb += b[r * t.col_tiles + ct];
      }
    }
  }
  *sum_a = sa;
  *sum_b = sb;
}

template <typename Cm>
Cm ChannelValue(const void* p, int64_t c, Cm absent) {
  return p == nullptr ? absent : static_cast<const Cm*>(p)[c];
}

// scale, shift, rstd and mean of every channel into the scratch.
template <typename S>
void SetAffine(Scratch<S> sc, const void* mean, const void* variance,
               const void* gamma, const void* beta, double epsilon) {
  using Cm = Compute<S>;
  for (int64_t c = 0; c < sc.channels; ++c) {
    const Cm m = static_cast<const Cm*>(mean)[c];
    const ChannelAffine<Cm> a = AffineOf(
        m, static_cast<const Cm*>(variance)[c], ChannelValue(gamma, c, Cm(1)),
        ChannelValue(beta, c, Cm(0)), static_cast<Cm>(epsilon));
    sc.channel(kMean)[c] = m;
    sc.channel(kScale)[c] = a.scale;
    sc.channel(kShift)[c] = a.shift;
    sc.channel(kRstd)[c] = a.rstd;
  }
}

// Reduces the pass-1 sums of the grad ops into kSumA (dbeta) and kSumB
// (sum of dz * (x - mean)).
template <typename S>
void ReduceGradSums(const Tiling& t, Scratch<S> sc,
                    const BatchNormParallelFor& parallel) {
  using Acc = typename S::Acc;
  using Cm = Compute<S>;
  const int64_t per_channel = t.partials() / std::max<int64_t>(1, sc.channels);
  parallel(sc.channels, 2 * per_channel + 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      Acc sa, sb;
      ReduceChannel(t, sc.a, sc.b, c, &sa, &sb);
      sc.channel(kSumA)[c] = static_cast<Cm>(sa);
      sc.channel(kSumB)[c] = static_cast<Cm>(sb);
    }
  });
}

template <typename Cm>
void WriteParamGrads(const Cm* sum_dz, const Cm* sum_dz_xc, const Cm* rstd,
                     int64_t channels, void* dgamma, void* dbeta) {
  for (int64_t c = 0; c < channels; ++c) {
    if (dgamma != nullptr) static_cast<Cm*>(dgamma)[c] = rstd[c] * sum_dz_xc[c];
    if (dbeta != nullptr) static_cast<Cm*>(dbeta)[c] = sum_dz[c];
  }
}

}  // namespace

int64_t BatchNormScratchDoubles(BatchNormLayout layout) {
  const Tiling t = MakeTiling(layout);
  return 2 * t.partials() + kChannelArrays * layout.channels;
}

void CpuBatchNormTraining(const BatchNormActivation& act, Dtype dtype,
                          const void* x, const void* gamma, const void* beta,
                          double epsilon, void* y, void* mean, void* variance,
                          BatchNormLayout layout, double* scratch,
                          const BatchNormParallelFor& parallel) {
  const Tiling t = MakeTiling(layout);
  const int64_t total = layout.outer * layout.channels * layout.inner;
  WithStorage(dtype, [&](auto s) {
    using S = decltype(s);
    using Acc = typename S::Acc;
    using Cm = Compute<S>;
    const Scratch<S> sc = ScratchOf<S>(scratch, t);
    const auto* xs = static_cast<const typename S::Stored*>(x);
    for (int64_t c = 0; c < layout.channels; ++c) {
      sc.channel(kPivot)[c] =
          total == 0 ? Cm(0) : S::Load(xs[layout.inner == 1 ? c : c * layout.inner]);
    }
    parallel(t.tiles(), t.row_block * t.col_block * 3,
             [&](int64_t b, int64_t e) { Stats(dtype, x, t, scratch, b, e); });
    const Acc n = static_cast<Acc>(layout.count());
    const int64_t per_channel = t.partials() / std::max<int64_t>(1, sc.channels);
    parallel(layout.channels, 2 * per_channel + 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        Acc sa, sb;
        ReduceChannel(t, sc.a, sc.b, c, &sa, &sb);
        const ChannelMoments<Acc> m = MomentsFromSums(
            static_cast<Acc>(sc.channel(kPivot)[c]), sa, sb, n);
        static_cast<Cm*>(mean)[c] = static_cast<Cm>(m.mean);
        static_cast<Cm*>(variance)[c] = static_cast<Cm>(m.variance);
      }
    });
    SetAffine(sc, mean, variance, gamma, beta, epsilon);
  });
  if (total == 0) return;
  VisitActivation(act, [&](const auto& op) {
    parallel(total, op.kCyclesPerElement + 4, [&](int64_t b, int64_t e) {
      Forward(op, dtype, x, y, t, scratch, b, e);
    });
  });
}

void CpuBatchNormTrainingGrad(const BatchNormActivation& act, Dtype dtype,
                              const void* dy, const void* x,
                              const void* gamma, const void* beta,
                              const void* mean, const void* variance,
                              const void* d_mean, const void* d_variance,
                              double epsilon, void* dx, void* dgamma,
                              void* dbeta, BatchNormLayout layout,
                              double* scratch,
                              const BatchNormParallelFor& parallel) {
  const Tiling t = MakeTiling(layout);
  const int64_t total = layout.outer * layout.channels * layout.inner;
  WithStorage(dtype, [&](auto s) {
    using S = decltype(s);
    using Cm = Compute<S>;
    const Scratch<S> sc = ScratchOf<S>(scratch, t);
    SetAffine(sc, mean, variance, gamma, beta, epsilon);
    VisitActivation(act, [&](const auto& op) {
      parallel(t.tiles(), t.row_block * t.col_block * (op.kCyclesPerElement + 6),
               [&](int64_t b, int64_t e) {
                 GradSums(op, dtype, dy, x, nullptr, t, scratch, b, e);
               });
    });
    ReduceGradSums(t, sc, parallel);
    const Cm n = static_cast<Cm>(layout.count());
    for (int64_t c = 0; c < layout.channels; ++c) {
      const TrainingDxCoefficients<Cm> co = TrainingDxOf(
          sc.channel(kScale)[c], sc.channel(kRstd)[c], sc.channel(kSumA)[c],
          sc.channel(kSumB)[c], ChannelValue(d_mean, c, Cm(0)),
          ChannelValue(d_variance, c, Cm(0)), n);
      sc.channel(kC1)[c] = co.c1;
      sc.channel(kC0)[c] = co.c0;
    }
    WriteParamGrads(sc.channel(kSumA), sc.channel(kSumB), sc.channel(kRstd),
                    layout.channels, dgamma, dbeta);
  });
  if (total == 0) return;
  VisitActivation(act, [&](const auto& op) {
    parallel(total, op.kCyclesPerElement + 8, [&](int64_t b, int64_t e) {
      TrainingDxPass(op, dtype, dy, x, dx, t, scratch, b, e);
    });
  });
}

void CpuBatchNormInference(const BatchNormActivation& act, Dtype dtype,
                           const void* x, const void* gamma, const void* beta,
                           const void* mean, const void* variance,
                           double epsilon, void* y, BatchNormLayout layout,
                           double* scratch,
                           const BatchNormParallelFor& parallel) {
  const Tiling t = MakeTiling(layout);
  const int64_t total = layout.outer * layout.channels * layout.inner;
  WithStorage(dtype, [&](auto s) {
    SetAffine(ScratchOf<decltype(s)>(scratch, t), mean, variance, gamma, beta,
              epsilon);
  });
  if (total == 0) return;
  VisitActivation(act, [&](const auto& op) {
    parallel(total, op.kCyclesPerElement + 3, [&](int64_t b, int64_t e) {
      Forward(op, dtype, x, y, t, scratch, b, e);
    });
  });
}

void CpuBatchNormInferenceGrad(const BatchNormActivation& act, Dtype dtype,
                               const void* dy, const void* x,
                               const void* gamma, const void* beta,
                               const void* mean, const void* variance,
                               double epsilon, void* dx, void* dgamma,
                               void* dbeta, BatchNormLayout layout,
                               double* scratch,
                               const BatchNormParallelFor& parallel) {
  const Tiling t = MakeTiling(layout);
  WithStorage(dtype, [&](auto s) {
    using S = decltype(s);
    const Scratch<S> sc = ScratchOf<S>(scratch, t);
    SetAffine(sc, mean, variance, gamma, beta, epsilon);
    VisitActivation(act, [&](const auto& op) {
      parallel(t.tiles(), t.row_block * t.col_block * (op.kCyclesPerElement + 7),
               [&](int64_t b, int64_t e) {
                 GradSums(op, dtype, dy, x, dx, t, scratch, b, e);
               });
    });
    ReduceGradSums(t, sc, parallel);
    WriteParamGrads(sc.channel(kSumA), sc.channel(kSumB), sc.channel(kRstd),
                    layout.channels, dgamma, dbeta);
  });
}

}  // namespace tf_ops
