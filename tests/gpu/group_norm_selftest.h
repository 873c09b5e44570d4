// The group-norm family of the GPU self-test (gpu_selftest.cu calls
// group_norm_selftest::RunAll): the CUDA engine (cu/group_norm/group_norm_gpu.h)
// against the CPU engine (group_norm_cpu.h) on the same inputs, four dtypes,
// channels last (one and several row tiles) and channels first and a middle
// axis, odd sizes, the identity and activations of the list. Every output is
// compared: y, mean, rstd, dx, dgamma, dbeta; y computed in place over x
// must equal y; the backward runs twice and dgamma/dbeta must be the same
// bits (no atomics). Prints `SUMMARY checks family=group_norm passed=N
// failed=M`.

#ifndef TF_OPS_TESTS_GPU_GROUP_NORM_SELFTEST_H_
#define TF_OPS_TESTS_GPU_GROUP_NORM_SELFTEST_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "tests/gpu/cuda_check.h"
#include "tests/gpu/selftest_size.h"
#include "tf_ops/cc/core/narrow_float.h"
#include "tf_ops/cc/group_norm/group_norm_cpu.h"
#include "tf_ops/cu/group_norm/group_norm_gpu.h"

namespace tf_ops {
namespace group_norm_selftest {

using group_norm::GroupNormShape;

struct Kind {
  Dtype dtype;
  const char* name;
  size_t size;
  double rtol;  // GPU vs CPU engine, relative to max(|cpu|, 1)
};
constexpr Kind kKinds[] = {{Dtype::kHalf, "float16", 2, 4e-3},
                           {Dtype::kBFloat16, "bfloat16", 2, 3e-2},
                           {Dtype::kFloat, "float32", 4, 3e-5},
                           {Dtype::kDouble, "float64", 8, 1e-11}};

inline double Get(const Kind& k, const std::vector<char>& b, int64_t i,
                  bool param) {
  if (param || k.dtype == Dtype::kFloat || k.dtype == Dtype::kDouble) {
    return k.dtype == Dtype::kDouble
               ? reinterpret_cast<const double*>(b.data())[i]
               : reinterpret_cast<const float*>(b.data())[i];
  }
  const uint16_t v = reinterpret_cast<const uint16_t*>(b.data())[i];
  return k.dtype == Dtype::kHalf ? narrow_float::HalfToFloat(v)
                                 : narrow_float::BFloat16ToFloat(v);
}

inline void Put(const Kind& k, std::vector<char>* b, int64_t i, double v,
                bool param) {
  if (param || k.dtype == Dtype::kFloat || k.dtype == Dtype::kDouble) {
    if (k.dtype == Dtype::kDouble) {
      reinterpret_cast<double*>(b->data())[i] = v;
    } else {
      reinterpret_cast<float*>(b->data())[i] = static_cast<float>(v);
    }
    return;
  }
  reinterpret_cast<uint16_t*>(b->data())[i] =
      k.dtype == Dtype::kHalf
          ? narrow_float::FloatToHalf(static_cast<float>(v))
          : narrow_float::FloatToBFloat16(static_cast<float>(v));
}

struct Buffer {
  void* p = nullptr;
  explicit Buffer(size_t bytes) {
    if (bytes > 0) CUDA_CHECK(cudaMalloc(&p, bytes));
  }
  explicit Buffer(const std::vector<char>& host) : Buffer(host.size()) {
    if (p != nullptr) {
      CUDA_CHECK(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice));
    }
  }
  ~Buffer() {
    if (p != nullptr) cudaFree(p);
  }
  std::vector<char> Host(size_t bytes) const {
    std::vector<char> h(bytes);
    if (bytes > 0) {
      CUDA_CHECK(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost));
    }
    return h;
  }
};

struct Tally {
  int passed = 0, failed = 0;
};

inline void Compare(const Kind& k, const char* what, const char* ctx,
                    const std::vector<char>& cpu, const std::vector<char>& gpu,
                    int64_t n, bool param, double rtol, Tally* t) {
  int64_t worst = -1;
  double worst_err = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double c = Get(k, cpu, i, param), g = Get(k, gpu, i, param);
    const double err = std::fabs(c - g) / std::max(std::fabs(c), 1.0);
    if (!(err <= rtol) || std::isnan(g) != std::isnan(c)) {
      if (worst < 0 || err > worst_err || std::isnan(err)) {
        worst = i;
        worst_err = err;
      }
    }
  }
  if (worst < 0) {
    ++t->passed;
    return;
  }
  ++t->failed;
  std::printf("FAIL group_norm %s %s at %lld: cpu %.9g gpu %.9g (rel %.3g > "
              "%.3g)\n",
              ctx, what, static_cast<long long>(worst),
              Get(k, cpu, worst, param), Get(k, gpu, worst, param), worst_err,
              rtol);
}

inline void CheckCase(const Kind& k, const GroupNormShape& s,
                      const char* act_name, std::mt19937* rng, Tally* t) {
  ActivationChoice act;
  act.SetKind(act_name);
  char ctx[160];
  std::snprintf(ctx, sizeof(ctx), "%s %s [n %lld, b %lld, c %lld, i %lld] "
                "groups %lld", k.name, act_name, static_cast<long long>(s.n),
                static_cast<long long>(s.b), static_cast<long long>(s.c),
                static_cast<long long>(s.i), static_cast<long long>(s.groups));
  const int64_t n = s.elements(), stats = s.n * s.groups;
  const size_t param = k.dtype == Dtype::kDouble ? 8 : 4;
  std::uniform_real_distribution<double> dist(-2.0, 3.0);
  std::vector<char> x(n * k.size), dy(n * k.size), gamma(s.c * param),
      beta(s.c * param);
  for (int64_t j = 0; j < n; ++j) {
    Put(k, &x, j, dist(*rng) + 1.0, false);
    Put(k, &dy, j, dist(*rng), false);
  }
  for (int64_t c = 0; c < s.c; ++c) {
    Put(k, &gamma, c, 0.5 + dist(*rng) * 0.2, true);
    Put(k, &beta, c, dist(*rng) * 0.3, true);
  }
  const double eps = 1e-5;
  // CPU engine.
  std::vector<char> y(n * k.size), mean(stats * param), rstd(stats * param),
      dx(n * k.size), dg(s.c * param), db(s.c * param);
  const group_norm::GroupNormTiling tiling = group_norm::MakeGroupNormTiling(s);
  std::vector<double> partials(tiling.partials() + 2 * stats + 1);
  group_norm::GroupNormBuffers io;
  io.x = x.data();
  io.dy = dy.data();
  io.gamma = gamma.data();
  io.beta = beta.data();
  io.mean = mean.data();
  io.rstd = rstd.data();
  io.y = y.data();
  io.dx = dx.data();
  io.dgamma = dg.data();
  io.dbeta = db.data();
  io.partials = partials.data();
  io.coefs = partials.data() + tiling.partials();
  group_norm::CpuGroupNormSums(k.dtype, tiling, io, 0, tiling.units());
  group_norm::CpuGroupNormStats(k.dtype, tiling, eps, io);
  group_norm::CpuGroupNormApply(act, k.dtype, tiling, io, 0, tiling.units());
  group_norm::CpuGroupNormGradSums(act, k.dtype, tiling, io, 0, tiling.units());
  group_norm::CpuGroupNormGradReduce(k.dtype, tiling, io);
  group_norm::CpuGroupNormGradApply(act, k.dtype, tiling, io, 0, tiling.units());
  // CUDA engine; the backward on the CPU's statistics.
  const size_t scratch_bytes =
      static_cast<size_t>(group_norm::GroupNormGpuScratchBytes(s));
  Buffer d_x(x), d_gamma(gamma), d_beta(beta), d_dy(dy), d_y(y.size()),
      d_mean(mean.size()), d_rstd(rstd.size()), scratch(scratch_bytes);
  const char* err = group_norm::LaunchGroupNormForward(
      act, k.dtype, s, eps, d_x.p, d_gamma.p, d_beta.p, d_y.p, d_mean.p,
      d_rstd.p, scratch.p, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  if (err != nullptr) {
    std::printf("FAIL group_norm %s forward launch: %s\n", ctx, err);
    ++t->failed;
    return;
  }
  const std::vector<char> g_y = d_y.Host(y.size());
  Compare(k, "y", ctx, y, g_y, n, false, 4 * k.rtol, t);
  Compare(k, "mean", ctx, mean, d_mean.Host(mean.size()), stats, true, k.rtol,
          t);
  Compare(k, "rstd", ctx, rstd, d_rstd.Host(rstd.size()), stats, true, k.rtol,
          t);
  {  // In place: y over x's buffer.
    Buffer d_xy(x);
    err = group_norm::LaunchGroupNormForward(act, k.dtype, s, eps, d_xy.p,
                                             d_gamma.p, d_beta.p, d_xy.p,
                                             d_mean.p, d_rstd.p, scratch.p,
                                             nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (err == nullptr && d_xy.Host(y.size()) == g_y) {
      ++t->passed;
    } else {
      ++t->failed;
      std::printf("FAIL group_norm %s y in place differs\n", ctx);
    }
  }
  Buffer d_mean_cpu(mean), d_rstd_cpu(rstd);
  std::vector<char> first;
  for (int run = 0; run < 2; ++run) {
    Buffer d_dx(dx.size()), d_dg(dg.size()), d_db(db.size());
    err = group_norm::LaunchGroupNormGrad(act, k.dtype, s, d_dy.p, d_x.p,
                                          d_gamma.p, d_beta.p, d_mean_cpu.p,
                                          d_rstd_cpu.p, d_dx.p, d_dg.p,
                                          d_db.p, scratch.p, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (err != nullptr) {
      std::printf("FAIL group_norm %s grad launch: %s\n", ctx, err);
      ++t->failed;
      return;
    }
    std::vector<char> g_dg = d_dg.Host(dg.size()), g_db = d_db.Host(db.size());
    if (run == 0) {
      Compare(k, "dx", ctx, dx, d_dx.Host(dx.size()), n, false, 8 * k.rtol, t);
      const double sum_rtol =
          4 * k.rtol * std::sqrt(static_cast<double>(n / s.c) + 1);
      Compare(k, "dgamma", ctx, dg, g_dg, s.c, true, sum_rtol, t);
      Compare(k, "dbeta", ctx, db, g_db, s.c, true, sum_rtol, t);
      first = g_dg;
      first.insert(first.end(), g_db.begin(), g_db.end());
    } else {
      g_dg.insert(g_dg.end(), g_db.begin(), g_db.end());
      if (g_dg == first) {
        ++t->passed;
      } else {
        ++t->failed;
        std::printf("FAIL group_norm %s dgamma/dbeta differ between runs\n",
                    ctx);
      }
    }
  }
}

// Every case; prints the family's SUMMARY line. Returns {passed, failed}.
inline std::pair<int, int> RunAll(bool quick) {
  std::mt19937 rng(43);
  // {n, b, c, i, groups}: channels last with one and three row tiles (the
  // last short), channels first, a middle axis, odd sizes, one group per
  // channel (instance norm).
  const GroupNormShape shapes[] = {{2, 7, 16, 1, 4},   {1, 130, 24, 1, 8},
                                   {2, 1, 12, 33, 3},  {3, 5, 6, 7, 2},
                                   {1, 300, 64, 1, 32}, {2, 1, 64, 130, 32},
                                   {2, 3, 5, 1, 5},    {1, 1, 8, 1, 1}};
  const char* acts[] = {"Identity", "Swish", "Gelu", "Elu", "LeakyRelu"};
  Tally t;
  for (const Kind& k : kKinds) {
    for (const GroupNormShape& s : shapes) {
      if ((quick || SmallShapes()) && s.elements() > 8000) continue;
      for (const char* a : acts) {
        if (SmallShapes() && a != acts[0] && a != acts[1]) continue;
        CheckCase(k, s, a, &rng, &t);
      }
    }
  }
  std::printf("SUMMARY checks family=group_norm passed=%d failed=%d\n",
              t.passed, t.failed);
  return {t.passed, t.failed};
}

}  // namespace group_norm_selftest
}  // namespace tf_ops

#endif  // TF_OPS_TESTS_GPU_GROUP_NORM_SELFTEST_H_
