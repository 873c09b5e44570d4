// The normalisation ops' family of the GPU self-test (gpu_selftest.cu calls
// RunNormSelftest): the CUDA engine (cu/norm/norm_gpu.h) against the CPU
// engine (norm_cpu.h) on the same inputs, for layer norm and RMS norm,
// without and with the residual, four dtypes, rows on both sides of the
// warp/block switch (kWarpRowMax), odd lengths, up to 16384. Every output
// is compared: h (exactly), y, mean, rstd, dx, dgamma and dbeta; the
// backward runs twice and dgamma/dbeta must be the same bits (no atomics).
// Prints `SUMMARY checks family=norm passed=N failed=M`.

#ifndef TF_OPS_TESTS_GPU_NORM_SELFTEST_H_
#define TF_OPS_TESTS_GPU_NORM_SELFTEST_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "tests/gpu/cuda_check.h"
#include "tests/gpu/selftest_size.h"
#include "tf_ops/cc/core/narrow_float.h"
#include "tf_ops/cc/norm/norm_cpu.h"
#include "tf_ops/cu/norm/norm_gpu.h"

namespace tf_ops {
namespace norm_selftest {

struct Kind {
  Dtype dtype;
  const char* name;
  size_t size;
  double rtol;  // GPU vs CPU engine, relative to max(|cpu|, 1)
};
constexpr Kind kKinds[] = {{Dtype::kHalf, "float16", 2, 4e-3},
                           {Dtype::kBFloat16, "bfloat16", 2, 3e-2},
                           {Dtype::kFloat, "float32", 4, 2e-5},
                           {Dtype::kDouble, "float64", 8, 1e-12}};

inline double Get(const Kind& k, const std::vector<char>& b, int64_t i,
                  bool stat) {
  if (stat) {
    return k.dtype == Dtype::kDouble
               ? reinterpret_cast<const double*>(b.data())[i]
               : reinterpret_cast<const float*>(b.data())[i];
  }
  switch (k.dtype) {
    case Dtype::kHalf:
      return narrow_float::HalfToFloat(
          reinterpret_cast<const uint16_t*>(b.data())[i]);
    case Dtype::kBFloat16:
      return narrow_float::BFloat16ToFloat(
          reinterpret_cast<const uint16_t*>(b.data())[i]);
    case Dtype::kFloat:
      return reinterpret_cast<const float*>(b.data())[i];
    case Dtype::kDouble:
      return reinterpret_cast<const double*>(b.data())[i];
  }
  return 0.0;
}

inline void Put(const Kind& k, std::vector<char>* b, int64_t i, double v,
                bool stat) {
  if (stat || k.dtype == Dtype::kFloat || k.dtype == Dtype::kDouble) {
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

// A device copy of a host buffer (null for an empty one), freed on scope
// exit.
struct Device {
  void* p = nullptr;
  explicit Device(size_t bytes) {
    if (bytes > 0) CUDA_CHECK(cudaMalloc(&p, bytes));
  }
  explicit Device(const std::vector<char>& host) : Device(host.size()) {
    if (p != nullptr) {
      CUDA_CHECK(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice));
    }
  }
  ~Device() {
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
                    int64_t n, bool stat, double rtol, Tally* t) {
  int64_t worst = -1;
  double worst_err = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double c = Get(k, cpu, i, stat), g = Get(k, gpu, i, stat);
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
  std::printf("FAIL norm %s %s at %lld: cpu %.9g gpu %.9g (rel %.3g > %.3g)\n",
              ctx, what, static_cast<long long>(worst),
              Get(k, cpu, worst, stat), Get(k, gpu, worst, stat), worst_err,
              rtol);
}

inline void CheckCase(const Kind& k, int64_t rows, int64_t cols, bool centered,
                      bool residual, std::mt19937* rng, Tally* t) {
  char ctx[128];
  std::snprintf(ctx, sizeof(ctx), "%s %s%s [%lld, %lld]", k.name,
                residual ? "Add" : "", centered ? "LayerNorm" : "RmsNorm",
                static_cast<long long>(rows), static_cast<long long>(cols));
  const int64_t n = rows * cols;
  const size_t stat = k.dtype == Dtype::kDouble ? 8 : 4;
  std::uniform_real_distribution<double> dist(-2.0, 3.0);
  std::vector<char> x(n * k.size), r(residual ? n * k.size : 0),
      dy(n * k.size), dh(residual ? n * k.size : 0), gamma(cols * stat),
      beta(centered ? cols * stat : 0);
  for (int64_t i = 0; i < n; ++i) {
    Put(k, &x, i, dist(*rng), false);
    Put(k, &dy, i, dist(*rng), false);
    if (residual) {
      Put(k, &r, i, dist(*rng), false);
      Put(k, &dh, i, dist(*rng), false);
    }
  }
  for (int64_t j = 0; j < cols; ++j) {
    Put(k, &gamma, j, 0.5 + dist(*rng) * 0.2, true);
    if (centered) Put(k, &beta, j, dist(*rng) * 0.3, true);
  }
  const NormShape shape{rows, cols, centered};
  const double eps = 1e-5;
  // CPU engine.
  std::vector<char> h(residual ? n * k.size : 0), y(n * k.size),
      mean(centered ? rows * stat : 0), rstd(rows * stat), dx(n * k.size),
      dg(cols * stat), db(centered ? cols * stat : 0);
  auto ptr = [](std::vector<char>& v) -> void* {
    return v.empty() ? nullptr : v.data();
  };
  CpuNormForward(k.dtype, shape, eps, ptr(x), ptr(r), ptr(gamma), ptr(beta),
                 ptr(h), ptr(y), ptr(mean), ptr(rstd), 0, rows);
  const std::vector<char>& xin = residual ? h : x;
  const NormGradTiling tiling = MakeNormGradTiling(shape);
  std::vector<char> partials(tiling.partials() * sizeof(double) + 8);
  CpuNormGradTiles(k.dtype, tiling, ptr(dy), xin.data(), ptr(gamma),
                   ptr(mean), ptr(rstd), ptr(dh), ptr(dx), partials.data(), 0,
                   tiling.tiles());
  CpuNormGradReduce(k.dtype, tiling, partials.data(), ptr(dg), ptr(db), 0,
                    cols);
  // CUDA engine, on the CPU's h and statistics for the backward, so that
  // each output is compared on the same inputs.
  Device d_x(x), d_r(r), d_gamma(gamma), d_beta(beta), d_dy(dy), d_dh(dh);
  Device d_h(h.size()), d_y(y.size()), d_mean(mean.size()),
      d_rstd(rstd.size());
  const char* err = LaunchNormForward(k.dtype, shape, eps, d_x.p, d_r.p,
                                      d_gamma.p, d_beta.p, d_h.p, d_y.p,
                                      d_mean.p, d_rstd.p, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  if (err != nullptr) {
    std::printf("FAIL norm %s forward launch: %s\n", ctx, err);
    ++t->failed;
    return;
  }
  if (residual) {
    Compare(k, "h", ctx, h, d_h.Host(h.size()), n, false, 0.0, t);
  }
  Compare(k, "y", ctx, y, d_y.Host(y.size()), n, false, 2 * k.rtol, t);
  if (centered) {
    Compare(k, "mean", ctx, mean, d_mean.Host(mean.size()), rows, true,
            k.rtol, t);
  }
  Compare(k, "rstd", ctx, rstd, d_rstd.Host(rstd.size()), rows, true, k.rtol,
          t);
  Device d_xin(xin), d_mean_cpu(mean), d_rstd_cpu(rstd);
  std::vector<char> first;
  // --small (selftest_size.h): one run (the GPU's run checks the bits).
  for (int run = 0; run < (SmallShapes() ? 1 : 2); ++run) {
    Device d_dx(dx.size()), d_dg(dg.size()), d_db(db.size()),
        scratch(static_cast<size_t>(NormGradGpuScratchBytes(shape)));
    err = LaunchNormGrad(k.dtype, shape, d_dy.p, d_xin.p, d_gamma.p,
                         d_mean_cpu.p, d_rstd_cpu.p, d_dh.p, d_dx.p, d_dg.p,
                         d_db.p, scratch.p, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (err != nullptr) {
      std::printf("FAIL norm %s grad launch: %s\n", ctx, err);
      ++t->failed;
      return;
    }
    std::vector<char> g_dg = d_dg.Host(dg.size()), g_db = d_db.Host(db.size());
    if (run == 0) {
      Compare(k, "dx", ctx, dx, d_dx.Host(dx.size()), n, false, 4 * k.rtol, t);
      const double sum_rtol = k.rtol * std::sqrt(static_cast<double>(rows) + 1);
      Compare(k, "dgamma", ctx, dg, g_dg, cols, true, sum_rtol, t);
      if (centered) Compare(k, "dbeta", ctx, db, g_db, cols, true, sum_rtol, t);
      first = g_dg;
      first.insert(first.end(), g_db.begin(), g_db.end());
    } else {
      g_dg.insert(g_dg.end(), g_db.begin(), g_db.end());
      if (g_dg == first) {
        ++t->passed;
      } else {
        ++t->failed;
        std::printf("FAIL norm %s dgamma/dbeta differ between runs\n", ctx);
      }
    }
  }
}

}  // namespace norm_selftest

// Every case; prints the family's SUMMARY line. Returns {passed, failed}.
inline std::pair<int, int> RunNormSelftest(bool quick) {
  using namespace norm_selftest;
  std::mt19937 rng(24);
  // {70, 9}: warp rows over two gradient tiles (the second short); with
  // {3, 1025} (block rows) the --small set.
  const int64_t shapes[][2] = {{7, 64},  {33, 17},  {130, 512}, {5, 1000},
                               {3, 1024}, {3, 1025}, {4, 4099},  {2, 16384},
                               {300, 768}, {1, 1}, {70, 9}};
  Tally t;
  for (const Kind& k : kKinds) {
    for (const auto& s : shapes) {
      if (quick && s[0] * s[1] > 40000) continue;
      const bool small = (s[0] == 70 && s[1] == 9) || (s[0] == 3 && s[1] == 1025);
      if (SmallShapes() && !small) continue;
      for (int kind = 0; kind < 4; ++kind) {
        // --small: {70, 9} (70 rows of warp reductions) as RmsNorm and
        // AddLayerNorm only.
        if (SmallShapes() && s[0] == 70 && kind != 0 && kind != 3) continue;
        CheckCase(k, s[0], s[1], kind & 1, kind & 2, &rng, &t);
      }
    }
  }
  std::printf("SUMMARY checks family=norm passed=%d failed=%d\n", t.passed,
              t.failed);
  return {t.passed, t.failed};
}

}  // namespace tf_ops

#endif  // TF_OPS_TESTS_GPU_NORM_SELFTEST_H_
