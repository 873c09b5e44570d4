// Memory-safety and value test of the normalisation ops' CPU engine
// (norm_cpu.h), TF-free, built with AddressSanitizer and
// UndefinedBehaviorSanitizer like the other engine tests (`make engine-test`
// builds and runs it).
//
// On every instruction-set variant this CPU runs, for layer norm and RMS
// norm, without and with the residual, in half, bfloat16, float and double,
// rows of 1 to 16384 elements (odd lengths and the vector widths' edges),
// on heap buffers of exactly the size each call may touch (ASan reports
// any access past either end):
//   - the forward in odd row shards, against a double reference computed
//     from the stored inputs (h rounded as the engine rounds it);
//   - the backward's tiles in three different splits (all at once, one by
//     one, in reverse order: as different thread counts would run them):
//     dgamma and dbeta bit-identical each time, and dx, dgamma, dbeta against
//     the double reference;
//   - a constant row gives y = beta (no NaN);
//   - in place (y and h over x and the residual, dx over dy, x or dh, as
//     the kernels run when TensorFlow hands them an input's buffer): the
//     same bits.
//
// Exit status: 0 when every check passes, 1 otherwise.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "tests/engine/engine_check.h"
#include "tf_ops/cc/core/cpu_isa.h"
#include "tf_ops/cc/core/narrow_float.h"
#include "tf_ops/cc/norm/norm_cpu.h"

namespace tf_ops {
namespace {

using engine_check::Buffer;
using engine_check::checks;
using engine_check::Expect;
using engine_check::failures;
using engine_check::Store;

const Store kStores[] = {
    {Dtype::kHalf, "half", 2, 1e-3},
    {Dtype::kBFloat16, "bfloat16", 2, 8e-3},
    {Dtype::kFloat, "float", 4, 2e-6},
    {Dtype::kDouble, "double", 8, 1e-13},
};

bool Close(double got, double want, double tol) {
  return std::fabs(got - want) <= tol;
}

void TestCase(const Store& s, int64_t rows, int64_t cols, bool centered,
              bool residual, bool constant_rows, std::mt19937* rng) {
  char ctx[160];
  std::snprintf(ctx, sizeof(ctx), "%s %s%s rows=%lld cols=%lld%s", s.name,
                residual ? "Add" : "", centered ? "LayerNorm" : "RmsNorm",
                static_cast<long long>(rows), static_cast<long long>(cols),
                constant_rows ? " constant" : "");
  const int64_t n = rows * cols;
  std::uniform_real_distribution<double> dist(-3.0, 2.0);
  auto x = Buffer(n * s.size), r = Buffer(residual ? n * s.size : 0),
       h = Buffer(residual ? n * s.size : 0), y = Buffer(n * s.size),
       dy = Buffer(n * s.size), dh = Buffer(residual ? n * s.size : 0),
       dx = Buffer(n * s.size);
  auto gamma = Buffer(cols * s.stat_size()),
       beta = Buffer(centered ? cols * s.stat_size() : 0),
       mean = Buffer(centered ? rows * s.stat_size() : 0),
       rstd = Buffer(rows * s.stat_size());
  for (int64_t i = 0; i < n; ++i) {
    const double row_value = 0.5 + static_cast<double>(i / cols % 7);
    s.Put(x.get(), i, constant_rows ? row_value : dist(*rng) + 1.5);
    if (residual) s.Put(r.get(), i, constant_rows ? 0.0 : dist(*rng));
    s.Put(dy.get(), i, dist(*rng));
    if (residual) s.Put(dh.get(), i, dist(*rng));
  }
  for (int64_t j = 0; j < cols; ++j) {
    s.PutStat(gamma.get(), j, 0.5 + 0.01 * static_cast<double>(j % 50));
    if (centered) s.PutStat(beta.get(), j, 0.1 * static_cast<double>(j % 9) - 0.3);
  }
  const double eps = 1e-5;
  const NormShape shape{rows, cols, centered};
  // Forward in two odd shards.
  const int64_t split = rows / 3;
  for (const auto& [b, e] : {std::pair<int64_t, int64_t>{0, split},
                             std::pair<int64_t, int64_t>{split, rows}}) {
    CpuNormForward(s.dtype, shape, eps, x.get(), r.get(), gamma.get(),
                   beta.get(), h.get(), y.get(), mean.get(), rstd.get(), b, e);
  }
  // Reference, in double, from the stored (rounded) inputs.
  std::vector<double> want_dx(n), want_dg(cols, 0.0), want_db(cols, 0.0);
  const void* xin = residual ? h.get() : x.get();
  for (int64_t row = 0; row < rows; ++row) {
    std::vector<double> v(cols);
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t i = row * cols + j;
      if (residual) {
        // h must be the stored sum, rounded once.
        double sum = s.Get(x.get(), i) + s.Get(r.get(), i);
        char tmp[8];
        s.Put(tmp, 0, sum);
        Expect(s.Get(h.get(), i) == s.Get(tmp, 0), "h", ctx, s.Get(h.get(), i),
               s.Get(tmp, 0), i);
      }
      v[j] = s.Get(xin, i);
    }
    double mu = 0.0;
    if (centered) {
      for (double e : v) mu += e;
      mu /= static_cast<double>(cols);
    }
    double var = 0.0;
    for (double e : v) var += (e - mu) * (e - mu);
    var /= static_cast<double>(cols);
    const double rs = 1.0 / std::sqrt(var + eps);
    if (centered) {
      Expect(Close(s.GetStat(mean.get(), row), mu, s.eps * (std::fabs(mu) + 1)),
             "mean", ctx, s.GetStat(mean.get(), row), mu, row);
    }
    Expect(Close(s.GetStat(rstd.get(), row), rs, 4 * s.eps * rs + 1e-300),
           "rstd", ctx, s.GetStat(rstd.get(), row), rs, row);
    double s_gg = 0.0, s_ggx = 0.0;
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t i = row * cols + j;
      const double xhat = (v[j] - mu) * rs;
      const double g = s.GetStat(gamma.get(), j);
      const double want = xhat * g + (centered ? s.GetStat(beta.get(), j) : 0.0);
      const double got = s.Get(y.get(), i);
      Expect(std::isfinite(got) &&
                 Close(got, want, 8 * s.eps * (std::fabs(want) + 1.0)),
             "y", ctx, got, want, i);
      const double gg = s.Get(dy.get(), i) * g;
      s_gg += gg;
      s_ggx += gg * xhat;
    }
    const double c_mean = centered ? s_gg / static_cast<double>(cols) : 0.0;
    const double c_proj = s_ggx / static_cast<double>(cols);
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t i = row * cols + j;
      const double xhat = (v[j] - mu) * rs;
      const double gv = s.Get(dy.get(), i);
      const double gg = gv * s.GetStat(gamma.get(), j);
      want_dx[i] = rs * (gg - c_mean - xhat * c_proj) +
                   (residual ? s.Get(dh.get(), i) : 0.0);
      want_dg[j] += gv * xhat;
      want_db[j] += gv;
    }
  }
  // Backward, tiles in three splits: dgamma and dbeta the same bits.
  const NormGradTiling t = MakeNormGradTiling(shape);
  std::vector<std::vector<char>> first_dg;
  for (int order = 0; order < 3; ++order) {
    auto partials = Buffer(t.partials() * sizeof(double));
    auto dg = Buffer(cols * s.stat_size());
    auto db = Buffer(centered ? cols * s.stat_size() : 0);
    if (order == 0) {
      CpuNormGradTiles(s.dtype, t, dy.get(), xin, gamma.get(), mean.get(),
                       rstd.get(), dh.get(), dx.get(), partials.get(), 0,
                       t.tiles());
    } else {
      for (int64_t k = 0; k < t.tiles(); ++k) {
        const int64_t tile = order == 1 ? k : t.tiles() - 1 - k;
        CpuNormGradTiles(s.dtype, t, dy.get(), xin, gamma.get(), mean.get(),
                         rstd.get(), dh.get(), dx.get(), partials.get(), tile,
                         tile + 1);
      }
    }
    const int64_t half_cols = cols / 2;
    CpuNormGradReduce(s.dtype, t, partials.get(), dg.get(), db.get(), 0,
                      half_cols);
    CpuNormGradReduce(s.dtype, t, partials.get(), dg.get(), db.get(),
                      half_cols, cols);
    std::vector<char> bits(dg.get(), dg.get() + cols * s.stat_size());
    if (centered) bits.insert(bits.end(), db.get(), db.get() + cols * s.stat_size());
    if (order == 0) {
      first_dg.push_back(bits);
      for (int64_t i = 0; i < n; ++i) {
        const double got = s.Get(dx.get(), i);
        Expect(std::isfinite(got) &&
                   Close(got, want_dx[i],
                         16 * s.eps * (std::fabs(want_dx[i]) + 1.0 + 0.0)),
               "dx", ctx, got, want_dx[i], i);
      }
      for (int64_t j = 0; j < cols; ++j) {
        const double scale = std::sqrt(static_cast<double>(rows)) + 1.0;
        Expect(Close(s.GetStat(dg.get(), j), want_dg[j],
                     16 * s.eps * scale * (1 + std::fabs(want_dg[j]))),
               "dgamma", ctx, s.GetStat(dg.get(), j), want_dg[j], j);
        if (centered) {
          Expect(Close(s.GetStat(db.get(), j), want_db[j],
                       16 * s.eps * scale * (1 + std::fabs(want_db[j]))),
                 "dbeta", ctx, s.GetStat(db.get(), j), want_db[j], j);
        }
      }
    } else {
      Expect(bits == first_dg[0], "dgamma/dbeta bits", ctx, order, 0, 0);
    }
  }
  // In place, as the kernels run when TensorFlow hands an input's buffer to
  // an output: the same bits as above.
  const size_t bytes = n * s.size;
  const auto copy = [&](const char* from) {
    auto b = Buffer(bytes);
    if (bytes != 0) std::memcpy(b.get(), from, bytes);
    return b;
  };
  const auto same = [&](const char* got, const char* want, const char* what) {
    Expect(bytes == 0 || std::memcmp(got, want, bytes) == 0, what, ctx, 0, 0,
           0);
  };
  auto mean2 = Buffer(centered ? rows * s.stat_size() : 0),
       rstd2 = Buffer(rows * s.stat_size());
  if (residual) {
    // h over x, y over the residual.
    auto x2 = copy(x.get()), r2 = copy(r.get());
    CpuNormForward(s.dtype, shape, eps, x2.get(), r2.get(), gamma.get(),
                   beta.get(), x2.get(), r2.get(), mean2.get(), rstd2.get(), 0,
                   rows);
    same(x2.get(), h.get(), "h in place of x");
    same(r2.get(), y.get(), "y in place of residual");
  } else {
    auto x2 = copy(x.get());
    CpuNormForward(s.dtype, shape, eps, x2.get(), nullptr, gamma.get(),
                   beta.get(), nullptr, x2.get(), mean2.get(), rstd2.get(), 0,
                   rows);
    same(x2.get(), y.get(), "y in place of x");
  }
  auto partials = Buffer(t.partials() * sizeof(double));
  // dx over each input it may share: dy, x (h), dh.
  for (int shared = 0; shared < (residual ? 3 : 2); ++shared) {
    auto dy2 = copy(dy.get()), x2 = copy(static_cast<const char*>(xin));
    auto dh2 = residual ? copy(dh.get()) : nullptr;
    char* out = shared == 0 ? dy2.get() : shared == 1 ? x2.get() : dh2.get();
    CpuNormGradTiles(s.dtype, t, dy2.get(), x2.get(), gamma.get(), mean.get(),
                     rstd.get(), dh2.get(), out, partials.get(), 0, t.tiles());
    same(out, dx.get(), shared == 0   ? "dx in place of dy"
                        : shared == 1 ? "dx in place of x"
                                      : "dx in place of dh");
  }
}

}  // namespace
}  // namespace tf_ops

int main() {
  using namespace tf_ops;
  std::mt19937 rng(24);
  const int64_t shapes[][2] = {{1, 1},   {3, 7},    {5, 64},  {4, 65},
                               {33, 31}, {2, 1000}, {3, 1031}, {1, 16384},
                               {70, 17}, {2, 4099}, {0, 8}};
  // Every instruction-set variant of the loops this CPU can run.
  int isas = 0;
  for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (SetCpuIsa(isa) != isa) continue;
    ++isas;
    for (const Store& s : kStores) {
      for (const auto& shape : shapes) {
        for (int kind = 0; kind < 4; ++kind) {
          TestCase(s, shape[0], shape[1], kind & 1, kind & 2, false, &rng);
        }
      }
      TestCase(s, 5, 300, true, false, true, &rng);  // constant rows: y = beta
      TestCase(s, 3, 64, true, true, true, &rng);
    }
    std::printf("%-8s done: %d checks so far\n", CpuIsaName(isa), checks);
  }
  std::printf("SUMMARY checks family=norm-engine passed=%d failed=%d isas=%d\n",
              checks - failures, failures, isas);
  return failures == 0 ? 0 : 1;
}
