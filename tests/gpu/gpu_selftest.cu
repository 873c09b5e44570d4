// TF-free self-test of the CUDA engines: runs every op family (op_families.h:
// the element-wise ops' and the fused ops') of every activation in
// activation_list.h, in every dtype, on the GPU through the same launchers the
// TensorFlow kernels call, and compares each element with the CPU engines
// (elementwise_cpu.h, fused_cpu.h) on the same inputs.
//
// Build and run on a GPU machine (no TensorFlow needed):
//   tools/gpu_selftest.sh
// Usage: tf_ops_gpu_selftest [--quick] | --bench [log2 n]
//   --quick  small sizes and one attribute variant per activation: every code
//            path, few launches (for compute-sanitizer runs).
//   --bench  times the kernels instead (gpu_bench.cu).
// Exit status 0 when every case passes, 1 otherwise, 2 without a usable GPU.
// Lines starting with "SUMMARY " are for tools/gpu_selftest.sh to read.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/cuda_check.h"
#include "tests/gpu/op_families.h"
#include "tests/gpu/norm_selftest.h"
#include "tests/gpu/softmax_selftest.h"
#include "tests/gpu/batch_norm_selftest.h"
#include "tests/gpu/rotary_selftest.h"
#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/activation/activation_math.h"

namespace tf_ops {
namespace {

template <typename T>
double ToDouble(T v) {
  return static_cast<double>(static_cast<ComputeType<T>>(v));
}

// Samples: random normals scaled to cover both branches and saturation, plus
// the special values at the front (0, -0, +-inf, NaN, tiny and huge values).
// Past kRandomPrefix elements the values repeat: large sizes are there to test
// the indexing (grid-stride loop, tails), and drawing millions of normals per
// case would dominate the run.
constexpr int64_t kRandomPrefix = 1 << 16;

template <typename T>
std::vector<T> MakeSample(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 4.0);
  const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN,
                             1e-6, -1e-6, 30.0, -30.0, 1.0, -1.0};
  std::vector<T> v(n);
  for (int64_t i = 0; i < n; ++i) {
    if (i >= kRandomPrefix) {
      v[i] = v[i % kRandomPrefix];
      continue;
    }
    const double d = i < 11 ? specials[i] : normal(rng);
    v[i] = static_cast<T>(static_cast<ComputeType<T>>(d));
  }
  return v;
}

// True when a and b agree within rtol (relative to max(|b|, 1)) plus an
// absolute slack (a sum's rounding, op_families.h); NaN must match NaN and
// infinities must match exactly.
bool Close(double a, double b, double rtol, double slack = 0.0) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= rtol * std::fmax(std::fabs(b), 1.0) + slack;
}

// A device buffer holding `host` at element offset `offset` (1 puts it off
// the 16-byte grid, which takes the kernels' one-element path), with one
// spare element after it.
template <typename T>
struct DeviceBuffer {
  T* base = nullptr;
  T* data = nullptr;
  DeviceBuffer(const std::vector<T>& host, int offset) {
    CUDA_CHECK(cudaMalloc(&base, sizeof(T) * (host.size() + offset + 1)));
    data = base + offset;
    if (!host.empty()) {
      CUDA_CHECK(cudaMemcpy(data, host.data(), sizeof(T) * host.size(),
                            cudaMemcpyHostToDevice));
    }
  }
  ~DeviceBuffer() { cudaFree(base); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::vector<T> ToHost(size_t n) const {
    std::vector<T> host(n);
    if (n > 0) {
      CUDA_CHECK(cudaMemcpy(host.data(), data, sizeof(T) * n,
                            cudaMemcpyDeviceToHost));
    }
    return host;
  }
};

struct Tally {
  int passed = 0;
  int failed = 0;
};

// slack: empty, or one absolute slack per element.
template <typename T>
bool Compare(const std::string& what, const std::vector<T>& got,
             const std::vector<T>& want, const std::vector<double>& slack) {
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!Close(ToDouble(got[i]), ToDouble(want[i]), DtypeInfo<T>::kRtol,
               slack.empty() ? 0.0 : slack[i])) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  if (bad == 0) return true;
  std::printf("FAIL %s: %lld of %zu differ; first at %lld: gpu %.9g cpu %.9g\n",
              what.c_str(), static_cast<long long>(bad), want.size(),
              static_cast<long long>(first), ToDouble(got[first]),
              ToDouble(want[first]));
  return false;
}

// One run of a family on the GPU, compared with the CPU reference: buffers at
// element offset `offset`; outputs written over the inputs `aliases` names;
// when only >= 0, the other outputs are null (kOutputsOptional).
template <typename Family, typename Op, typename T>
bool RunOnce(const Op& op, const std::string& name, const HostBuffers<T>& in,
             const HostBuffers<T>& want,
             const std::vector<std::vector<double>>& slack, int64_t n,
             int offset, const Aliases& aliases, int only) {
  std::vector<std::unique_ptr<DeviceBuffer<T>>> d_in, d_out;
  std::vector<const DeviceBuffer<T>*> written(Family::kOutputs, nullptr);
  Args args;
  for (const std::vector<T>& host : in) {
    d_in.push_back(std::make_unique<DeviceBuffer<T>>(host, offset));
    args.in.push_back(d_in.back()->data);
  }
  for (int o = 0; o < Family::kOutputs; ++o) {
    int over = -1;
    for (const auto& [output, input] : aliases) {
      if (output == o) over = input;
    }
    if (over >= 0) {
      written[o] = d_in[over].get();
    } else if (only < 0 || only == o) {
      d_out.push_back(std::make_unique<DeviceBuffer<T>>(
          std::vector<T>(Family::OutputSize(o, n)), offset));
      written[o] = d_out.back().get();
    }
    args.out.push_back(written[o] == nullptr ? nullptr : written[o]->data);
  }
  const char* err = Family::Gpu(op, DtypeInfo<T>::kDtype, args, n, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  bool ok = err == nullptr;
  if (!ok) std::printf("FAIL %s: launch error %s\n", name.c_str(), err);
  for (int o = 0; ok && o < Family::kOutputs; ++o) {
    if (written[o] == nullptr) continue;
    ok = Compare(name + " output " + std::to_string(o),
                 written[o]->ToHost(want[o].size()), want[o],
                 o < static_cast<int>(slack.size()) ? slack[o]
                                                    : std::vector<double>());
  }
  return ok;
}

// One family, activation, dtype and size: aligned, in place as the family
// allows, each output alone where outputs are optional, and off the 16-byte
// grid.
template <typename Family, typename Op, typename T>
void CheckCase(const Op& op, const std::string& label, int64_t n, Tally* t) {
  const std::string name = label + " " + Family::kName + " " +
                           DtypeInfo<T>::kName + " n=" + std::to_string(n);
  HostBuffers<T> samples;
  for (int s = 0; s < kSamples; ++s) {
    samples.push_back(MakeSample<T>(n, 1234u * (s + 1) + static_cast<uint32_t>(n)));
  }
  const HostBuffers<T> in = Family::template MakeInputs<Op, T>(op, samples, n);
  HostBuffers<T> want;
  Args host_args;
  for (const std::vector<T>& b : in) host_args.in.push_back(b.data());
  for (int o = 0; o < Family::kOutputs; ++o) {
    want.emplace_back(Family::OutputSize(o, n));
  }
  for (std::vector<T>& b : want) host_args.out.push_back(b.data());
  Family::Cpu(op, DtypeInfo<T>::kDtype, host_args, n);
  const std::vector<std::vector<double>> slack =
      Family::template Slack<T>(in, want, n);

  bool ok = RunOnce<Family>(op, name, in, want, slack, n, /*offset=*/0, {}, -1);
  for (const Aliases& aliases : Family::InPlace()) {
    std::string what = name + " in place (output over input:";
    for (const auto& [output, input] : aliases) {
      what += " " + std::to_string(output) + " over " + std::to_string(input);
    }
    ok = RunOnce<Family>(op, what + ")", in, want, slack, n, 0, aliases, -1) &&
         ok;
  }
  if (Family::kOutputsOptional && Family::kOutputs > 1) {
    for (int o = 0; o < Family::kOutputs; ++o) {
      ok = RunOnce<Family>(op, name + " output " + std::to_string(o) + " alone",
                           in, want, slack, n, 0, {}, o) && ok;
    }
  }
  ok = RunOnce<Family>(op, name + " unaligned", in, want, slack, n, 1, {}, -1) &&
       ok;
  ++(ok ? t->passed : t->failed);
}

// Sizes around the pack width, the block size and the grid-stride limit, odd
// ones included; --quick keeps the small ones.
const std::vector<int64_t> kSizes = {1,   3,    7,    8,       9,
                                     255, 256,  257,  4097,    1 << 20,
                                     8192 * 256 * 8 + 17};
const std::vector<int64_t> kQuickSizes = {1, 3, 8, 9, 255, 257, 4097};

template <typename Family, typename Op>
void CheckFamily(const Op& op, const std::string& label,
                 const std::vector<int64_t>& sizes, Tally* t) {
  for (int64_t n : sizes) {
    CheckCase<Family, Op, __half>(op, label, n, t);
    CheckCase<Family, Op, __nv_bfloat16>(op, label, n, t);
    CheckCase<Family, Op, float>(op, label, n, t);
    CheckCase<Family, Op, double>(op, label, n, t);
  }
  // An empty tensor launches nothing and reports no error.
  Args empty;
  empty.in.assign(Family::kInputs, nullptr);
  empty.out.assign(Family::kOutputs, nullptr);
  const bool ok =
      Family::Gpu(op, Dtype::kFloat, empty, 0, nullptr) == nullptr;
  if (!ok) {
    std::printf("FAIL %s %s: empty launch reported an error\n", label.c_str(),
                Family::kName);
  }
  ++(ok ? t->passed : t->failed);
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
std::vector<Celu> Variants(Celu) {
  std::vector<Celu> v;
  for (float a : {1.0f, 0.5f, 3.0f, 1e-3f}) v.push_back(Celu{a});
  return v;
}
std::vector<Sigmoid> Variants(Sigmoid) { return {Sigmoid{}}; }

template <typename Family, typename Op>
void CheckAllVariants(bool quick, Tally* t) {
  std::vector<Op> variants = Variants(Op{});
  if (quick) variants.resize(1);
  for (const Op& op : variants) {
    CheckFamily<Family>(op, std::string(Op::kName),
                        quick ? kQuickSizes : kSizes, t);
  }
}

// Every activation of one family; prints its tally.
template <typename Family>
Tally CheckEveryActivation(bool quick) {
  Tally t;
#define TF_OPS_CHECK(Name) CheckAllVariants<Family, Name>(quick, &t);
  TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_CHECK)
#undef TF_OPS_CHECK
  std::printf("SUMMARY checks family=%s passed=%d failed=%d\n", Family::kName,
              t.passed, t.failed);
  return t;
}

}  // namespace

int RunBenchmarks(int64_t n);  // gpu_bench.cu

}  // namespace tf_ops

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!mode.empty() && mode != "--bench" && mode != "--quick") {
    std::fprintf(stderr, "usage: %s [--quick] | --bench [log2 n]\n", argv[0]);
    return 64;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: nothing tested\n");
    std::printf("SUMMARY device none\n");
    return 2;
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  std::printf("device: %s (sm_%d%d), driver supports CUDA %d.%d, runtime CUDA %d.%d\n",
              prop.name, prop.major, prop.minor, driver / 1000,
              driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
  std::printf("SUMMARY device name=\"%s\" sm=%d%d driver_cuda=%d.%d runtime_cuda=%d.%d\n",
              prop.name, prop.major, prop.minor, driver / 1000,
              driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);

  if (mode == "--bench") {
    // --bench [log2 elements], default 2^28.
    const int log2 = argc > 2 ? std::atoi(argv[2]) : 28;
    return tf_ops::RunBenchmarks(int64_t{1} << log2);
  }

  const bool quick = mode == "--quick";
  int passed = 0, failed = 0;
#define TF_OPS_CHECK_FAMILY(Family)                                   \
  {                                                                   \
    const tf_ops::Tally t = tf_ops::CheckEveryActivation<tf_ops::Family>(quick); \
    passed += t.passed;                                               \
    failed += t.failed;                                               \
  }
  TF_OPS_GPU_FAMILIES(TF_OPS_CHECK_FAMILY)
  TF_OPS_GPU_FUSED_FAMILIES(TF_OPS_CHECK_FAMILY)
#undef TF_OPS_CHECK_FAMILY
  {
    const auto norm = tf_ops::RunNormSelftest(quick);
    passed += norm.first;
    failed += norm.second;
  }
  {
    const tf_ops::softmax_selftest::Result t = tf_ops::CheckSoftmaxFamily(quick);
    passed += t.passed;
    failed += t.failed;
  }
  {
    const auto t = tf_ops::batch_norm_selftest::RunAll(quick);
    passed += t.passed;
    failed += t.failed;
  }
  {
    const auto rotary = tf_ops::RunRotarySelftest(quick);
    passed += rotary.first;
    failed += rotary.second;
  }

  std::printf("%d passed, %d failed\n", passed, failed);
  std::printf("SUMMARY checks total passed=%d failed=%d%s\n", passed, failed,
              quick ? " quick" : "");
  return failed == 0 ? 0 : 1;
}
