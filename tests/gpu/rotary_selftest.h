// The rotary embedding's family of the GPU self-test (gpu_selftest.cu calls
// RunRotarySelftest): the CUDA engine (cu/rotary/rotary_gpu.h) against the
// CPU engine (rotary_cpu.h) on the same inputs, in four dtypes, forward and
// transpose (the backward), for axis layouts of rank 2 to 4 (the feature
// axis last and not), positions as a start, [S], [B, S] and broadcasts,
// every rope type, and LLaMA's query shape. Every element is compared; the
// GPU in place (y = x) must give the bits it gives out of place. Uses the
// norm family's host/device buffer helpers (norm_selftest.h). Prints
// `SUMMARY checks family=rotary passed=N failed=M`.

#ifndef TF_OPS_TESTS_GPU_ROTARY_SELFTEST_H_
#define TF_OPS_TESTS_GPU_ROTARY_SELFTEST_H_

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "tests/gpu/cuda_check.h"
#include "tests/gpu/norm_selftest.h"
#include "tests/gpu/selftest_size.h"
#include "tf_ops/cc/rotary/rotary_cpu.h"
#include "tf_ops/cc/rotary/rotary_layout.h"
#include "tf_ops/cc/rotary/rotary_math.h"
#include "tf_ops/cu/rotary/rotary_gpu.h"

namespace tf_ops {
namespace rotary_selftest {

using norm_selftest::Device;
using norm_selftest::Get;
using norm_selftest::Kind;
using norm_selftest::Put;
using norm_selftest::Tally;
using rotary::RopeParams;
using rotary::RopeType;

struct Case {
  std::vector<int64_t> dims;
  int seq_axis, feature_axis;
  std::vector<int64_t> positions;  // {} for a start
  RopeType type;
  double scaling;
};

// Each element within rtol of the CPU's (relative to max(|cpu|, 1)).
inline void Compare(const Kind& k, const char* what, const char* ctx,
                    const std::vector<char>& cpu, const std::vector<char>& gpu,
                    int64_t n, Tally* t) {
  int64_t worst = -1;
  double worst_err = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double c = Get(k, cpu, i, false), g = Get(k, gpu, i, false);
    const double err = std::fabs(c - g) / std::fmax(std::fabs(c), 1.0);
    if (!(err <= k.rtol) && (worst < 0 || !(err <= worst_err))) {
      worst = i;
      worst_err = err;
    }
  }
  if (worst < 0) {
    ++t->passed;
    return;
  }
  ++t->failed;
  std::printf(
      "FAIL rotary %s %s at %lld: cpu %.9g gpu %.9g (rel %.3g > %.3g)\n", ctx,
      what, static_cast<long long>(worst), Get(k, cpu, worst, false),
      Get(k, gpu, worst, false), worst_err, k.rtol);
}

inline void CheckCase(const Kind& k, const Case& c, std::mt19937* rng,
                      Tally* t) {
  const int rank = static_cast<int>(c.dims.size());
  char ctx[160];
  int len = std::snprintf(ctx, sizeof(ctx), "%s x[", k.name);
  int64_t n = 1;
  for (int a = 0; a < rank; ++a) {
    n *= c.dims[a];
    len += std::snprintf(ctx + len, sizeof(ctx) - len, "%s%lld", a ? "," : "",
                         static_cast<long long>(c.dims[a]));
  }
  std::snprintf(ctx + len, sizeof(ctx) - len,
                "] seq=%d feat=%d pos_rank=%d type=%d", c.seq_axis,
                c.feature_axis, static_cast<int>(c.positions.size()),
                static_cast<int>(c.type));
  const int p_rank = static_cast<int>(c.positions.size());
  const rotary::RotaryLayout l =
      rotary::MakeRotaryLayout(c.dims.data(), rank, c.seq_axis,
                               c.feature_axis, p_rank, c.positions.data());
  RopeParams params;
  params.type = c.type;
  params.scaling_factor = c.scaling;
  int64_t p_count = 1;
  for (int64_t v : c.positions) p_count *= v;
  std::uniform_real_distribution<double> value(-3.0, 3.0);
  std::uniform_int_distribution<int> position(0, 5000);
  const size_t stat = k.dtype == Dtype::kDouble ? 8 : 4;
  std::vector<char> x(n * k.size), positions(p_count * stat);
  for (int64_t i = 0; i < n; ++i) Put(k, &x, i, value(*rng), false);
  for (int64_t i = 0; i < p_count; ++i) {
    Put(k, &positions, i, p_rank == 0 ? 11.0 : position(*rng), true);
  }
  const int64_t half = l.half();
  std::vector<double> inverse(half);
  for (int64_t j = 0; j < half; ++j) {
    inverse[j] = rotary::InverseFrequency(params, l.features, j);
  }
  Device d_x(x), d_positions(positions);
  for (bool transpose : {false, true}) {
    rotary::RotaryArgs args;
    args.dtype = k.dtype;
    args.layout = l;
    args.positions = positions.data();
    args.inverse_frequencies = inverse.data();
    args.magnitude = rotary::Magnitude(params);
    args.transpose = transpose;
    std::vector<char> cpu(n * k.size);
    rotary::CpuRotary(args, x.data(), cpu.data(), 0, rotary::CpuRotaryUnits(l));
    Device d_y(cpu.size()), d_in_place(x),
        scratch(static_cast<size_t>(rotary::RotaryGpuScratchBytes(l)));
    const char* err = rotary::LaunchRotary(k.dtype, l, params, transpose,
                                           d_positions.p, d_x.p, d_y.p,
                                           scratch.p, nullptr);
    if (err == nullptr) {
      err = rotary::LaunchRotary(k.dtype, l, params, transpose,
                                 d_positions.p, d_in_place.p, d_in_place.p,
                                 scratch.p, nullptr);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    if (err != nullptr) {
      std::printf("FAIL rotary %s launch: %s\n", ctx, err);
      ++t->failed;
      return;
    }
    const std::vector<char> gpu = d_y.Host(cpu.size());
    Compare(k, transpose ? "dx" : "y", ctx, cpu, gpu, n, t);
    if (d_in_place.Host(cpu.size()) == gpu) {
      ++t->passed;
    } else {
      ++t->failed;
      std::printf("FAIL rotary %s in place differs from out of place\n", ctx);
    }
  }
}

}  // namespace rotary_selftest

// Every case; prints the family's SUMMARY line. Returns {passed, failed}.
inline std::pair<int, int> RunRotarySelftest(bool quick) {
  using namespace rotary_selftest;
  std::mt19937 rng(25);
  const std::vector<Case> cases = {
      {{2, 9, 16}, 1, 2, {}, RopeType::kLinear, 1.0},
      {{2, 9, 3, 130}, 1, 3, {9}, RopeType::kDynamic, 4.0},
      {{3, 7, 2, 64}, 1, 3, {3, 7}, RopeType::kYarn, 8.0},
      {{3, 7, 2, 64}, 1, 3, {1, 7}, RopeType::kLlama3, 1.0},
      {{3, 7, 2, 6}, 1, 3, {3, 1}, RopeType::kLinear, 2.0},
      {{2, 3, 9, 16}, 2, 3, {2, 9}, RopeType::kLinear, 1.0},  // [B, H, S, D]
      {{9, 2, 3, 16}, 0, 3, {2, 9}, RopeType::kLinear, 1.0},  // [S, B, H, D]
      {{2, 12, 7}, 2, 1, {2, 7}, RopeType::kLinear, 1.0},     // [B, D, S]
      {{2, 5, 10, 3}, 1, 2, {5}, RopeType::kYarn, 2.0},       // [B, S, D, H]
      {{7, 4}, 0, 1, {}, RopeType::kLinear, 1.0},             // [S, D]
      {{1, 1, 2}, 1, 2, {}, RopeType::kLinear, 1.0},
      {{4, 256, 8, 64}, 1, 3, {}, RopeType::kLinear, 1.0},    // LLaMA's query
      {{2, 1000, 4, 128}, 1, 3, {2, 1000}, RopeType::kLlama3, 1.0},
  };
  Tally t;
  for (const Kind& k : norm_selftest::kKinds) {
    for (const Case& c : cases) {
      int64_t n = 1;
      for (int64_t d : c.dims) n *= d;
      if (quick && n > 40000) continue;
      // --small (the CPU run, selftest_size.h): every layout and rope type,
      // not the two big shapes.
      if (SmallShapes() && n > 8192) continue;
      CheckCase(k, c, &rng, &t);
    }
  }
  std::printf("SUMMARY checks family=rotary passed=%d failed=%d\n", t.passed,
              t.failed);
  return {t.passed, t.failed};
}

}  // namespace tf_ops

#endif  // TF_OPS_TESTS_GPU_ROTARY_SELFTEST_H_
