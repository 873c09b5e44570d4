// Memory-safety, value and determinism test of the group-norm CPU engine
// (group_norm_cpu.h), TF-free, built with AddressSanitizer and
// UndefinedBehaviorSanitizer like the other engine tests (`make engine-test`
// builds and runs it).
//
// In half, bfloat16, float and double, on every instruction set the CPU has
// (the widest with every shape, the others with the small ones), for every
// activation of the list and Identity; x seen as [n, b, c, i]: channels last
// (i = 1) with channel counts around the vector widths and several row tiles,
// channels first and a middle channel axis (b, i > 1) with odd run lengths;
// groups of one channel, of all channels and in between; on heap buffers of
// exactly the size each step may touch (ASan reports any access past either
// end):
//   - the forward (y, mean, rstd) and the backward (dx, dgamma, dbeta)
//     against a long double reference computed here from the definition
//     (two-pass mean and variance over each group's elements, found by their
//     coordinates, not the engine's units; the activation functors in
//     double), the backward fed the engine's own statistics as the grad op is;
//   - each step under several splits of its units (whole, one at a time, odd
//     chunks in reverse order, as thread counts would split them) and a second
//     run: bit-identical outputs every time, dgamma and dbeta included;
//   - in place, y over x and dx over dy or over x (as the kernels forward
//     their input buffers): the same bits.
// The kernels handle an empty x before the engine (NaN statistics, zero
// parameter gradients), so the engine is not called with one.
// Exit status: 0 when every check passes, 1 otherwise.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/engine/engine_check.h"
#include "tf_ops/cc/activation/activation_choice.h"
#include "tf_ops/cc/activation/activation_derivative.h"
#include "tf_ops/cc/core/cpu_isa.h"
#include "tf_ops/cc/group_norm/group_norm_cpu.h"
#include "tf_ops/cc/group_norm/group_norm_math.h"

namespace tf_ops {
namespace group_norm {
namespace {

using engine_check::Buffer;
using engine_check::checks;
using engine_check::Expect;
using engine_check::failures;
using engine_check::Store;

// eps: the dtype's unit roundoff.
const Store kStores[] = {{Dtype::kHalf, "half", 2, 0x1p-11},
                         {Dtype::kBFloat16, "bfloat16", 2, 0x1p-8},
                         {Dtype::kFloat, "float", 4, 0x1p-24},
                         {Dtype::kDouble, "double", 8, 0x1p-53}};

using Body = std::function<void(int64_t, int64_t)>;
using Split = std::function<void(int64_t, const Body&)>;
struct NamedSplit {
  const char* name;
  Split split;
};
const NamedSplit kSplits[] = {
    {"whole", [](int64_t n, const Body& f) { f(0, n); }},
    {"units",
     [](int64_t n, const Body& f) {
       for (int64_t u = 0; u < n; ++u) f(u, u + 1);
     }},
    {"reverse odd",
     [](int64_t n, const Body& f) {
       for (int64_t e = n; e > 0; e -= std::min<int64_t>(e, 3)) {
         f(e - std::min<int64_t>(e, 3), e);
       }
     }},
};

// The flat index of element (sample, row, channel, position).
int64_t At(const GroupNormShape& s, int64_t n, int64_t bb, int64_t ch,
           int64_t ii) {
  return ((n * s.b + bb) * s.c + ch) * s.i + ii;
}

// What one run of the engine gives, as bytes (compared bit for bit).
struct Outputs {
  std::vector<unsigned char> y, mean, rstd, dx, dgamma, dbeta;
  bool operator==(const Outputs& o) const {
    return y == o.y && mean == o.mean && rstd == o.rstd && dx == o.dx &&
           dgamma == o.dgamma && dbeta == o.dbeta;
  }
};

std::vector<unsigned char> Bytes(const void* p, size_t bytes) {
  const auto* c = static_cast<const unsigned char*>(p);
  return std::vector<unsigned char>(c, c + bytes);
}

// The inputs of a case, stored in the dtype (x, dy) and the compute type
// (gamma, beta).
struct Inputs {
  std::unique_ptr<char[]> x, dy, gamma, beta;
};

// In place: y written over x (forward) and dx over dy or x (backward).
enum class InPlace { kNone, kOverX, kOverDy };

// Forward then backward (fed the forward's statistics), each step's units
// split by `split`.
Outputs Run(const Store& k, const ActivationChoice& act,
            const GroupNormShape& s, float epsilon, const Inputs& in,
            const Split& split, InPlace in_place) {
  const GroupNormTiling t = MakeGroupNormTiling(s);
  const int64_t elems = s.elements(), stats = s.n * s.groups;
  const size_t bytes = elems * k.size;
  // Fresh copies of x and dy, so that in-place runs overwrite only these.
  auto x = Buffer(bytes), dy = Buffer(bytes);
  std::memcpy(x.get(), in.x.get(), bytes);
  std::memcpy(dy.get(), in.dy.get(), bytes);
  auto y = in_place == InPlace::kOverX ? nullptr : Buffer(bytes);
  auto mean = Buffer(stats * k.stat_size());
  auto rstd = Buffer(stats * k.stat_size());
  auto partials = std::unique_ptr<double[]>(
      new double[t.partials() + 2 * stats]);
  GroupNormBuffers io;
  io.x = x.get();
  io.gamma = in.gamma.get();
  io.beta = in.beta.get();
  io.y = y ? y.get() : x.get();
  io.mean = mean.get();
  io.rstd = rstd.get();
  io.partials = partials.get();
  const Dtype dtype = k.dtype;
  split(t.units(), [&](int64_t b, int64_t e) {
    CpuGroupNormSums(dtype, t, io, b, e);
  });
  CpuGroupNormStats(dtype, t, epsilon, io);
  split(t.units(), [&](int64_t b, int64_t e) {
    CpuGroupNormApply(act, dtype, t, io, b, e);
  });
  Outputs out;
  out.y = Bytes(io.y, bytes);
  out.mean = Bytes(mean.get(), stats * k.stat_size());
  out.rstd = Bytes(rstd.get(), stats * k.stat_size());
  // The backward reads the original x.
  std::memcpy(x.get(), in.x.get(), bytes);
  auto dx = in_place == InPlace::kNone ? Buffer(bytes) : nullptr;
  auto dgamma = Buffer(s.c * k.stat_size());
  auto dbeta = Buffer(s.c * k.stat_size());
  io.y = nullptr;
  io.dy = dy.get();
  io.dx = in_place == InPlace::kNone   ? dx.get()
          : in_place == InPlace::kOverX ? x.get()
                                        : dy.get();
  io.dgamma = dgamma.get();
  io.dbeta = dbeta.get();
  io.coefs = partials.get() + t.partials();
  split(t.units(), [&](int64_t b, int64_t e) {
    CpuGroupNormGradSums(act, dtype, t, io, b, e);
  });
  CpuGroupNormGradReduce(dtype, t, io);
  split(t.units(), [&](int64_t b, int64_t e) {
    CpuGroupNormGradApply(act, dtype, t, io, b, e);
  });
  out.dx = Bytes(io.dx, bytes);
  out.dgamma = Bytes(dgamma.get(), s.c * k.stat_size());
  out.dbeta = Bytes(dbeta.get(), s.c * k.stat_size());
  return out;
}

// The reference: per element y and dx, per group mean and rstd, per channel
// dgamma and dbeta with the sums of the magnitudes of their terms (their
// tolerance's scale).
struct Reference {
  std::vector<double> y, dx, mean, rstd, dgamma, dbeta, dgamma_abs, dbeta_abs;
};

template <typename Op>
Reference ReferenceOf(const Store& k, const Op& op, const GroupNormShape& s,
                      float epsilon, const Inputs& in, const void* mean_in,
                      const void* rstd_in) {
  const int64_t per = s.per_group();
  const long double m = static_cast<long double>(s.group_size());
  Reference r;
  r.y.assign(s.elements(), 0.0);
  r.dx.assign(s.elements(), 0.0);
  r.dgamma.assign(s.c, 0.0);
  r.dbeta.assign(s.c, 0.0);
  r.dgamma_abs.assign(s.c, 0.0);
  r.dbeta_abs.assign(s.c, 0.0);
  const auto each = [&](int64_t n, int64_t g, const auto& body) {
    for (int64_t bb = 0; bb < s.b; ++bb) {
      for (int64_t ch = g * per; ch < (g + 1) * per; ++ch) {
        for (int64_t ii = 0; ii < s.i; ++ii) body(At(s, n, bb, ch, ii), ch);
      }
    }
  };
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t g = 0; g < s.groups; ++g) {
      long double sum = 0, sq = 0;
      each(n, g, [&](int64_t j, int64_t) { sum += k.Get(in.x.get(), j); });
      const long double mean = sum / m;
      each(n, g, [&](int64_t j, int64_t) {
        const long double d = k.Get(in.x.get(), j) - mean;
        sq += d * d;
      });
      const long double rstd =
          1.0L / std::sqrt(sq / m + static_cast<long double>(epsilon));
      r.mean.push_back(static_cast<double>(mean));
      r.rstd.push_back(static_cast<double>(rstd));
      // The backward from the engine's statistics, as the grad op.
      const long double bm = k.GetStat(mean_in, n * s.groups + g);
      const long double br = k.GetStat(rstd_in, n * s.groups + g);
      long double sum_a = 0, sum_b = 0;
      each(n, g, [&](int64_t j, int64_t ch) {
        const double gamma = k.GetStat(in.gamma.get(), ch);
        const double beta = k.GetStat(in.beta.get(), ch);
        const long double xv = k.Get(in.x.get(), j);
        r.y[j] = op.Forward(static_cast<double>((xv - mean) * rstd * gamma +
                                                beta));
        const long double xhat = (xv - bm) * br;
        const long double dz =
            k.Get(in.dy.get(), j) *
            static_cast<long double>(DerivativeAtFeatures(
                op, static_cast<double>(xhat * gamma + beta)));
        sum_a += gamma * dz;
        sum_b += gamma * dz * xhat;
        r.dgamma[ch] += static_cast<double>(dz * xhat);
        r.dbeta[ch] += static_cast<double>(dz);
        r.dgamma_abs[ch] += static_cast<double>(std::fabs(dz * xhat));
        r.dbeta_abs[ch] += static_cast<double>(std::fabs(dz));
        r.dx[j] = static_cast<double>(dz);  // finished below
      });
      each(n, g, [&](int64_t j, int64_t ch) {
        const long double gamma = k.GetStat(in.gamma.get(), ch);
        const long double xhat = (k.Get(in.x.get(), j) - bm) * br;
        r.dx[j] = static_cast<double>(
            br * (gamma * r.dx[j] - sum_a / m - xhat * sum_b / m));
      });
    }
  }
  return r;
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0.0;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

template <typename Op>
void Check(const Store& k, const ActivationChoice& act, const Op& op,
           const char* op_name, const GroupNormShape& s, std::mt19937* rng) {
  const float epsilon = 1e-3f;
  const int64_t elems = s.elements();
  std::normal_distribution<double> normal(0.0, 1.0);
  Inputs in;
  in.x = Buffer(elems * k.size);
  in.dy = Buffer(elems * k.size);
  in.gamma = Buffer(s.c * k.stat_size());
  in.beta = Buffer(s.c * k.stat_size());
  for (int64_t j = 0; j < elems; ++j) {
    k.Put(in.x.get(), j, 3.0 + 2.0 * normal(*rng));  // |mean| > spread
    k.Put(in.dy.get(), j, normal(*rng));
  }
  for (int64_t ch = 0; ch < s.c; ++ch) {
    k.PutStat(in.gamma.get(), ch, 1.0 + 0.3 * normal(*rng));
    k.PutStat(in.beta.get(), ch, 0.3 * normal(*rng));
  }
  char what[200];
  std::snprintf(what, sizeof(what), "%s %s [%lld,%lld,%lld,%lld] groups %lld",
                k.name, op_name, static_cast<long long>(s.n),
                static_cast<long long>(s.b), static_cast<long long>(s.c),
                static_cast<long long>(s.i), static_cast<long long>(s.groups));

  const Outputs first = Run(k, act, s, epsilon, in, kSplits[0].split,
                            InPlace::kNone);
  for (const NamedSplit& sp : kSplits) {
    Expect(Run(k, act, s, epsilon, in, sp.split, InPlace::kNone) == first,
           "bit-identical (split, rerun)", what, 0, 0, 0);
  }
  Expect(Run(k, act, s, epsilon, in, kSplits[2].split, InPlace::kOverX) ==
             first,
         "in place: y over x, dx over x", what, 0, 0, 0);
  Expect(Run(k, act, s, epsilon, in, kSplits[1].split, InPlace::kOverDy) ==
             first,
         "in place: dx over dy", what, 0, 0, 0);

  const Reference r = ReferenceOf(k, op, s, epsilon, in, first.mean.data(),
                                  first.rstd.data());
  // Tolerances: the output's rounding, and the compute type's over the few
  // operations (and the activation's own error) before it.
  const double cu = k.wide() ? 0x1p-53 : 0x1p-24;
  const double tol_y = 2 * k.eps + 256 * cu, tol_dx = 2 * k.eps + 1024 * cu;
  // The statistics sum up to 36,000 elements a group in fixed tiles: double's
  // error grows with that length (8.4e-15 relative seen at 9000 x 8 / 2).
  const double tol_stat = 256 * cu, tol_sum = 256 * cu;
  const double sy = std::max(1.0, MaxAbs(r.y));
  const double sdx = std::max(1.0, MaxAbs(r.dx));
  for (int64_t j = 0; j < elems; ++j) {
    const double y = k.Get(first.y.data(), j), dx = k.Get(first.dx.data(), j);
    Expect(std::fabs(y - r.y[j]) <= tol_y * sy, "y", what, y, r.y[j], j);
    Expect(std::fabs(dx - r.dx[j]) <= tol_dx * sdx, "dx", what, dx, r.dx[j], j);
  }
  for (int64_t g = 0; g < s.n * s.groups; ++g) {
    const double mean = k.GetStat(first.mean.data(), g);
    const double rstd = k.GetStat(first.rstd.data(), g);
    // The mean's error scales with the spread (shifted sums), not |mean|.
    const double spread = std::fabs(r.mean[g]) + 1.0 / r.rstd[g];
    Expect(std::fabs(mean - r.mean[g]) <= tol_stat * spread, "mean", what,
           mean, r.mean[g], g);
    Expect(std::fabs(rstd - r.rstd[g]) <= tol_stat * r.rstd[g], "rstd", what,
           rstd, r.rstd[g], g);
  }
  for (int64_t ch = 0; ch < s.c; ++ch) {
    const double dg = k.GetStat(first.dgamma.data(), ch);
    const double db = k.GetStat(first.dbeta.data(), ch);
    Expect(std::fabs(dg - r.dgamma[ch]) <= tol_sum * (1 + r.dgamma_abs[ch]),
           "dgamma", what, dg, r.dgamma[ch], ch);
    Expect(std::fabs(db - r.dbeta[ch]) <= tol_sum * (1 + r.dbeta_abs[ch]),
           "dbeta", what, db, r.dbeta[ch], ch);
  }
}

// Every activation on the small shapes; Identity and Swish (the VAE's) on the
// large ones too.
void CheckAll(const Store& k, bool full, std::mt19937* rng) {
  // {n, b, c, i, groups}
  const std::vector<GroupNormShape> small = {
      {2, 7, 12, 1, 4},   // channels last, 3 channels a group
      {1, 5, 3, 1, 1},    // one group of all channels
      {3, 4, 6, 1, 6},    // a group per channel
      {2, 9, 17, 1, 17},  // odd channels around a vector's width
      {2, 1, 6, 35, 3},   // channels first, odd runs
      {2, 1, 5, 17, 5},   // channels first, a group per channel
      {1, 1, 4, 1, 1},    // channels first, runs of one
      {3, 4, 6, 5, 2},    // a middle channel axis: b and i > 1
  };
  const std::vector<GroupNormShape> large = {
      {2, 9000, 8, 1, 2},    // channels last, three row tiles
      {1, 700, 96, 1, 32},   // channels last, two row tiles, the VAE's groups
      {2, 1, 8, 4099, 4},    // channels first, long odd runs
  };
#define TF_OPS_GN_CASE(Name)                                          \
  {                                                                   \
    ActivationChoice act;                                             \
    act.SetKind(#Name);                                               \
    for (const GroupNormShape& s : small) {                           \
      Check(k, act, act.Name##_op, #Name, s, rng);                    \
    }                                                                 \
    if (full && (std::strcmp(#Name, "Identity") == 0 ||               \
                 std::strcmp(#Name, "Swish") == 0)) {                 \
      for (const GroupNormShape& s : large) {                         \
        Check(k, act, act.Name##_op, #Name, s, rng);                  \
      }                                                               \
    }                                                                 \
  }
  TF_OPS_FOR_EACH_CHOSEN_ACTIVATION(TF_OPS_GN_CASE)
#undef TF_OPS_GN_CASE
}

}  // namespace
}  // namespace group_norm
}  // namespace tf_ops

int main() {
  using namespace tf_ops;
  using namespace tf_ops::group_norm;
  std::mt19937 rng(43);
  // Every instruction set this CPU has, the widest with every shape.
  bool full = true;
  for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx2, CpuIsa::kBaseline}) {
    if (SetCpuIsa(isa) != isa) continue;
    std::printf("group_norm engine: %s\n", CpuIsaName(isa));
    for (const engine_check::Store& k : kStores) {
#ifndef TF_OPS_ENGINE_TEST_HALF
      if (k.dtype == Dtype::kHalf || k.dtype == Dtype::kBFloat16) continue;
#endif
      CheckAll(k, full, &rng);
    }
    full = false;
  }
  std::printf("SUMMARY checks family=group_norm-engine passed=%d failed=%d\n",
              engine_check::checks - engine_check::failures,
              engine_check::failures);
  return engine_check::failures == 0 ? 0 : 1;
}
