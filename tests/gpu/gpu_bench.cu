// Benchmark mode of the GPU self-test (`tf_ops_gpu_selftest --bench`):
// bandwidth of every op family (op_families.h) of every activation, per dtype,
// at 2^28 elements, next to a device-to-device copy of the same bytes measured
// in the same run. Elementwise kernels are memory-bound, so "% of copy" is the
// figure of merit (targets: >= 85% in float32, >= 80% in half and bfloat16).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "tests/gpu/cuda_check.h"
#include "tests/gpu/op_families.h"
#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/activation/activation_math.h"

namespace tf_ops {
namespace {

constexpr int kWarmup = 3;
constexpr int kRuns = 15;
constexpr size_t kMaxElementBytes = 8;  // float64

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

// Zeroed device buffers sized for a family at n elements in any dtype, and a
// copy source and destination as large as all of them together.
template <typename Family>
struct FamilyBuffers {
  std::vector<void*> owned;
  Args args;
  size_t elements = 0;  // over all inputs and outputs
  void* copy_src = nullptr;
  void* copy_dst = nullptr;

  explicit FamilyBuffers(int64_t n) {
    for (int i = 0; i < Family::kInputs; ++i) {
      elements += Family::InputSize(i, n);
      args.in.push_back(Alloc(Family::InputSize(i, n)));
    }
    for (int o = 0; o < Family::kOutputs; ++o) {
      elements += Family::OutputSize(o, n);
      args.out.push_back(Alloc(Family::OutputSize(o, n)));
    }
    copy_src = Alloc(elements / 2 + 1);
    copy_dst = Alloc(elements / 2 + 1);
  }
  ~FamilyBuffers() {
    for (void* p : owned) cudaFree(p);
  }
  FamilyBuffers(const FamilyBuffers&) = delete;
  FamilyBuffers& operator=(const FamilyBuffers&) = delete;

 private:
  void* Alloc(int64_t count) {
    void* p = nullptr;
    const size_t bytes = static_cast<size_t>(count) * kMaxElementBytes;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    CUDA_CHECK(cudaMemset(p, 0, bytes));
    owned.push_back(p);
    return p;
  }
};

// The lowest "% of copy" per dtype and where it was seen.
struct Worst {
  double pct = 1e9;
  std::string where;
  double copy_gbs = 0;
};

// One family, activation and dtype: a table row; updates the dtype's worst.
template <typename Family, typename Op, typename T>
void BenchOne(const Op& op, const char* label, int64_t n,
              const FamilyBuffers<Family>& buf, Worst* worst) {
  const double bytes = static_cast<double>(buf.elements) * sizeof(T);
  const double ms = MedianMs([&] {
    Family::Gpu(op, DtypeInfo<T>::kDtype, buf.args, n, nullptr);
  });
  // A copy moving the same bytes: half read, half written.
  const double copy_ms = MedianMs([&] {
    cudaMemcpyAsync(buf.copy_dst, buf.copy_src, static_cast<size_t>(bytes / 2),
                    cudaMemcpyDeviceToDevice);
  });
  CUDA_CHECK(cudaGetLastError());
  const double pct = 100.0 * copy_ms / ms;
  const double copy_gbs = bytes / copy_ms / 1e6;
  std::printf("| %s | %s | %s | %.0f | %.0f | %.0f%% |\n", label, Family::kName,
              DtypeInfo<T>::kName, bytes / ms / 1e6, copy_gbs, pct);
  if (pct < worst->pct) {
    worst->pct = pct;
    worst->where = std::string(label) + " " + Family::kName;
    worst->copy_gbs = copy_gbs;
  }
}

template <typename Family, typename Op>
void BenchAllDtypes(const Op& op, const char* label, int64_t n,
                    const FamilyBuffers<Family>& buf, Worst worst[4]) {
  BenchOne<Family, Op, float>(op, label, n, buf, &worst[0]);
  BenchOne<Family, Op, __half>(op, label, n, buf, &worst[1]);
  BenchOne<Family, Op, __nv_bfloat16>(op, label, n, buf, &worst[2]);
  BenchOne<Family, Op, double>(op, label, n, buf, &worst[3]);
}

// Every activation (default attributes, and GELU's tanh form) in one family.
template <typename Family>
void BenchFamily(int64_t n, Worst worst[4]) {
  const FamilyBuffers<Family> buf(n);
#define TF_OPS_BENCH(Name) BenchAllDtypes(Name{}, #Name, n, buf, worst);
  TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_BENCH)
#undef TF_OPS_BENCH
  BenchAllDtypes(Gelu{true}, "Gelu approximate", n, buf, worst);
}

}  // namespace

// Prints a Markdown table and SUMMARY lines; returns 0 when the bandwidth
// targets hold, 3 when some kernel misses (the table says which).
int RunBenchmarks(int64_t n) {
  std::printf("\n%lld elements; GB/s = bytes read + written per second; copy = "
              "a device-to-device copy of the same bytes\n\n",
              static_cast<long long>(n));
  std::printf("| op | family | dtype | GB/s | copy GB/s | %% of copy |\n"
              "|---|---|---|---|---|---|\n");
  Worst worst[4];  // float32, float16, bfloat16, float64
#define TF_OPS_BENCH_FAMILY(Family) BenchFamily<Family>(n, worst);
  TF_OPS_GPU_FAMILIES(TF_OPS_BENCH_FAMILY)
#undef TF_OPS_BENCH_FAMILY
  const char* names[4] = {"float32", "float16", "bfloat16", "float64"};
  const double targets[4] = {85.0, 80.0, 80.0, 0.0};  // float64: reported only
  bool ok = true;
  std::printf("\n");
  for (int d = 0; d < 4; ++d) {
    const bool met = worst[d].pct >= targets[d];
    ok = ok && met;
    std::printf("worst %s: %.0f%% of copy (%s; copy %.0f GB/s), target %.0f%%: %s\n",
                names[d], worst[d].pct, worst[d].where.c_str(),
                worst[d].copy_gbs, targets[d], met ? "met" : "MISSED");
    std::printf("SUMMARY bench dtype=%s worst_pct=%.0f target_pct=%.0f "
                "copy_gbs=%.0f where=\"%s\"\n",
                names[d], worst[d].pct, targets[d], worst[d].copy_gbs,
                worst[d].where.c_str());
  }
  std::printf("bandwidth targets: %s\n", ok ? "met" : "MISSED");
  return ok ? 0 : 3;
}

}  // namespace tf_ops
