// Benchmark mode of the GPU self-test (`tf_ops_gpu_selftest --bench`):
// bandwidth of every activation's forward, backward and grad-grad kernel, per
// dtype, at
// 2^28 elements, next to a device-to-device copy of the same bytes measured in
// the same run. Elementwise kernels are memory-bound, so "% of copy" is the
// figure of merit (targets: >= 85% in float32, >= 80% in half and bfloat16).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "tests/gpu/cuda_check.h"
#include "tf_ops/cc/activation_list.h"
#include "tf_ops/cc/activation_math.h"
#include "tf_ops/cu/elementwise_gpu.h"

namespace tf_ops {
namespace {

constexpr int kWarmup = 3;
constexpr int kRuns = 15;

// Median milliseconds of `run` over kRuns launches, timed with CUDA events.
double MedianMs(const std::function<void()>& run) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < kWarmup; ++i) run();
  std::vector<double> ms;
  for (int i = 0; i < kRuns; ++i) {
    CUDA_CHECK(cudaEventRecord(start));
    run();
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Buffers {
  void* a;
  void* b;
  void* c;
  void* d;
  void* e;
  void* copy_src;
  void* copy_dst;
};

// One dtype: each op's forward, backward and grad-grad against a copy of
// equal bytes.
template <typename Op>
void BenchOp(const Op& op, const char* label, Dtype dtype, const char* dname,
             size_t elem, int64_t n, const Buffers& buf, double* worst) {
  const double fwd_bytes = 2.0 * n * elem;  // read x, write y
  const double bwd_bytes = 3.0 * n * elem;  // read g and v, write dx
  const double fwd_ms = MedianMs(
      [&] { LaunchForward(op, dtype, buf.a, buf.b, n, nullptr); });
  const double gg_bytes = 5.0 * n * elem;  // read u, g and v, write d_g, d_v
  const double bwd_ms = MedianMs(
      [&] { LaunchBackward(op, dtype, buf.a, buf.b, buf.c, n, nullptr); });
  const double gg_ms = MedianMs([&] {
    LaunchGradGrad(op, dtype, buf.a, buf.b, buf.c, buf.d, buf.e, n, nullptr);
  });
  // Copies moving the same bytes: half read, half written.
  const double copy_fwd_ms = MedianMs([&] {
    cudaMemcpyAsync(buf.copy_dst, buf.copy_src, fwd_bytes / 2,
                    cudaMemcpyDeviceToDevice);
  });
  const double copy_bwd_ms = MedianMs([&] {
    cudaMemcpyAsync(buf.copy_dst, buf.copy_src, bwd_bytes / 2,
                    cudaMemcpyDeviceToDevice);
  });
  const double copy_gg_ms = MedianMs([&] {
    cudaMemcpyAsync(buf.copy_dst, buf.copy_src, gg_bytes / 2,
                    cudaMemcpyDeviceToDevice);
  });
  CUDA_CHECK(cudaGetLastError());
  const double fwd_pct = 100.0 * copy_fwd_ms / fwd_ms;
  const double bwd_pct = 100.0 * copy_bwd_ms / bwd_ms;
  const double gg_pct = 100.0 * copy_gg_ms / gg_ms;
  std::printf("| %s | %s | %.0f | %.0f%% | %.0f | %.0f%% | %.0f | %.0f%% |\n",
              label, dname, fwd_bytes / fwd_ms / 1e6, fwd_pct,
              bwd_bytes / bwd_ms / 1e6, bwd_pct, gg_bytes / gg_ms / 1e6,
              gg_pct);
  *worst = std::min(*worst, std::min(fwd_pct, std::min(bwd_pct, gg_pct)));
}

template <typename Op>
void BenchAllDtypes(const Op& op, const char* label, int64_t n,
                    const Buffers& buf, double worst[4]) {
  BenchOp(op, label, Dtype::kFloat, "float32", 4, n, buf, &worst[0]);
  BenchOp(op, label, Dtype::kHalf, "float16", 2, n, buf, &worst[1]);
  BenchOp(op, label, Dtype::kBFloat16, "bfloat16", 2, n, buf, &worst[2]);
  BenchOp(op, label, Dtype::kDouble, "float64", 8, n, buf, &worst[3]);
}

}  // namespace

// Prints a Markdown table; returns 0 when the bandwidth targets hold, 3 when
// some op misses (the table says which).
int RunBenchmarks(int64_t n) {
  Buffers buf{};
  const size_t bytes = static_cast<size_t>(n) * 8;  // room for float64
  for (void** p : {&buf.a, &buf.b, &buf.c, &buf.d, &buf.e}) {
    CUDA_CHECK(cudaMalloc(p, bytes));
    CUDA_CHECK(cudaMemset(*p, 0, bytes));
  }
  CUDA_CHECK(cudaMalloc(&buf.copy_src, bytes * 5 / 2));
  CUDA_CHECK(cudaMalloc(&buf.copy_dst, bytes * 5 / 2));
  CUDA_CHECK(cudaMemset(buf.copy_src, 0, bytes * 5 / 2));

  std::printf("\n%lld elements; GB/s = bytes read + written per second; "
              "%% of a device-to-device copy of the same bytes\n\n",
              static_cast<long long>(n));
  std::printf("| op | dtype | forward GB/s | forward %% copy | backward GB/s "
              "| backward %% copy | grad-grad GB/s | grad-grad %% copy |\n"
              "|---|---|---|---|---|---|---|---|\n");
  double worst[4] = {1e9, 1e9, 1e9, 1e9};  // f32, f16, bf16, f64
  // Every activation in the list, with its default attributes.
#define TF_OPS_BENCH(Name) BenchAllDtypes(Name{}, #Name, n, buf, worst);
  TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_BENCH)
#undef TF_OPS_BENCH
  BenchAllDtypes(Gelu{true}, "Gelu approximate", n, buf, worst);
  for (void* p : {buf.a, buf.b, buf.c, buf.d, buf.e, buf.copy_src,
                  buf.copy_dst}) {
    CUDA_CHECK(cudaFree(p));
  }
  const bool ok = worst[0] >= 85.0 && worst[1] >= 80.0 && worst[2] >= 80.0;
  std::printf("\nworst %% of copy: float32 %.0f%% (target 85%%), float16 "
              "%.0f%%, bfloat16 %.0f%% (targets 80%%), float64 %.0f%%: %s\n",
              worst[0], worst[1], worst[2], worst[3],
              ok ? "targets met" : "TARGET MISSED");
  return ok ? 0 : 3;
}

}  // namespace tf_ops
