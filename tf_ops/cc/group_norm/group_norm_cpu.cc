// The group-norm ops' CPU loops (group_norm_cpu.h), compiled once per
// instruction set with core/cpu_isa.h's idiom. Channels last, each row's
// channels are contiguous: the loops run across channels with per-channel
// coefficient arrays and vectorise there. Otherwise a unit is one channel's
// runs of i contiguous elements, summed in kLanes independent lanes.

#include "tf_ops/cc/group_norm/group_norm_cpu.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tf_ops/cc/activation/activation_derivative.h"
#include "tf_ops/cc/core/cpu_isa.h"
#include "tf_ops/cc/core/cpu_storage.h"
#include "tf_ops/cc/group_norm/group_norm_math.h"

namespace tf_ops {
namespace group_norm {
namespace {

using cpu_storage::WithFixedFormula;
using cpu_storage::WithStorage;

constexpr int kLanes = 16;
// A channels-last unit holds at least this many elements (a few hundred
// microseconds of work), so that the partial sums stay small.
constexpr int64_t kUnitElements = int64_t{1} << 15;

template <typename S>
using Compute = decltype(S::Load(typename S::Stored()));

// fn(op) with the activation's functor, its formula fixed (Gelu's
// `approximate`) so that each loop holds one formula.
template <typename Fn>
void WithActivation(const ActivationChoice& act, const Fn& fn) {
  VisitActivation(act, [&](const auto& op) {
    WithFixedFormula(op, [&](auto fixed) { fn(fixed); }, 0);
  });
}

struct Index {
  const GroupNormTiling& t;
  int64_t sample(int64_t n) const {
    return n * t.shape.b * t.shape.c * t.shape.i;
  }
  int64_t group_of(int64_t ch) const { return ch / t.shape.per_group(); }
  int64_t stat(int64_t n, int64_t ch) const {
    return n * t.shape.groups + group_of(ch);
  }
  double* partial(double* p, int64_t n, int64_t tile, int k) const {
    return p + ((n * t.row_tiles + tile) * 2 + k) * t.shape.c;
  }
  const double* partial(const double* p, int64_t n, int64_t tile,
                        int k) const {
    return p + ((n * t.row_tiles + tile) * 2 + k) * t.shape.c;
  }
};

// The shift of group g of sample n: its first element.
template <typename S>
Compute<S> ShiftOf(const Index& ix, const typename S::Stored* x, int64_t n,
                   int64_t g) {
  return S::Load(x[ix.sample(n) + g * ix.t.shape.per_group() * ix.t.shape.i]);
}

// Per-channel affine coefficients of sample n: a = gamma * rstd, b = beta -
// mean * a (and rstd, -mean * rstd for xhat), in the compute type.
template <typename C>
struct ChannelCoefficients {
  std::vector<C> a, b, r, q;
};
template <typename C>
void CoefficientsOf(const Index& ix, const GroupNormBuffers& io, int64_t n,
                    int64_t ch0, int64_t ch1, ChannelCoefficients<C>* out) {
  const C* gamma = static_cast<const C*>(io.gamma);
  const C* beta = static_cast<const C*>(io.beta);
  const C* mean = static_cast<const C*>(io.mean);
  const C* rstd = static_cast<const C*>(io.rstd);
  const int64_t k = ch1 - ch0;
  out->a.resize(k);
  out->b.resize(k);
  out->r.resize(k);
  out->q.resize(k);
  for (int64_t ch = ch0; ch < ch1; ++ch) {
    const C m = mean[ix.stat(n, ch)], r = rstd[ix.stat(n, ch)];
    const C a = gamma[ch] * r;
    out->a[ch - ch0] = a;
    out->b[ch - ch0] = beta[ch] - m * a;
    out->r[ch - ch0] = r;
    out->q[ch - ch0] = -m * r;
  }
}

// Unit u's sample, and its rows (channels last) or channel.
struct Unit {
  int64_t n, tile, begin, end;
};
Unit UnitOf(const GroupNormTiling& t, int64_t u) {
  if (t.channels_last()) {
    const int64_t n = u / t.row_tiles, tile = u % t.row_tiles;
    return {n, tile, tile * t.row_block,
            std::min(t.shape.b, (tile + 1) * t.row_block)};
  }
  return {u / t.shape.c, 0, u % t.shape.c, u % t.shape.c + 1};
}

// Sums over one unit of fa(j, ch) and fb(j, ch) (j the flat index of an
// element of channel ch), into the unit's two rows of partials.
template <typename C, typename FA, typename FB>
void UnitSums(const GroupNormTiling& t, const Index& ix, const Unit& w,
              double* partials, const FA& fa, const FB& fb) {
  const int64_t c = t.shape.c;
  double* pa = ix.partial(partials, w.n, w.tile, 0);
  double* pb = ix.partial(partials, w.n, w.tile, 1);
  if (t.channels_last()) {
    std::fill(pa, pa + c, 0.0);
    std::fill(pb, pb + c, 0.0);
    for (int64_t row = w.begin; row < w.end; ++row) {
      const int64_t at = ix.sample(w.n) + row * c;
#pragma GCC ivdep
      for (int64_t ch = 0; ch < c; ++ch) {
        pa[ch] += static_cast<double>(fa(at + ch, ch));
        pb[ch] += static_cast<double>(fb(at + ch, ch));
      }
    }
    return;
  }
  const int64_t ch = w.begin, len = t.shape.i;
  double sa = 0.0, sb = 0.0;
  for (int64_t bb = 0; bb < t.shape.b; ++bb) {
    const int64_t at = ix.sample(w.n) + (bb * c + ch) * len;
    C la[kLanes] = {}, lb[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= len; j += kLanes) {
      for (int k = 0; k < kLanes; ++k) la[k] += fa(at + j + k, ch);
      for (int k = 0; k < kLanes; ++k) lb[k] += fb(at + j + k, ch);
    }
    for (int k = 0; j < len; ++j, ++k) {
      la[k] += fa(at + j, ch);
      lb[k] += fb(at + j, ch);
    }
    C ta = 0, tb = 0;
    for (int k = 0; k < kLanes; ++k) {
      ta += la[k];
      tb += lb[k];
    }
    sa += static_cast<double>(ta);
    sb += static_cast<double>(tb);
  }
  pa[ch] = sa;
  pb[ch] = sb;
}

// body(j, ch) for every element of one unit.
template <typename Body>
void UnitEach(const GroupNormTiling& t, const Index& ix, const Unit& w,
              const Body& body) {
  const int64_t c = t.shape.c;
  if (t.channels_last()) {
    for (int64_t row = w.begin; row < w.end; ++row) {
      const int64_t at = ix.sample(w.n) + row * c;
#pragma GCC ivdep
      for (int64_t ch = 0; ch < c; ++ch) body(at + ch, ch);
    }
    return;
  }
  const int64_t ch = w.begin, len = t.shape.i;
  for (int64_t bb = 0; bb < t.shape.b; ++bb) {
    const int64_t at = ix.sample(w.n) + (bb * c + ch) * len;
#pragma GCC ivdep
    for (int64_t j = 0; j < len; ++j) body(at + j, ch);
  }
}

// The channel range whose coefficients a unit needs.
inline void ChannelsOf(const GroupNormTiling& t, const Unit& w, int64_t* ch0,
                       int64_t* ch1) {
  *ch0 = t.channels_last() ? 0 : w.begin;
  *ch1 = t.channels_last() ? t.shape.c : w.begin + 1;
}

template <typename S>
void Sums(const GroupNormTiling& t, const GroupNormBuffers& io, int64_t begin,
          int64_t end) {
  using C = Compute<S>;
  const Index ix{t};
  const auto* x = static_cast<const typename S::Stored*>(io.x);
  std::vector<C> shift(t.shape.c);
  for (int64_t u = begin; u < end; ++u) {
    const Unit w = UnitOf(t, u);
    int64_t ch0, ch1;
    ChannelsOf(t, w, &ch0, &ch1);
    for (int64_t ch = ch0; ch < ch1; ++ch) {
      shift[ch - ch0] = ShiftOf<S>(ix, x, w.n, ix.group_of(ch));
    }
    const C* k = shift.data() - ch0;
    UnitSums<C>(
        t, ix, w, io.partials,
        [&](int64_t j, int64_t ch) { return S::Load(x[j]) - k[ch]; },
        [&](int64_t j, int64_t ch) {
          const C d = S::Load(x[j]) - k[ch];
          return d * d;
        });
  }
}

template <typename S, typename Op>
void Apply(const Op& op, const GroupNormTiling& t, const GroupNormBuffers& io,
           int64_t begin, int64_t end) {
  using C = Compute<S>;
  using Stored = typename S::Stored;
  const Index ix{t};
  const auto* x = static_cast<const Stored*>(io.x);
  auto* y = static_cast<Stored*>(io.y);
  ChannelCoefficients<C> cc;
  for (int64_t u = begin; u < end; ++u) {
    const Unit w = UnitOf(t, u);
    int64_t ch0, ch1;
    ChannelsOf(t, w, &ch0, &ch1);
    CoefficientsOf(ix, io, w.n, ch0, ch1, &cc);
    const C* a = cc.a.data() - ch0;
    const C* b = cc.b.data() - ch0;
    UnitEach(t, ix, w, [&](int64_t j, int64_t ch) {
      y[j] = S::Store(op.Forward(S::Load(x[j]) * a[ch] + b[ch]));
    });
  }
}

template <typename S, typename Op>
void GradSums(const Op& op, const GroupNormTiling& t,
              const GroupNormBuffers& io, int64_t begin, int64_t end) {
  using C = Compute<S>;
  using Stored = typename S::Stored;
  const Index ix{t};
  const auto* x = static_cast<const Stored*>(io.x);
  const auto* dy = static_cast<const Stored*>(io.dy);
  ChannelCoefficients<C> cc;
  for (int64_t u = begin; u < end; ++u) {
    const Unit w = UnitOf(t, u);
    int64_t ch0, ch1;
    ChannelsOf(t, w, &ch0, &ch1);
    CoefficientsOf(ix, io, w.n, ch0, ch1, &cc);
    const C* a = cc.a.data() - ch0;
    const C* b = cc.b.data() - ch0;
    const C* r = cc.r.data() - ch0;
    const C* q = cc.q.data() - ch0;
    const auto dz = [&](int64_t j, int64_t ch) {
      return S::Load(dy[j]) *
             DerivativeAtFeatures(op, S::Load(x[j]) * a[ch] + b[ch]);
    };
    UnitSums<C>(t, ix, w, io.partials, dz, [&](int64_t j, int64_t ch) {
      return dz(j, ch) * (S::Load(x[j]) * r[ch] + q[ch]);
    });
  }
}

template <typename S, typename Op>
void GradApply(const Op& op, const GroupNormTiling& t,
               const GroupNormBuffers& io, int64_t begin, int64_t end) {
  using C = Compute<S>;
  using Stored = typename S::Stored;
  const Index ix{t};
  const auto* x = static_cast<const Stored*>(io.x);
  const auto* dy = static_cast<const Stored*>(io.dy);
  auto* dx = static_cast<Stored*>(io.dx);
  ChannelCoefficients<C> cc;
  std::vector<C> k2(t.shape.c), k3(t.shape.c);
  for (int64_t u = begin; u < end; ++u) {
    const Unit w = UnitOf(t, u);
    int64_t ch0, ch1;
    ChannelsOf(t, w, &ch0, &ch1);
    CoefficientsOf(ix, io, w.n, ch0, ch1, &cc);
    for (int64_t ch = ch0; ch < ch1; ++ch) {
      const double* k = io.coefs + 2 * ix.stat(w.n, ch);
      k2[ch - ch0] = static_cast<C>(k[0]);
      k3[ch - ch0] = static_cast<C>(k[1]);
    }
    const C* a = cc.a.data() - ch0;
    const C* b = cc.b.data() - ch0;
    const C* c2 = k2.data() - ch0;
    const C* c3 = k3.data() - ch0;
    UnitEach(t, ix, w, [&](int64_t j, int64_t ch) {
      const C xv = S::Load(x[j]);
      const C dz = S::Load(dy[j]) * DerivativeAtFeatures(op, xv * a[ch] + b[ch]);
      dx[j] = S::Store(dz * a[ch] + xv * c2[ch] + c3[ch]);
    });
  }
}

// The passes that take an activation, as types: one entry and one picker below
// serve them all.
struct ApplyPass {
  template <typename S, typename Op>
  static void Run(const Op& op, const GroupNormTiling& t,
                  const GroupNormBuffers& io, int64_t begin, int64_t end) {
    Apply<S>(op, t, io, begin, end);
  }
};
struct GradSumsPass {
  template <typename S, typename Op>
  static void Run(const Op& op, const GroupNormTiling& t,
                  const GroupNormBuffers& io, int64_t begin, int64_t end) {
    GradSums<S>(op, t, io, begin, end);
  }
};
struct GradApplyPass {
  template <typename S, typename Op>
  static void Run(const Op& op, const GroupNormTiling& t,
                  const GroupNormBuffers& io, int64_t begin, int64_t end) {
    GradApply<S>(op, t, io, begin, end);
  }
};

// Each (pass, storage, activation) loop is its own flattened entry, compiled
// for TARGET; the functions that pick one by dtype and activation are plain.
// One flattened function holding every pair compiled many times slower (the
// sanitizer build above all) for the same machine code.
#define TF_OPS_ISA_VARIANT(Suffix, TARGET, F16C)                             \
  template <typename S>                                                      \
  TF_OPS_ISA_ENTRY(TARGET) void GroupSumsOf##Suffix(                         \
      const GroupNormTiling& t, const GroupNormBuffers& io, int64_t begin,   \
      int64_t end) {                                                         \
    Sums<S>(t, io, begin, end);                                              \
  }                                                                          \
  template <typename Pass, typename S, typename Op>                          \
  TF_OPS_ISA_ENTRY(TARGET) void GroupPassOf##Suffix(                         \
      const Op& op, const GroupNormTiling& t, const GroupNormBuffers& io,    \
      int64_t begin, int64_t end) {                                          \
    Pass::template Run<S>(op, t, io, begin, end);                            \
  }                                                                          \
  void GroupSums##Suffix(Dtype dtype, const GroupNormTiling& t,              \
                         const GroupNormBuffers& io, int64_t begin,          \
                         int64_t end) {                                      \
    WithStorage(dtype, [&](auto s) {                                         \
      GroupSumsOf##Suffix<decltype(s)>(t, io, begin, end);                   \
    });                                                                      \
  }                                                                          \
  template <typename Pass>                                                   \
  void GroupPass##Suffix(Pass, const ActivationChoice& act, Dtype dtype,     \
                         const GroupNormTiling& t,                           \
                         const GroupNormBuffers& io, int64_t begin,          \
                         int64_t end) {                                      \
    WithStorage(dtype, [&](auto s) {                                         \
      WithActivation(act, [&](const auto& op) {                              \
        GroupPassOf##Suffix<Pass, decltype(s)>(op, t, io, begin, end);       \
      });                                                                    \
    });                                                                      \
  }

TF_OPS_FOR_EACH_CPU_ISA(TF_OPS_ISA_VARIANT)
#undef TF_OPS_ISA_VARIANT

}  // namespace

int64_t GroupNormTiling::cycles_per_unit(int activation_cycles) const {
  const int64_t per_unit = channels_last() ? row_block * shape.c
                                           : shape.b * shape.i;
  return std::max<int64_t>(1, per_unit * (2 + activation_cycles));
}

GroupNormTiling MakeGroupNormTiling(const GroupNormShape& shape) {
  GroupNormTiling t;
  t.shape = shape;
  if (t.channels_last()) {
    const int64_t c = std::max<int64_t>(1, shape.c);
    t.row_block = std::max<int64_t>(1, (kUnitElements + c - 1) / c);
    t.row_tiles = std::max<int64_t>(1, (shape.b + t.row_block - 1) / t.row_block);
  }
  return t;
}

void CpuGroupNormSums(Dtype dtype, const GroupNormTiling& t,
                      const GroupNormBuffers& io, int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(GroupSums, dtype, t, io, begin, end)
}

void CpuGroupNormApply(const ActivationChoice& act, Dtype dtype,
                       const GroupNormTiling& t, const GroupNormBuffers& io,
                       int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(GroupPass, ApplyPass{}, act, dtype, t, io,
                          begin, end)
}

void CpuGroupNormGradSums(const ActivationChoice& act, Dtype dtype,
                          const GroupNormTiling& t, const GroupNormBuffers& io,
                          int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(GroupPass, GradSumsPass{}, act, dtype, t, io,
                          begin, end)
}

void CpuGroupNormGradApply(const ActivationChoice& act, Dtype dtype,
                           const GroupNormTiling& t, const GroupNormBuffers& io,
                           int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(GroupPass, GradApplyPass{}, act, dtype, t, io,
                          begin, end)
}

void CpuGroupNormStats(Dtype dtype, const GroupNormTiling& t, double epsilon,
                       const GroupNormBuffers& io) {
  WithStorage(dtype, [&](auto s) {
    using S = decltype(s);
    using C = Compute<S>;
    const Index ix{t};
    const auto* x = static_cast<const typename S::Stored*>(io.x);
    C* mean = static_cast<C*>(io.mean);
    C* rstd = static_cast<C*>(io.rstd);
    const int64_t per = t.shape.per_group();
    const double m = static_cast<double>(t.shape.group_size());
    for (int64_t n = 0; n < t.shape.n; ++n) {
      for (int64_t g = 0; g < t.shape.groups; ++g) {
        double s1 = 0.0, s2 = 0.0;
        for (int64_t tile = 0; tile < t.row_tiles; ++tile) {
          const double* p1 = ix.partial(io.partials, n, tile, 0);
          const double* p2 = ix.partial(io.partials, n, tile, 1);
          for (int64_t ch = g * per; ch < (g + 1) * per; ++ch) {
            s1 += p1[ch];
            s2 += p2[ch];
          }
        }
        const GroupStats st = StatsOf(
            static_cast<double>(ShiftOf<S>(ix, x, n, g)), s1, s2, m, epsilon);
        mean[n * t.shape.groups + g] = static_cast<C>(st.mean);
        rstd[n * t.shape.groups + g] = static_cast<C>(st.rstd);
      }
    }
  });
}

void CpuGroupNormGradReduce(Dtype dtype, const GroupNormTiling& t,
                            const GroupNormBuffers& io) {
  WithStorage(dtype, [&](auto s) {
    using C = Compute<decltype(s)>;
    const Index ix{t};
    const int64_t c = t.shape.c, per = t.shape.per_group();
    const C* gamma = static_cast<const C*>(io.gamma);
    const C* mean = static_cast<const C*>(io.mean);
    const C* rstd = static_cast<const C*>(io.rstd);
    std::vector<double> dgamma(c, 0.0), dbeta(c, 0.0), p(c), q(c);
    const double m = static_cast<double>(t.shape.group_size());
    for (int64_t n = 0; n < t.shape.n; ++n) {
      std::fill(p.begin(), p.end(), 0.0);
      std::fill(q.begin(), q.end(), 0.0);
      for (int64_t tile = 0; tile < t.row_tiles; ++tile) {
        const double* p1 = ix.partial(io.partials, n, tile, 0);
        const double* p2 = ix.partial(io.partials, n, tile, 1);
        for (int64_t ch = 0; ch < c; ++ch) {
          p[ch] += p1[ch];
          q[ch] += p2[ch];
        }
      }
      for (int64_t g = 0; g < t.shape.groups; ++g) {
        double a = 0.0, b = 0.0;
        for (int64_t ch = g * per; ch < (g + 1) * per; ++ch) {
          a += static_cast<double>(gamma[ch]) * p[ch];
          b += static_cast<double>(gamma[ch]) * q[ch];
          dbeta[ch] += p[ch];
          dgamma[ch] += q[ch];
        }
        const int64_t at = n * t.shape.groups + g;
        const GradCoefficients k = GradCoefficientsOf(
            static_cast<double>(mean[at]), static_cast<double>(rstd[at]), a, b,
            m);
        io.coefs[2 * at] = k.k2;
        io.coefs[2 * at + 1] = k.k3;
      }
    }
    for (int64_t ch = 0; ch < c; ++ch) {
      static_cast<C*>(io.dgamma)[ch] = static_cast<C>(dgamma[ch]);
      static_cast<C*>(io.dbeta)[ch] = static_cast<C>(dbeta[ch]);
    }
  });
}

}  // namespace group_norm
}  // namespace tf_ops
