// TF-free self-test of the CUDA engine: runs every activation in
// activation_list.h, forward, backward and grad-grad, in every dtype, on the
// GPU through the same launchers the TensorFlow kernels call, and compares
// each element with the CPU engine (elementwise_cpu.h) on the same inputs.
//
// Build and run on a GPU machine (no TensorFlow needed):
//   tools/gpu_selftest.sh
// Exit status 0 when every case passes, 1 otherwise, 2 without a usable GPU.
// `--bench [log2 n]` times the kernels instead (gpu_bench.cu).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/cuda_check.h"
#include "tf_ops/cc/activation_list.h"
#include "tf_ops/cc/activation_math.h"
#include "tf_ops/cc/elementwise_cpu.h"
#include "tf_ops/cu/elementwise_gpu.h"

namespace tf_ops {
namespace {

template <typename T>
struct DtypeInfo;
template <>
struct DtypeInfo<__half> {
  static constexpr Dtype kDtype = Dtype::kHalf;
  static constexpr const char* kName = "half";
  static constexpr double kRtol = 2e-3;  // 2 ulp of binary16
};
template <>
struct DtypeInfo<__nv_bfloat16> {
  static constexpr Dtype kDtype = Dtype::kBFloat16;
  static constexpr const char* kName = "bfloat16";
  static constexpr double kRtol = 1.6e-2;  // 2 ulp of bfloat16
};
template <>
struct DtypeInfo<float> {
  static constexpr Dtype kDtype = Dtype::kFloat;
  static constexpr const char* kName = "float";
  static constexpr double kRtol = 4e-6;  // device vs host libm, a few ulp
};
template <>
struct DtypeInfo<double> {
  static constexpr Dtype kDtype = Dtype::kDouble;
  static constexpr const char* kName = "double";
  static constexpr double kRtol = 1e-14;
};

template <typename T>
double ToDouble(T v) {
  return static_cast<double>(static_cast<ComputeType<T>>(v));
}

// Inputs: random normals scaled to cover both branches and saturation, plus
// the special values at the front (0, -0, +-inf, NaN, tiny and huge values).
template <typename T>
std::vector<T> MakeInput(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 4.0);
  const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN,
                             1e-6, -1e-6, 30.0, -30.0, 1.0, -1.0};
  std::vector<T> v(n);
  for (int64_t i = 0; i < n; ++i) {
    const double d = i < 11 ? specials[i] : normal(rng);
    v[i] = static_cast<T>(static_cast<ComputeType<T>>(d));
  }
  return v;
}

// True when a and b agree within rtol (relative to max(|b|, 1)); NaN must
// match NaN and infinities must match exactly.
bool Close(double a, double b, double rtol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= rtol * std::fmax(std::fabs(b), 1.0);
}

template <typename T>
T* ToDevice(const std::vector<T>& host) {
  T* dev = nullptr;
  CUDA_CHECK(cudaMalloc(&dev, sizeof(T) * (host.size() + 1)));
  CUDA_CHECK(cudaMemcpy(dev, host.data(), sizeof(T) * host.size(),
                        cudaMemcpyHostToDevice));
  return dev;
}

template <typename T>
std::vector<T> ToHost(const T* dev, int64_t n) {
  std::vector<T> host(n);
  CUDA_CHECK(cudaMemcpy(host.data(), dev, sizeof(T) * n,
                        cudaMemcpyDeviceToHost));
  return host;
}

struct Tally {
  int cases = 0;
  int failures = 0;
};

template <typename T>
bool Compare(const char* what, const std::vector<T>& got,
             const std::vector<T>& want) {
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!Close(ToDouble(got[i]), ToDouble(want[i]), DtypeInfo<T>::kRtol)) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  if (bad == 0) return true;
  std::printf("FAIL %s: %lld of %zu differ; first at %lld: gpu %.9g cpu %.9g\n",
              what, static_cast<long long>(bad), want.size(),
              static_cast<long long>(first),
              ToDouble(got[first]), ToDouble(want[first]));
  return false;
}

// The grad-grad op on the GPU against the CPU engine: both outputs, in place
// (d_g over u, d_v over g, as TF may forward them), each output alone, and
// off the 16-byte grid (elements 1..n-1).
template <typename Op, typename T>
bool CheckGradGrad(const Op& op, const std::string& name,
                   const std::vector<T>& u, const std::vector<T>& g,
                   const std::vector<T>& v) {
  const Dtype dtype = DtypeInfo<T>::kDtype;
  const int64_t n = static_cast<int64_t>(v.size());
  std::vector<T> a_cpu(n), b_cpu(n);
  CpuGradGrad(op, dtype, u.data(), g.data(), v.data(), a_cpu.data(),
              b_cpu.data(), 0, n);
  T* d_u = ToDevice(u);
  T* d_g = ToDevice(g);
  T* d_v = ToDevice(v);
  T* d_a = ToDevice(std::vector<T>(n));
  T* d_b = ToDevice(std::vector<T>(n));
  bool ok = true;
  auto expect = [&](const char* err, const std::string& what, T* dev,
                    const std::vector<T>& want, int64_t skip) {
    CUDA_CHECK(cudaDeviceSynchronize());
    if (err != nullptr) {
      std::printf("FAIL %s: launch error %s\n", what.c_str(), err);
      ok = false;
      return;
    }
    const std::vector<T> got = ToHost(dev, n);
    ok = Compare((name + " grad-grad " + what).c_str(),
                 std::vector<T>(got.begin() + skip, got.end()),
                 std::vector<T>(want.begin() + skip, want.end())) &&
         ok;
  };
  const char* err =
      LaunchGradGrad(op, dtype, d_u, d_g, d_v, d_a, d_b, n, nullptr);
  expect(err, "d_g", d_a, a_cpu, 0);
  expect(err, "d_v", d_b, b_cpu, 0);
  CUDA_CHECK(cudaMemset(d_a, 0, sizeof(T) * n));
  err = LaunchGradGrad(op, dtype, d_u, d_g, d_v, nullptr, d_b, n, nullptr);
  expect(err, "d_v alone", d_b, b_cpu, 0);
  err = LaunchGradGrad(op, dtype, d_u, d_g, d_v, d_a, nullptr, n, nullptr);
  expect(err, "d_g alone", d_a, a_cpu, 0);
  if (n > 1) {
    err = LaunchGradGrad(op, dtype, d_u + 1, d_g + 1, d_v + 1, d_a + 1,
                         d_b + 1, n - 1, nullptr);
    expect(err, "d_g unaligned", d_a, a_cpu, 1);
    expect(err, "d_v unaligned", d_b, b_cpu, 1);
  }
  err = LaunchGradGrad(op, dtype, d_u, d_g, d_v, d_u, d_g, n, nullptr);
  expect(err, "d_g in-place", d_u, a_cpu, 0);
  expect(err, "d_v in-place", d_g, b_cpu, 0);
  for (T* p : {d_u, d_g, d_v, d_a, d_b}) CUDA_CHECK(cudaFree(p));
  return ok;
}

// One activation, one dtype, one size: forward, forward in place, backward,
// grad-grad.
template <typename Op, typename T>
void CheckCase(const Op& op, const std::string& label, int64_t n, Tally* t) {
  const Dtype dtype = DtypeInfo<T>::kDtype;
  const std::string name = label + " " + DtypeInfo<T>::kName + " n=" +
                           std::to_string(n);
  std::vector<T> x = MakeInput<T>(n, 1234u + static_cast<uint32_t>(n));
  std::vector<T> g = MakeInput<T>(n, 99u + static_cast<uint32_t>(n));
  std::vector<T> u = MakeInput<T>(n, 7u + static_cast<uint32_t>(n));
  // Elu's grad op takes the outputs; the others take the features.
  std::vector<T> y_cpu(n), v(n), dx_cpu(n);
  CpuForward(op, dtype, x.data(), y_cpu.data(), 0, n);
  v = Op::kGradTakesOutputs ? y_cpu : x;
  CpuBackward(op, dtype, g.data(), v.data(), dx_cpu.data(), 0, n);

  T* d_x = ToDevice(x);
  T* d_g = ToDevice(g);
  T* d_v = ToDevice(v);
  T* d_out = ToDevice(std::vector<T>(n));

  const char* err = LaunchForward(op, dtype, d_x, d_out, n, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  bool ok = err == nullptr && Compare((name + " forward").c_str(),
                                      ToHost(d_out, n), y_cpu);
  // In place: TF may hand the kernel its input buffer as output.
  err = LaunchForward(op, dtype, d_x, d_x, n, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  ok = ok && err == nullptr &&
       Compare((name + " forward in-place").c_str(), ToHost(d_x, n), y_cpu);
  err = LaunchBackward(op, dtype, d_g, d_v, d_out, n, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  ok = ok && err == nullptr &&
       Compare((name + " backward").c_str(), ToHost(d_out, n), dx_cpu);
  // Buffers off the 16-byte grid take the one-element path: elements 1..n-1.
  if (n > 1) {
    err = LaunchBackward(op, dtype, d_g + 1, d_v + 1, d_out + 1, n - 1,
                         nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> got = ToHost(d_out, n);
    std::vector<T> want(dx_cpu.begin() + 1, dx_cpu.end());
    ok = ok && err == nullptr &&
         Compare((name + " backward unaligned").c_str(),
                 std::vector<T>(got.begin() + 1, got.end()), want);
  }
  err = LaunchBackward(op, dtype, d_g, d_v, d_g, n, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  ok = ok && err == nullptr &&
       Compare((name + " backward in-place").c_str(), ToHost(d_g, n), dx_cpu);
  if (err != nullptr) std::printf("FAIL %s: launch error %s\n", name.c_str(), err);
  ok = CheckGradGrad(op, name, u, g, v) && ok;

  CUDA_CHECK(cudaFree(d_x));
  CUDA_CHECK(cudaFree(d_g));
  CUDA_CHECK(cudaFree(d_v));
  CUDA_CHECK(cudaFree(d_out));
  ++t->cases;
  if (!ok) ++t->failures;
}

// Sizes around the pack width, the block size and the grid-stride limit, odd
// ones included.
const int64_t kSizes[] = {1, 3, 7, 8, 9, 255, 256, 257, 4097, 1 << 20,
                          8192 * 256 * 8 + 17};

template <typename Op>
void CheckOp(const Op& op, const std::string& label, Tally* t) {
  for (int64_t n : kSizes) {
    CheckCase<Op, __half>(op, label, n, t);
    CheckCase<Op, __nv_bfloat16>(op, label, n, t);
    CheckCase<Op, float>(op, label, n, t);
    CheckCase<Op, double>(op, label, n, t);
  }
  // An empty tensor launches nothing and reports no error.
  if (LaunchForward(op, Dtype::kFloat, nullptr, nullptr, 0, nullptr) !=
          nullptr ||
      LaunchGradGrad(op, Dtype::kFloat, nullptr, nullptr, nullptr, nullptr,
                     nullptr, 0, nullptr) != nullptr) {
    std::printf("FAIL %s: empty launch reported an error\n", label.c_str());
    ++t->failures;
  }
}

// The attribute values each activation is tried with; an activation added to
// activation_list.h without an entry here fails to compile.
std::vector<LeakyRelu> Variants(LeakyRelu) {
  std::vector<LeakyRelu> v;
  for (float a : {0.2f, 0.0f, 1.0f, 1.5f, -0.3f}) v.push_back(LeakyRelu{a});
  return v;
}
std::vector<Elu> Variants(Elu) {
  std::vector<Elu> v;
  for (float a : {1.0f, 0.0f, 0.2f, 1.5f}) v.push_back(Elu{a});
  return v;
}

std::vector<Gelu> Variants(Gelu) { return {Gelu{false}, Gelu{true}}; }
std::vector<Swish> Variants(Swish) {
  std::vector<Swish> v;
  for (float b : {1.0f, 0.5f, 2.0f, 0.0f, -1.0f}) v.push_back(Swish{b});
  return v;
}
std::vector<Mish> Variants(Mish) { return {Mish{}}; }
std::vector<HardSwish> Variants(HardSwish) { return {HardSwish{}}; }

template <typename Op>
void CheckAllVariants(Tally* t) {
  for (const Op& op : Variants(Op{})) {
    CheckOp(op, std::string(Op::kName), t);
  }
}

}  // namespace
}  // namespace tf_ops

namespace tf_ops {
int RunBenchmarks(int64_t n);  // gpu_bench.cu
}

int main(int argc, char** argv) {
  const bool bench = argc > 1 && std::string(argv[1]) == "--bench";
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: nothing tested\n");
    return 2;
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);

  if (bench) {
    // --bench [log2 elements], default 2^28.
    const int log2 = argc > 2 ? std::atoi(argv[2]) : 28;
    return tf_ops::RunBenchmarks(int64_t{1} << log2);
  }

  tf_ops::Tally tally;
#define TF_OPS_CHECK(Name) tf_ops::CheckAllVariants<tf_ops::Name>(&tally);
  TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_CHECK)
#undef TF_OPS_CHECK

  std::printf("%d passed, %d failed\n", tally.cases - tally.failures,
              tally.failures);
  return tally.failures == 0 ? 0 : 1;
}
