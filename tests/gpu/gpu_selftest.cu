// TF-free self-test of the CUDA engines: runs every op family (op_families.h:
// the element-wise ops' and the fused ops') of every activation in
// activation_list.h, in every dtype, on the GPU through the same launchers the
// TensorFlow kernels call, and compares each element with the CPU engines
// (activation_cpu.h, fused_cpu.h) on the same inputs.
//
// Build and run on a GPU machine (no TensorFlow needed):
//   tools/gpu_selftest.sh
// Usage: tf_ops_gpu_selftest [--quick | --small] [--family NAME]
//                            | --bench [log2 n]
//   --quick  small sizes and one attribute variant per activation: every code
//            path, few launches (for compute-sanitizer runs).
//   --small  fewer activations and shapes still (selftest_size.h): the run on
//            the CPU, tools/gpu_selftest_cpu.sh.
//   --family only the family of that SUMMARY name (forward, norm, ...).
//   --bench  times the kernels instead (gpu_bench.cu).
// Exit status 0 when every case passes, 1 otherwise, 2 without a usable GPU.
// Lines starting with "SUMMARY " are for tools/gpu_selftest.sh to read.

#include <cuda_runtime.h>

#include <algorithm>
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
#include "tests/gpu/group_norm_selftest.h"
#include "tests/gpu/rotary_selftest.h"
#include "tests/gpu/attention_selftest.h"
#include "tests/gpu/selftest_size.h"
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
// the 16-byte grid, which takes the kernels' one-element path), and nothing
// after it: a kernel reading or writing past the end leaves the allocation,
// where memcheck (and AddressSanitizer, on the CPU) sees it.
template <typename T>
struct DeviceBuffer {
  T* base = nullptr;
  T* data = nullptr;
  DeviceBuffer(const std::vector<T>& host, int offset) {
    CUDA_CHECK(cudaMalloc(
        &base, sizeof(T) * std::max<size_t>(host.size() + offset, 1)));
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

// One run of a case: its buffers' element offset, the outputs written over
// inputs, the one output computed (or -1 for all).
struct Run {
  std::string what;
  int offset;
  Aliases aliases;
  int only;
};

// Aligned, in place as the family allows, each output alone where outputs
// are optional, and off the 16-byte grid.
template <typename Family>
std::vector<Run> RunsOf(const std::string& name) {
  std::vector<Run> runs = {{name, 0, {}, -1}};
  for (const Aliases& aliases : Family::InPlace()) {
    std::string what = name + " in place (output over input:";
    for (const auto& [output, input] : aliases) {
      what += " " + std::to_string(output) + " over " + std::to_string(input);
    }
    runs.push_back({what + ")", 0, aliases, -1});
  }
  if (Family::kOutputsOptional && Family::kOutputs > 1) {
    for (int o = 0; o < Family::kOutputs; ++o) {
      runs.push_back({name + " output " + std::to_string(o) + " alone", 0, {}, o});
    }
  }
  runs.push_back({name + " unaligned", 1, {}, -1});
  return runs;
}

// Which runs of RunsOf a --small case makes: the aligned or the unaligned
// one, and the pick-th of the others (in place, one output alone; modulo
// their count), so that a list of cases covers every run.
struct SmallRuns {
  bool unaligned;
  int pick;
};

// One family, activation, dtype and size: every run of RunsOf, or with
// `small` (--small) the two it names.
template <typename Family, typename Op, typename T>
void CheckCase(const Op& op, const std::string& label, int64_t n, Tally* t,
               const SmallRuns* small = nullptr) {
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

  const std::vector<Run> runs = RunsOf<Family>(name);
  const size_t last = runs.size() - 1;  // the unaligned run
  bool ok = true;
  for (size_t r = 0; r < runs.size(); ++r) {
    if (small != nullptr &&
        (r == 0 || r == last
             ? (r == last) != small->unaligned
             : r != 1 + static_cast<size_t>(small->pick) % (last - 1))) {
      continue;
    }
    ok = RunOnce<Family>(op, runs[r].what, in, want, slack, n, runs[r].offset,
                         runs[r].aliases, runs[r].only) &&
         ok;
  }
  ++(ok ? t->passed : t->failed);
}

// Sizes around the pack width, the block size and the grid-stride limit, odd
// ones included; --quick keeps the small ones.
const std::vector<int64_t> kSizes = {1,   3,    7,    8,       9,
                                     255, 256,  257,  4097,    1 << 20,
                                     8192 * 256 * 8 + 17};
const std::vector<int64_t> kQuickSizes = {1, 3, 8, 9, 255, 257, 4097};
// --small, a covering set rather than a cross product: sizes below a pack,
// a pack and a tail, either side of the block size, and one that goes round
// the grid-stride loops on the CPU (3 blocks at most), one per residue mod 5
// (the fused families' shape choice), each in two dtypes (the largest in
// one), every dtype in two or three and both aligned and unaligned; each
// case also runs one of the other ways (in place, one output alone: the
// case's index modulo their count), so that each is run.
struct SmallCase {
  int64_t n;
  Dtype dtype;
  bool unaligned;
};
const std::vector<SmallCase> kSmallCases = {
    {1, Dtype::kHalf, true},      {9, Dtype::kBFloat16, true},
    {255, Dtype::kDouble, true},  {257, Dtype::kFloat, true},
    {4098, Dtype::kFloat, false}, {1, Dtype::kFloat, true},
    {9, Dtype::kDouble, false},   {255, Dtype::kHalf, false},
    {257, Dtype::kBFloat16, false}};

// --small runs one activation: Elu, whose gradient takes the outputs (the
// kernels' indexing is the same template for every activation).
bool InSmallSet(const char* activation) {
  return std::strcmp(activation, "Elu") == 0;
}

template <typename Family, typename Op>
void CheckFamily(const Op& op, const std::string& label,
                 const std::vector<int64_t>& sizes, Tally* t) {
  for (size_t k = 0; SmallShapes() && k < kSmallCases.size(); ++k) {
    const SmallCase& c = kSmallCases[k];
    const SmallRuns runs{c.unaligned, static_cast<int>(k)};
    switch (c.dtype) {
      case Dtype::kHalf: CheckCase<Family, Op, __half>(op, label, c.n, t, &runs); break;
      case Dtype::kBFloat16:
        CheckCase<Family, Op, __nv_bfloat16>(op, label, c.n, t, &runs);
        break;
      case Dtype::kFloat: CheckCase<Family, Op, float>(op, label, c.n, t, &runs); break;
      case Dtype::kDouble: CheckCase<Family, Op, double>(op, label, c.n, t, &runs); break;
    }
  }
  for (int64_t n : SmallShapes() ? std::vector<int64_t>() : sizes) {
    CheckCase<Family, Op, __half>(op, label, n, t);
    CheckCase<Family, Op, __nv_bfloat16>(op, label, n, t);
    CheckCase<Family, Op, float>(op, label, n, t);
    CheckCase<Family, Op, double>(op, label, n, t);
  }
  // An empty problem reports no error. Its empty buffers are null; a buffer
  // that is not empty at n = 0 (the bias of a gated op: its gradient is
  // zeros) is given, and such an output must come back zero.
  Args empty;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> given;
  for (int i = 0; i < Family::kInputs; ++i) {
    const int64_t size = Family::InputSize(i, 0);
    if (size > 0) {
      given.push_back(std::make_unique<DeviceBuffer<float>>(
          std::vector<float>(size, 1.0f), 0));
    }
    empty.in.push_back(size > 0 ? given.back()->data : nullptr);
  }
  for (int o = 0; o < Family::kOutputs; ++o) {
    const int64_t size = Family::OutputSize(o, 0);
    if (size > 0) {
      given.push_back(std::make_unique<DeviceBuffer<float>>(
          std::vector<float>(size, 1.0f), 0));
    }
    empty.out.push_back(size > 0 ? given.back()->data : nullptr);
  }
  const char* err = Family::Gpu(op, Dtype::kFloat, empty, 0, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  bool ok = err == nullptr;
  if (!ok) {
    std::printf("FAIL %s %s: empty launch reported an error: %s\n",
                label.c_str(), Family::kName, err);
  }
  for (int o = 0; ok && o < Family::kOutputs; ++o) {
    const int64_t size = Family::OutputSize(o, 0);
    if (size == 0) continue;
    std::vector<float> got(size);
    CUDA_CHECK(cudaMemcpy(got.data(), empty.out[o], sizeof(float) * size,
                          cudaMemcpyDeviceToHost));
    for (float v : got) ok = ok && v == 0.0f;
    if (!ok) {
      std::printf("FAIL %s %s: empty problem: output %d is not zeros\n",
                  label.c_str(), Family::kName, o);
    }
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
std::vector<Relu6> Variants(Relu6) { return {Relu6{}}; }
std::vector<Tanh> Variants(Tanh) { return {Tanh{}}; }
std::vector<HardSigmoid> Variants(HardSigmoid) { return {HardSigmoid{}}; }

template <typename Family, typename Op>
void CheckAllVariants(bool quick, Tally* t) {
  if (SmallShapes() && !InSmallSet(Op::kName)) return;
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

// --family NAME: the one family to check; empty for all.
std::string g_family;
bool Wanted(const std::string& family) {
  return g_family.empty() || g_family == family;
}

}  // namespace tf_ops

int main(int argc, char** argv) {
  // Lines in order with a sanitizer's or the layer's messages on stderr.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int arg = 1;
  std::string mode;  // "", --quick, --small or --bench
  if (arg < argc && (std::string(argv[arg]) == "--quick" ||
                     std::string(argv[arg]) == "--small" ||
                     std::string(argv[arg]) == "--bench")) {
    mode = argv[arg++];
  }
  if (mode != "--bench" && arg + 1 < argc &&
      std::string(argv[arg]) == "--family") {
    tf_ops::g_family = argv[arg + 1];
    arg += 2;
  }
  if (mode == "--bench" && arg < argc) ++arg;  // its log2 n
  if (arg < argc) {
    std::fprintf(stderr,
                 "usage: %s [--quick | --small] [--family NAME] | --bench "
                 "[log2 n]\n",
                 argv[0]);
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

  const bool quick = mode == "--quick" || mode == "--small";
  if (mode == "--small") {
    tf_ops::CurrentSelftestSize() = tf_ops::SelftestSize::kSmall;
  } else if (quick) {
    tf_ops::CurrentSelftestSize() = tf_ops::SelftestSize::kQuick;
  }
  int passed = 0, failed = 0;
#define TF_OPS_CHECK_FAMILY(Family)                                   \
  if (tf_ops::Wanted(tf_ops::Family::kName)) {                        \
    const tf_ops::Tally t = tf_ops::CheckEveryActivation<tf_ops::Family>(quick); \
    passed += t.passed;                                               \
    failed += t.failed;                                               \
  }
  TF_OPS_GPU_FAMILIES(TF_OPS_CHECK_FAMILY)
  TF_OPS_GPU_FUSED_FAMILIES(TF_OPS_CHECK_FAMILY)
#undef TF_OPS_CHECK_FAMILY
  if (tf_ops::Wanted("norm")) {
    const auto norm = tf_ops::RunNormSelftest(quick);
    passed += norm.first;
    failed += norm.second;
  }
  if (tf_ops::Wanted("softmax")) {
    const tf_ops::softmax_selftest::Result t = tf_ops::CheckSoftmaxFamily(quick);
    passed += t.passed;
    failed += t.failed;
  }
  if (tf_ops::Wanted("batch_norm")) {
    const auto t = tf_ops::batch_norm_selftest::RunAll(quick);
    passed += t.passed;
    failed += t.failed;
  }
  if (tf_ops::Wanted("group_norm")) {
    const auto t = tf_ops::group_norm_selftest::RunAll(quick);
    passed += t.first;
    failed += t.second;
  }
  if (tf_ops::Wanted("rotary")) {
    const auto rotary = tf_ops::RunRotarySelftest(quick);
    passed += rotary.first;
    failed += rotary.second;
  }
  if (tf_ops::Wanted("attention")) {
    const auto attention = tf_ops::RunAttentionSelftest(quick);
    passed += attention.first;
    failed += attention.second;
  }

  if (!tf_ops::g_family.empty() && passed + failed == 0) {
    std::fprintf(stderr, "no family named %s\n", tf_ops::g_family.c_str());
    return 64;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  std::printf("SUMMARY checks total passed=%d failed=%d%s\n", passed, failed,
              mode == "--small" ? " small" : quick ? " quick" : "");
  return failed == 0 ? 0 : 1;
}
