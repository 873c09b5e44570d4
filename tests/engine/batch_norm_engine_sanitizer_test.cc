// Memory-safety, value and determinism test of the batch-norm CPU engine
// (batch_norm_cpu.h), TF-free, built with AddressSanitizer and
// UndefinedBehaviorSanitizer like the other engine tests (`make engine-test`).
//
// For every activation (and Identity), float, double and half (bfloat16
// shares half's code paths but its rounding), on every instruction set the
// CPU has, and layouts around the vector widths and the tile size (channels-last, channels-first, several tiles along either axis,
// an empty batch), on heap buffers of exactly the size each call may touch:
//   - the ops against a double reference computed here from the definition
//     (two-pass mean and variance; the activation functors in double), with
//     and without gamma/beta; the training grad also as its two halves (the
//     inference grad's sums, then the input-grad pass), and the passes left
//     out when y or dx is null (the statistics alone, the sums alone);
//   - each op run under several ParallelFor splits (whole, one unit at a time,
//     odd chunks in reverse order, as thread counts would split the work):
//     bit-identical outputs every time;
//   - an empty batch: as Keras's layer, NaN statistics, so NaN dgamma
//     (rstd(NaN) times an empty sum), zero dbeta.
// epsilon is a float, as the ops' attribute: the reference takes the same
// float value (in double).
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

#include "tf_ops/cc/activation/activation_choice.h"
#include "tf_ops/cc/batch_norm/batch_norm_cpu.h"
#include "tf_ops/cc/batch_norm/batch_norm_math.h"
#include "tf_ops/cc/core/cpu_isa.h"
#include "tf_ops/cc/core/narrow_float.h"

namespace tf_ops {
namespace {

int failures = 0;
int checks = 0;

void Expect(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    if (failures < 40) std::printf("FAILED %s\n", what.c_str());
  }
}

// Exactly-sized heap buffers (ASan sees any access past either end).
template <typename T>
std::unique_ptr<T[]> Alloc(int64_t n) {
  return std::unique_ptr<T[]>(new T[std::max<int64_t>(n, 0)]);
}

// Storage helpers: S is the stored type, half as uint16_t.
template <typename S>
double ToDouble(S v) { return static_cast<double>(v); }
template <>
double ToDouble<uint16_t>(uint16_t v) { return narrow_float::HalfToFloat(v); }
template <typename S>
S FromDouble(double v) { return static_cast<S>(v); }
template <>
uint16_t FromDouble<uint16_t>(double v) {
  return narrow_float::FloatToHalf(static_cast<float>(v));
}
template <typename S> constexpr Dtype DtypeOfS();
template <> constexpr Dtype DtypeOfS<float>() { return Dtype::kFloat; }
template <> constexpr Dtype DtypeOfS<double>() { return Dtype::kDouble; }
template <> constexpr Dtype DtypeOfS<uint16_t>() { return Dtype::kHalf; }
template <typename S>
using U = std::conditional_t<std::is_same<S, double>::value, double, float>;
template <typename S>
double Rtol() {
  return std::is_same<S, double>::value ? 1e-10
         : std::is_same<S, float>::value ? 2e-4 : 6e-3;
}

using Split = std::function<void(int64_t, int64_t,
                                 const std::function<void(int64_t, int64_t)>&)>;
std::vector<std::pair<const char*, Split>> Splits() {
  return {
      {"whole", [](int64_t n, int64_t, const std::function<void(int64_t, int64_t)>& f) {
         if (n > 0) f(0, n);
       }},
      // One unit at a time where that is affordable (tiles, channels), else
      // many small odd shards.
      {"units", [](int64_t n, int64_t, const std::function<void(int64_t, int64_t)>& f) {
         const int64_t k = n <= 4096 ? 1 : 2 * (n / 2048) + 1;
         for (int64_t i = 0; i < n; i += k) f(i, std::min(n, i + k));
       }},
      {"reverse odd", [](int64_t n, int64_t, const std::function<void(int64_t, int64_t)>& f) {
         const int64_t k = 7;
         for (int64_t e = n; e > 0; e -= std::min(e, k)) f(e - std::min(e, k), e);
       }},
  };
}

template <typename Op>
double F(const Op& op, double z) { return op.Forward(z); }
template <typename Op>
double DF(const Op& op, double z) { return DerivativeAtFeatures(op, z); }

bool Near(double got, double want, double scale, double rtol) {
  if (std::isnan(want)) return std::isnan(got);
  return std::fabs(got - want) <= rtol * std::max(1.0, scale);
}

template <typename S, typename Op>
void CheckCase(const ActivationChoice& act, const Op& op, const char* name,
               BatchNormLayout l, bool affine, std::mt19937* rng) {
  using V = U<S>;
  const Dtype dtype = DtypeOfS<S>();
  const int64_t n = l.outer * l.channels * l.inner, C = l.channels;
  const int64_t count = l.count();
  std::normal_distribution<double> normal(0.0, 1.0);
  auto x = Alloc<S>(n), dy = Alloc<S>(n);
  auto gamma = Alloc<V>(C), beta = Alloc<V>(C), dm = Alloc<V>(C), dv = Alloc<V>(C);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = FromDouble<S>(2.0 + 1.5 * normal(*rng));
    dy[i] = FromDouble<S>(normal(*rng));
  }
  for (int64_t c = 0; c < C; ++c) {
    gamma[c] = static_cast<V>(1.0 + 0.3 * normal(*rng));
    beta[c] = static_cast<V>(0.3 * normal(*rng));
    dm[c] = static_cast<V>(normal(*rng));
    dv[c] = static_cast<V>(normal(*rng));
  }
  const float eps = 1e-3f;
  const V* g = affine ? gamma.get() : nullptr;
  const V* b = affine ? beta.get() : nullptr;
  auto at = [&](int64_t c, int64_t m) {
    return (m / l.inner) * C * l.inner + c * l.inner + m % l.inner;
  };
  const std::string what = std::string(name) + " dtype " +
                           std::to_string(int(dtype)) + " [" +
                           std::to_string(l.outer) + "," + std::to_string(C) +
                           "," + std::to_string(l.inner) + "]" +
                           (affine ? "" : " no gamma/beta");

  // Double reference.
  std::vector<double> rm(C), rv(C), ry(n), rdx(n), rdg(C), rdb(C), ryi(n),
      rdxi(n);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, s2 = 0;
    for (int64_t m = 0; m < count; ++m) s += ToDouble(x[at(c, m)]);
    rm[c] = s / count;
    for (int64_t m = 0; m < count; ++m) {
      const double d = ToDouble(x[at(c, m)]) - rm[c];
      s2 += d * d;
    }
    rv[c] = s2 / count;
    const double ga = affine ? gamma[c] : 1.0, be = affine ? beta[c] : 0.0;
    const double r = 1.0 / std::sqrt(rv[c] + double(eps));
    const double sc = ga * r, sh = be - rm[c] * sc;
    double sdz = 0, sdzx = 0;
    for (int64_t m = 0; m < count; ++m) {
      const int64_t i = at(c, m);
      const double xv = ToDouble(x[i]);
      const double z = xv * sc + sh;
      ry[i] = F(op, z);
      // Within rounding of a kink (ReLU6's 0 and 6, LeakyReLU's 0) either
      // branch is right, and the engine's float z may take the other one: no
      // upstream gradient there, so both give the same sums.
      const double near = 1e-4 * std::max(1.0, std::fabs(z));
      if (std::fabs(DF(op, z + near) - DF(op, z - near)) > 0.01) {
        dy[i] = FromDouble<S>(0.0);  // a jump of f', not its slope
      }
      const double dz = ToDouble(dy[i]) * DF(op, z);
      sdz += dz;
      sdzx += dz * (xv - rm[c]);
    }
    rdb[c] = sdz;
    rdg[c] = r * sdzx;
    for (int64_t m = 0; m < count; ++m) {
      const int64_t i = at(c, m);
      const double xv = ToDouble(x[i]);
      const double dz = ToDouble(dy[i]) * DF(op, xv * sc + sh);
      rdx[i] = sc * (dz - sdz / count - (xv - rm[c]) * r * r * sdzx / count) +
               dm[c] / count + 2.0 * dv[c] * (xv - rm[c]) / count;
      ryi[i] = ry[i];
      rdxi[i] = sc * dz;
    }
  }
  auto max_abs = [](const std::vector<double>& v) {
    double m = 0;
    for (double e : v) if (std::isfinite(e)) m = std::max(m, std::fabs(e));
    return m;
  };

  std::vector<std::vector<unsigned char>> first;
  int split_index = 0;
  for (const auto& [split_name, split] : Splits()) {
    auto scratch = Alloc<double>(BatchNormScratchDoubles(l));
    auto y = Alloc<S>(n), dx = Alloc<S>(n), yi = Alloc<S>(n), dxi = Alloc<S>(n);
    auto mean = Alloc<V>(C), var = Alloc<V>(C), dg = Alloc<V>(C), db = Alloc<V>(C),
         dgi = Alloc<V>(C), dbi = Alloc<V>(C);
    CpuBatchNormTraining(act, dtype, x.get(), g, b, eps, y.get(), mean.get(),
                         var.get(), l, scratch.get(), split);
    CpuBatchNormTrainingGrad(act, dtype, dy.get(), x.get(), g, b, mean.get(),
                             var.get(), dm.get(), dv.get(), eps, dx.get(),
                             dg.get(), db.get(), l, scratch.get(), split);
    CpuBatchNormInference(act, dtype, x.get(), g, b, mean.get(), var.get(), eps,
                          yi.get(), l, scratch.get(), split);
    CpuBatchNormInferenceGrad(act, dtype, dy.get(), x.get(), g, b, mean.get(),
                              var.get(), eps, dxi.get(), dgi.get(), dbi.get(),
                              l, scratch.get(), split);
    // The passes left out: the statistics alone, the sums alone; and the
    // training grad as its two halves, which must give its very bits.
    auto mean2 = Alloc<V>(C), var2 = Alloc<V>(C), dg2 = Alloc<V>(C),
         db2 = Alloc<V>(C), dg3 = Alloc<V>(C), db3 = Alloc<V>(C);
    auto dx2 = Alloc<S>(n);
    CpuBatchNormTraining(act, dtype, x.get(), g, b, eps, nullptr, mean2.get(),
                         var2.get(), l, scratch.get(), split);
    CpuBatchNormTrainingGrad(act, dtype, dy.get(), x.get(), g, b, mean.get(),
                             var.get(), dm.get(), dv.get(), eps, nullptr,
                             dg3.get(), db3.get(), l, scratch.get(), split);
    CpuBatchNormInferenceGrad(act, dtype, dy.get(), x.get(), g, b, mean.get(),
                              var.get(), eps, nullptr, dg2.get(), db2.get(), l,
                              scratch.get(), split);
    CpuBatchNormTrainingInputGrad(
        act, dtype, dy.get(), x.get(), g, b, mean.get(), var.get(), dm.get(),
        dv.get(), dg2.get(), db2.get(), static_cast<double>(count), eps,
        dx2.get(), l, scratch.get(), split);
    auto same = [](const void* a, const void* b, int64_t bytes) {
      return bytes == 0 || std::memcmp(a, b, bytes) == 0;
    };
    Expect(same(mean.get(), mean2.get(), C * sizeof(V)) &&
               same(var.get(), var2.get(), C * sizeof(V)),
           what + ": statistics alone (y null) as with y");
    Expect(same(dg.get(), dg2.get(), C * sizeof(V)) &&
               same(db.get(), db2.get(), C * sizeof(V)) &&
               same(dg.get(), dg3.get(), C * sizeof(V)) &&
               same(db.get(), db3.get(), C * sizeof(V)),
           what + ": grad sums alone (dx null) as with dx");
    Expect(same(dx.get(), dx2.get(), n * sizeof(S)),
           what + ": training grad = inference grad sums + input-grad pass");
    std::vector<std::vector<unsigned char>> got;
    auto keep = [&](const void* p, int64_t bytes) {
      const auto* c = static_cast<const unsigned char*>(p);
      got.emplace_back(c, c + bytes);
    };
    keep(y.get(), n * sizeof(S)); keep(dx.get(), n * sizeof(S));
    keep(yi.get(), n * sizeof(S)); keep(dxi.get(), n * sizeof(S));
    keep(mean.get(), C * sizeof(V)); keep(var.get(), C * sizeof(V));
    keep(dg.get(), C * sizeof(V)); keep(db.get(), C * sizeof(V));
    keep(dgi.get(), C * sizeof(V)); keep(dbi.get(), C * sizeof(V));
    if (split_index++ == 0) {
      first = got;
      const double rt = Rtol<S>();
      // Scales once per output (not per element).
      const double s_rm = max_abs(rm), s_rv = max_abs(rv), s_dg = max_abs(rdg),
                   s_db = max_abs(rdb), s_y = max_abs(ry), s_dx = max_abs(rdx),
                   s_yi = max_abs(ryi), s_dxi = max_abs(rdxi);
      bool ok_stats = true, ok_y = true, ok_dx = true, ok_p = true, ok_i = true;
      // An empty batch's references are NaN statistics and dgamma, 0 dbeta.
      for (int64_t c = 0; c < C; ++c) {
        ok_stats &= Near(mean[c], rm[c], s_rm, rt) &&
                    Near(var[c], rv[c], s_rv, rt);
        ok_p &= Near(dg[c], rdg[c], s_dg, rt) && Near(db[c], rdb[c], s_db, rt) &&
                Near(dgi[c], rdg[c], s_dg, rt) && Near(dbi[c], rdb[c], s_db, rt);
      }
      for (int64_t i = 0; i < n; ++i) {
        ok_y &= Near(ToDouble(y[i]), ry[i], s_y, rt);
        ok_dx &= Near(ToDouble(dx[i]), rdx[i], s_dx, 4 * rt);
        ok_i &= Near(ToDouble(yi[i]), ryi[i], s_yi, rt) &&
                Near(ToDouble(dxi[i]), rdxi[i], s_dxi, rt);
      }
      Expect(ok_stats, what + ": mean and variance");
      Expect(ok_y, what + ": training y");
      Expect(ok_dx, what + ": training dx");
      Expect(ok_p, what + ": dgamma and dbeta");
      Expect(ok_i, what + ": inference y and dx");
    } else {
      Expect(got == first, what + ": bit-identical under split " + split_name);
    }
  }
}

// `full`: every layout; else the small ones (the other instruction sets).
template <typename S>
void CheckDtype(std::mt19937* rng, bool full) {
  std::vector<BatchNormLayout> layouts = {
      // Channels-last: fewer and more channels than a vector holds; a
      // channel alone, inner rows of one channel; empty batches.
      {1, 1, 1}, {5, 3, 1}, {7, 1, 33}, {2, 5, 17}, {13, 35, 1}, {0, 3, 4},
      {4, 3, 0}};
  if (full) {
    // Two row tiles (channels-last), two tiles along inner, two column
    // tiles.
    layouts.insert(layouts.end(), {{2500, 17, 1}, {1, 2, 33000},
                                   {22000, 3, 1}, {1, 33000, 1}});
  }
#define TF_OPS_BN_CASE(Name)                                                 \
  {                                                                          \
    ActivationChoice act;                                                    \
    act.SetKind(#Name);                                                      \
    for (size_t li = 0; li < layouts.size(); ++li) {                         \
      CheckCase<S>(act, act.Name##_op, #Name, layouts[li], li % 2 == 0, rng); \
    }                                                                        \
  }
  TF_OPS_FOR_EACH_CHOSEN_ACTIVATION(TF_OPS_BN_CASE)
#undef TF_OPS_BN_CASE
}

}  // namespace
}  // namespace tf_ops

int main() {
  std::mt19937 rng(23);
  // Every instruction set this CPU has, the widest with every layout.
  bool full = true;
  for (tf_ops::CpuIsa isa : {tf_ops::CpuIsa::kAvx512, tf_ops::CpuIsa::kAvx2,
                             tf_ops::CpuIsa::kBaseline}) {
    if (tf_ops::SetCpuIsa(isa) != isa) continue;
    std::printf("batch_norm engine: %s\n", tf_ops::CpuIsaName(isa));
    tf_ops::CheckDtype<float>(&rng, full);
    tf_ops::CheckDtype<double>(&rng, full);
    tf_ops::CheckDtype<uint16_t>(&rng, full);
    full = false;
  }
  std::printf("batch_norm engine: %d checks, %d failed\n", tf_ops::checks,
              tf_ops::failures);
  return tf_ops::failures == 0 ? 0 : 1;
}
