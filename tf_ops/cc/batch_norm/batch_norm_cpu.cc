// The batch-norm ops' CPU engine (batch_norm_cpu.h).
//
// Every pass over the tensor is one walk over the same tiles (TileRange) with
// an element kernel: the statistics (sums of x - pivot and its square), the
// normalisation y = f(x * scale + shift), the grad's sums of dz and
// dz * (x - mean) (writing dx = scale * dz in the inference grad) and the
// training grad's dx. A kernel reads its per-channel values with At(c) and
// handles one element with Apply(i, values), returning the two values a
// reduction adds up. The walk is compiled once per instruction set (GCC
// `target` and `flatten`, cpu_isa.h), for each kernel, activation and
// storage dtype; the per-channel work between passes is plain loops over the
// channels.

#include "tf_ops/cc/batch_norm/batch_norm_cpu.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tf_ops/cc/batch_norm/batch_norm_math.h"
#include "tf_ops/cc/core/cpu_isa.h"
#include "tf_ops/cc/core/cpu_storage.h"

namespace tf_ops {
namespace {

using cpu_storage::WithFixedFormula;
using cpu_storage::WithStorage;

// Elements per tile: large enough that partial sums are a small fraction of
// the traffic, small enough to spread over the cores.
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
  int64_t tile_elements() const { return row_block * col_block; }
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

// Scratch: two arrays of partial sums, then per-channel arrays in the
// compute type.
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

// ---------------------------------------------------- element kernels ---
// Each: Storage (the policy S), kSums (whether Apply's two values are
// summed per channel), Values (what At(c) reads of the channel arrays) and
// Apply(i, values) for element i.

template <typename T>
struct Pair {
  T a, b;
};

// Shifted sums: x - pivot and its square (squared in the accumulation type).
template <typename S>
struct StatsKernel {
  using Storage = S;
  using Cm = Compute<S>;
  using Acc = typename S::Acc;
  using Values = Cm;
  static constexpr bool kSums = true;
  const typename S::Stored* x;
  const Cm* pivot;
  Values At(int64_t c) const { return pivot[c]; }
  Pair<Acc> Apply(int64_t i, Cm k) const {
    const Acc d = static_cast<Acc>(S::Load(x[i]) - k);
    return {d, d * d};
  }
};

// y = f(x * scale + shift).
template <typename S, typename Op>
struct ForwardKernel {
  using Storage = S;
  using Cm = Compute<S>;
  struct Values {
    Cm scale, shift;
  };
  static constexpr bool kSums = false;
  Op op;
  const typename S::Stored* x;
  typename S::Stored* y;
  const Cm* scale;
  const Cm* shift;
  Values At(int64_t c) const { return {scale[c], shift[c]}; }
  Pair<Cm> Apply(int64_t i, const Values& v) const {
    y[i] = S::Store(NormalizeForward(op, S::Load(x[i]), v.scale, v.shift));
    return {};
  }
};

// What both grad kernels read: dy, x and each channel's mean and affine; dx
// (written) may be dy or x.
template <typename S, typename Op>
struct GradKernelInputs {
  using Storage = S;
  using Cm = Compute<S>;
  Op op;
  const typename S::Stored* dy;
  const typename S::Stored* x;
  typename S::Stored* dx;
  const Cm* mean;
  const Cm* scale;
  const Cm* shift;
};

// What the sums pass writes into dx besides its sums: nothing, scale * dz
// (the inference grad's dx), or dz (kept for the training grad's dx pass).
enum class SumsWrite { kNothing, kScaledDz, kDz };

// Sums of dz and dz * (x - mean); with kWrite also dx (SumsWrite) (the
// inference grad's single pass).
template <typename S, typename Op, SumsWrite kWrite>
struct GradSumsKernel : GradKernelInputs<S, Op> {
  using Cm = Compute<S>;
  struct Values {
    Cm mean, scale, shift;
  };
  static constexpr bool kSums = true;
  Values At(int64_t c) const {
    return {this->mean[c], this->scale[c], this->shift[c]};
  }
  Pair<Cm> Apply(int64_t i, const Values& v) const {
    const Cm xv = S::Load(this->x[i]);
    const Cm dz =
        NormalizeDz(this->op, S::Load(this->dy[i]), xv, v.scale, v.shift);
    if constexpr (kWrite == SumsWrite::kScaledDz) {
      this->dx[i] = S::Store(v.scale * dz);
    } else if constexpr (kWrite == SumsWrite::kDz) {
      this->dx[i] = S::Store(dz);
    }
    return {dz, dz * (xv - v.mean)};
  }
};

// The training grad's dx = scale * dz + c1 * (x - mean) + c0.
template <typename S, typename Op>
struct TrainingDxKernel : GradKernelInputs<S, Op> {
  using Cm = Compute<S>;
  struct Values {
    Cm mean;
    ChannelAffine<Cm> affine;
    TrainingDxCoefficients<Cm> c;
  };
  static constexpr bool kSums = false;
  const Cm* c1;
  const Cm* c0;
  Values At(int64_t c) const {
    return {this->mean[c],
            {this->scale[c], this->shift[c], Cm(0)},
            {c1[c], c0[c]}};
  }
  Pair<Cm> Apply(int64_t i, const Values& v) const {
    this->dx[i] = S::Store(TrainingDx(this->op, S::Load(this->dy[i]),
                                      S::Load(this->x[i]), v.mean, v.affine,
                                      v.c));
    return {};
  }
};

// The training grad's dx from the sums pass's dz, held in dx (CpuBatchNorm-
// TrainingGrad says when): the same expression as TrainingDx, so the same bits.
template <typename S>
struct TrainingDxOfDzKernel {
  using Storage = S;
  using Cm = Compute<S>;
  struct Values {
    Cm mean, scale;
    TrainingDxCoefficients<Cm> c;
  };
  static constexpr bool kSums = false;
  const typename S::Stored* x;
  typename S::Stored* dx;
  const Cm* mean;
  const Cm* scale;
  const Cm* c1;
  const Cm* c0;
  Values At(int64_t c) const { return {mean[c], scale[c], {c1[c], c0[c]}}; }
  Pair<Cm> Apply(int64_t i, const Values& v) const {
    dx[i] = S::Store(TrainingDxOfDz(S::Load(dx[i]), S::Load(x[i]), v.mean,
                                    v.scale, v.c));
    return {};
  }
};

// ---------------------------------------------------------- the walk ----

template <typename K>
using AccOf = typename K::Storage::Acc;

// Channels-last rows [r0, r1) x channels [c0, c1): a reduction adds the rows,
// four at a time, into the tile's partial sums pa[c], pb[c] (L1-resident; a
// loop GCC vectorises across the channels).
template <typename K>
void ChannelsLastTile(const K& k, const Tiling& t, int64_t r0, int64_t r1,
                      int64_t c0, int64_t c1, AccOf<K>* pa, AccOf<K>* pb) {
  using Acc = AccOf<K>;
  if constexpr (K::kSums) {
    std::fill(pa + c0, pa + c1, Acc(0));
    std::fill(pb + c0, pb + c1, Acc(0));
  }
  int64_t r = r0;
  if constexpr (K::kSums) {
    const int64_t n = t.cols;
    // Four rows per update of pa, pb: a row at a time, each update waits on
    // the store of the one before (a chain through memory that made the
    // statistics pass of a 32-channel tensor cost as much as the forward).
    for (; r + 4 <= r1; r += 4) {
      const int64_t at = r * n;
#pragma GCC ivdep
      for (int64_t c = c0; c < c1; ++c) {
        const auto v = k.At(c);
        const auto s0 = k.Apply(at + c, v);
        const auto s1 = k.Apply(at + n + c, v);
        const auto s2 = k.Apply(at + 2 * n + c, v);
        const auto s3 = k.Apply(at + 3 * n + c, v);
        pa[c] += (static_cast<Acc>(s0.a) + static_cast<Acc>(s1.a)) +
                 (static_cast<Acc>(s2.a) + static_cast<Acc>(s3.a));
        pb[c] += (static_cast<Acc>(s0.b) + static_cast<Acc>(s1.b)) +
                 (static_cast<Acc>(s2.b) + static_cast<Acc>(s3.b));
      }
    }
  }
  for (; r < r1; ++r) {
    const int64_t at = r * t.cols;
#pragma GCC ivdep
    for (int64_t c = c0; c < c1; ++c) {
      const auto s = k.Apply(at + c, k.At(c));
      if constexpr (K::kSums) {
        pa[c] += static_cast<Acc>(s.a);
        pb[c] += static_cast<Acc>(s.b);
      }
    }
  }
}

// One row of one channel (inner > 1), columns [c0, c1): a reduction keeps
// kLanes running sums; *sa, *sb get the totals.
template <typename K>
void ChannelRowTile(const K& k, const typename K::Values& v, int64_t at,
                    int64_t len, AccOf<K>* sa, AccOf<K>* sb) {
  using Acc = AccOf<K>;
  if constexpr (!K::kSums) {
#pragma GCC ivdep
    for (int64_t j = 0; j < len; ++j) k.Apply(at + j, v);
  } else {
    Acc la[kLanes] = {}, lb[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= len; j += kLanes) {
#pragma GCC ivdep
      for (int q = 0; q < kLanes; ++q) {
        const auto s = k.Apply(at + j + q, v);
        la[q] += static_cast<Acc>(s.a);
        lb[q] += static_cast<Acc>(s.b);
      }
    }
    for (int q = 0; j < len; ++j, ++q) {
      const auto s = k.Apply(at + j, v);
      la[q] += static_cast<Acc>(s.a);
      lb[q] += static_cast<Acc>(s.b);
    }
    Acc a = 0, b = 0;
    for (int q = 0; q < kLanes; ++q) {
      a += la[q];
      b += lb[q];
    }
    *sa = a;
    *sb = b;
  }
}

// Tiles [tile_begin, tile_end) of kernel k; a reduction writes its partial
// sums into pa, pb (Tiling::partials() each).
template <typename K>
void TileRange(const K& k, const Tiling& t, AccOf<K>* pa, AccOf<K>* pb,
               int64_t tile_begin, int64_t tile_end) {
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const int64_t rt = tile / t.col_tiles, ct = tile % t.col_tiles;
    const int64_t r0 = rt * t.row_block;
    const int64_t r1 = std::min(t.rows, r0 + t.row_block);
    const int64_t c0 = ct * t.col_block;
    const int64_t c1 = std::min(t.cols, c0 + t.col_block);
    if (t.by_channel()) {
      ChannelsLastTile(k, t, r0, r1, c0, c1, pa + rt * t.cols,
                          pb + rt * t.cols);
      continue;
    }
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t p = r * t.col_tiles + ct;
      ChannelRowTile(k, k.At(r % t.layout.channels), r * t.cols + c0,
                        c1 - c0, pa + p, pb + p);
    }
  }
}

#define TF_OPS_ISA_VARIANT(Suffix, TARGET, F16C)                        \
  template <typename K>                                                    \
  TF_OPS_ISA_ENTRY(TARGET) void Tiles##Suffix(            \
      const K& k, const Tiling& t, AccOf<K>* pa, AccOf<K>* pb,             \
      int64_t begin, int64_t end) {                                        \
    TileRange(k, t, pa, pb, begin, end);                                   \
  }
TF_OPS_FOR_EACH_CPU_ISA(TF_OPS_ISA_VARIANT)
#undef TF_OPS_ISA_VARIANT

template <typename K>
void Tiles(const K& k, const Tiling& t, AccOf<K>* pa, AccOf<K>* pb,
           int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(Tiles, k, t, pa, pb, begin, end)
}

// A whole pass of kernel k over the tensor, tiles spread over `parallel`.
template <typename S, typename K>
void RunPass(const K& k, const Tiling& t, Scratch<S> sc,
             int cycles_per_element, const ParallelFor& parallel) {
  parallel(t.tiles(), t.tile_elements() * cycles_per_element,
           [&](int64_t begin, int64_t end) {
             Tiles(k, t, sc.a, sc.b, begin, end);
           });
}

// fn(op, cycles) with the activation's functor, its formula fixed (Gelu's
// `approximate`) so that each loop holds one formula and vectorises, and its
// cost per element.
template <typename Fn>
void WithActivation(const ActivationChoice& act, const Fn& fn) {
  VisitActivation(act, [&](const auto& op) {
    const int cycles = std::decay_t<decltype(op)>::kCyclesPerElement;
    WithFixedFormula(op, [&](auto fixed) { fn(fixed, cycles); }, 0);
  });
}

// The activation's rough cycles per element (its functor's
// kCyclesPerElement).
inline int ActivationCycles(const ActivationChoice& act) {
  int cycles = 0;
  VisitActivation(act, [&](const auto& op) {
    cycles = std::decay_t<decltype(op)>::kCyclesPerElement;
  });
  return cycles;
}

// From this cost on the training grad keeps dz between its passes
// (CpuBatchNormTrainingGrad): the exponentials' activations, not ReLU's
// family or hard swish.
constexpr int kKeepDzCycles = 10;

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

// fn(c, sum_a, sum_b) for every channel, over `parallel`.
template <typename S, typename Fn>
void ForEachChannelSums(const Tiling& t, Scratch<S> sc,
                        const ParallelFor& parallel, const Fn& fn) {
  using Acc = typename S::Acc;
  const int64_t per_channel = t.partials() / std::max<int64_t>(1, sc.channels);
  parallel(sc.channels, 2 * per_channel + 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      Acc sa, sb;
      ReduceChannel(t, sc.a, sc.b, c, &sa, &sb);
      fn(c, sa, sb);
    }
  });
}

template <typename Cm>
Cm ChannelValue(const void* p, int64_t c, Cm absent) {
  return p == nullptr ? absent : static_cast<const Cm*>(p)[c];
}

// scale, shift, rstd and mean of every channel into the scratch.
template <typename S>
void SetAffine(Scratch<S> sc, const void* mean, const void* variance,
               const void* gamma, const void* beta, float epsilon) {
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

template <typename S, typename Op>
GradKernelInputs<S, Op> GradInputsOf(const Op& op, const void* dy,
                                     const void* x, void* dx, Scratch<S> sc) {
  using Stored = typename S::Stored;
  return {op,
          static_cast<const Stored*>(dy),
          static_cast<const Stored*>(x),
          static_cast<Stored*>(dx),
          sc.channel(kMean),
          sc.channel(kScale),
          sc.channel(kShift)};
}

// The grad ops' first pass (with dx: the inference grad's only one, or the
// training grad's dz kept): dbeta = sum(dz) into kSumA, dgamma = rstd *
// sum(dz * (x - mean)) into kSumB, and into dgamma and dbeta where given;
// into dx what `write` says (dx null: nothing). SetAffine first.
template <typename S>
void GradSums(const ActivationChoice& act, const void* dy, const void* x,
              void* dx, SumsWrite write, const Tiling& t, Scratch<S> sc,
              void* dgamma, void* dbeta, const ParallelFor& parallel) {
  using Cm = Compute<S>;
  WithActivation(act, [&](auto op, int cycles) {
    using Op = decltype(op);
    const GradKernelInputs<S, Op> in = GradInputsOf<S>(op, dy, x, dx, sc);
    if (dx == nullptr || write == SumsWrite::kNothing) {
      RunPass(GradSumsKernel<S, Op, SumsWrite::kNothing>{in}, t, sc,
              cycles + 7, parallel);
    } else if (write == SumsWrite::kScaledDz) {
      RunPass(GradSumsKernel<S, Op, SumsWrite::kScaledDz>{in}, t, sc,
              cycles + 7, parallel);
    } else {
      RunPass(GradSumsKernel<S, Op, SumsWrite::kDz>{in}, t, sc, cycles + 7,
              parallel);
    }
  });
  const Cm* rstd = sc.channel(kRstd);
  ForEachChannelSums(t, sc, parallel, [&](int64_t c, auto sa, auto sb) {
    const Cm dbeta_c = static_cast<Cm>(sa);
    const Cm dgamma_c = rstd[c] * static_cast<Cm>(sb);
    sc.channel(kSumA)[c] = dbeta_c;
    sc.channel(kSumB)[c] = dgamma_c;
    if (dbeta != nullptr) static_cast<Cm*>(dbeta)[c] = dbeta_c;
    if (dgamma != nullptr) static_cast<Cm*>(dgamma)[c] = dgamma_c;
  });
}

// Each channel's coefficients of dx into kC1, kC0: from the parameter
// gradients (per channel at dgamma, dbeta) over `count` elements.
template <typename S>
void SetTrainingDxCoefficients(const void* d_mean, const void* d_variance,
                               const Compute<S>* dgamma,
                               const Compute<S>* dbeta, double count,
                               Scratch<S> sc) {
  using Cm = Compute<S>;
  for (int64_t c = 0; c < sc.channels; ++c) {
    const TrainingDxCoefficients<Cm> co = TrainingDxOf(
        sc.channel(kScale)[c], sc.channel(kRstd)[c], dbeta[c], dgamma[c],
        ChannelValue(d_mean, c, Cm(0)), ChannelValue(d_variance, c, Cm(0)),
        static_cast<Cm>(count));
    sc.channel(kC1)[c] = co.c1;
    sc.channel(kC0)[c] = co.c0;
  }
}

// The training grad's second pass: dx from the parameter gradients
// (per channel at dgamma, dbeta) over `count` elements. SetAffine first.
template <typename S>
void TrainingDxPass(const ActivationChoice& act, const void* dy,
                    const void* x, void* dx, const void* d_mean,
                    const void* d_variance, const Compute<S>* dgamma,
                    const Compute<S>* dbeta, double count, const Tiling& t,
                    Scratch<S> sc, const ParallelFor& parallel) {
  SetTrainingDxCoefficients(d_mean, d_variance, dgamma, dbeta, count, sc);
  if (t.tiles() == 0) return;
  WithActivation(act, [&](auto op, int cycles) {
    using Op = decltype(op);
    RunPass(TrainingDxKernel<S, Op>{GradInputsOf<S>(op, dy, x, dx, sc),
                                    sc.channel(kC1), sc.channel(kC0)},
            t, sc, cycles + 8, parallel);
  });
}

template <typename S>
void ForwardPass(const ActivationChoice& act, const void* x, void* y,
                 const Tiling& t, Scratch<S> sc,
                 const ParallelFor& parallel) {
  using Stored = typename S::Stored;
  WithActivation(act, [&](auto op, int cycles) {
    using Op = decltype(op);
    RunPass(ForwardKernel<S, Op>{op, static_cast<const Stored*>(x),
                                 static_cast<Stored*>(y), sc.channel(kScale),
                                 sc.channel(kShift)},
            t, sc, cycles + 3, parallel);
  });
}

}  // namespace

int64_t BatchNormScratchDoubles(BatchNormLayout layout) {
  const Tiling t = MakeTiling(layout);
  return 2 * t.partials() + kChannelArrays * layout.channels;
}

void CpuBatchNormTraining(const ActivationChoice& act, Dtype dtype,
                          const void* x, const void* gamma, const void* beta,
                          float epsilon, void* y, void* mean, void* variance,
                          BatchNormLayout layout, double* scratch,
                          const ParallelFor& parallel) {
  const Tiling t = MakeTiling(layout);
  WithStorage(dtype, [&](auto s) {
    using S = decltype(s);
    using Acc = typename S::Acc;
    using Cm = Compute<S>;
    const Scratch<S> sc = ScratchOf<S>(scratch, t);
    const auto* xs = static_cast<const typename S::Stored*>(x);
    Cm* pivot = sc.channel(kPivot);
    for (int64_t c = 0; c < layout.channels; ++c) {
      pivot[c] = t.tiles() == 0 ? Cm(0) : S::Load(xs[c * layout.inner]);
    }
    RunPass(StatsKernel<S>{xs, pivot}, t, sc, 3, parallel);
    const Acc n = static_cast<Acc>(layout.count());
    ForEachChannelSums(t, sc, parallel, [&](int64_t c, Acc sa, Acc sb) {
      const ChannelMoments<Acc> m =
          MomentsFromSums(static_cast<Acc>(pivot[c]), sa, sb, n);
      static_cast<Cm*>(mean)[c] = static_cast<Cm>(m.mean);
      static_cast<Cm*>(variance)[c] = static_cast<Cm>(m.variance);
    });
    if (y == nullptr || t.tiles() == 0) return;
    SetAffine(sc, mean, variance, gamma, beta, epsilon);
    ForwardPass(act, x, y, t, sc, parallel);
  });
}

void CpuBatchNormTrainingGrad(const ActivationChoice& act, Dtype dtype,
                              const void* dy, const void* x,
                              const void* gamma, const void* beta,
                              const void* mean, const void* variance,
                              const void* d_mean, const void* d_variance,
                              float epsilon, void* dx, void* dgamma,
                              void* dbeta, BatchNormLayout layout,
                              double* scratch,
                              const ParallelFor& parallel) {
  const Tiling t = MakeTiling(layout);
  WithStorage(dtype, [&](auto s) {
    using S = decltype(s);
    using Cm = Compute<S>;
    const Scratch<S> sc = ScratchOf<S>(scratch, t);
    SetAffine(sc, mean, variance, gamma, beta, epsilon);
    // Where the activation's derivative costs more than a write and a read of
    // x's size (a transcendental: swish, GELU, ...), the sums pass also
    // writes dz into dx and the dx pass reads it back instead of
    // evaluating the derivative a second time. Only where dx holds the compute
    // type exactly (float, double: a 16-bit dx would round dz once more), and
    // not where dx is x's buffer (the dx pass still reads x).
    const bool keep_dz =
        dx != nullptr && dx != x && ActivationCycles(act) >= kKeepDzCycles &&
        std::is_same_v<typename S::Stored, Cm>;
    GradSums(act, dy, x, dx, keep_dz ? SumsWrite::kDz : SumsWrite::kNothing,
             t, sc, dgamma, dbeta, parallel);
    if (dx == nullptr) return;
    const double count = static_cast<double>(layout.count());
    if (!keep_dz) {
      TrainingDxPass(act, dy, x, dx, d_mean, d_variance, sc.channel(kSumB),
                     sc.channel(kSumA), count, t, sc, parallel);
      return;
    }
    SetTrainingDxCoefficients(d_mean, d_variance, sc.channel(kSumB),
                              sc.channel(kSumA), count, sc);
    if (t.tiles() == 0) return;
    using Stored = typename S::Stored;
    RunPass(TrainingDxOfDzKernel<S>{static_cast<const Stored*>(x),
                                    static_cast<Stored*>(dx),
                                    sc.channel(kMean), sc.channel(kScale),
                                    sc.channel(kC1), sc.channel(kC0)},
            t, sc, 4, parallel);
  });
}

void CpuBatchNormTrainingInputGrad(
    const ActivationChoice& act, Dtype dtype, const void* dy,
    const void* x, const void* gamma, const void* beta, const void* mean,
    const void* variance, const void* d_mean, const void* d_variance,
    const void* dgamma, const void* dbeta, double count, float epsilon,
    void* dx, BatchNormLayout layout, double* scratch,
    const ParallelFor& parallel) {
  const Tiling t = MakeTiling(layout);
  WithStorage(dtype, [&](auto s) {
    using S = decltype(s);
    using Cm = Compute<S>;
    const Scratch<S> sc = ScratchOf<S>(scratch, t);
    SetAffine(sc, mean, variance, gamma, beta, epsilon);
    TrainingDxPass(act, dy, x, dx, d_mean, d_variance,
                   static_cast<const Cm*>(dgamma),
                   static_cast<const Cm*>(dbeta), count, t, sc, parallel);
  });
}

void CpuBatchNormInference(const ActivationChoice& act, Dtype dtype,
                           const void* x, const void* gamma, const void* beta,
                           const void* mean, const void* variance,
                           float epsilon, void* y, BatchNormLayout layout,
                           double* scratch,
                           const ParallelFor& parallel) {
  const Tiling t = MakeTiling(layout);
  WithStorage(dtype, [&](auto s) {
    using S = decltype(s);
    const Scratch<S> sc = ScratchOf<S>(scratch, t);
    SetAffine(sc, mean, variance, gamma, beta, epsilon);
    if (t.tiles() > 0) ForwardPass(act, x, y, t, sc, parallel);
  });
}

void CpuBatchNormInferenceGrad(const ActivationChoice& act, Dtype dtype,
                               const void* dy, const void* x,
                               const void* gamma, const void* beta,
                               const void* mean, const void* variance,
                               float epsilon, void* dx, void* dgamma,
                               void* dbeta, BatchNormLayout layout,
                               double* scratch,
                               const ParallelFor& parallel) {
  const Tiling t = MakeTiling(layout);
  WithStorage(dtype, [&](auto s) {
    using S = decltype(s);
    const Scratch<S> sc = ScratchOf<S>(scratch, t);
    SetAffine(sc, mean, variance, gamma, beta, epsilon);
    GradSums(act, dy, x, dx, SumsWrite::kScaledDz, t, sc, dgamma, dbeta,
             parallel);
  });
}

}  // namespace tf_ops
