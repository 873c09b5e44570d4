// The op families the GPU self-test (gpu_selftest.cu) and its benchmark
// (gpu_bench.cu) run, and the list that drives both: TF_OPS_GPU_FAMILIES.
//
// A family is a kind of kernel every activation gets (forward, backward, ...).
// Its struct says, for a problem of n elements, which buffers it reads and
// writes and how long they are, how to make its inputs from random samples, and
// how the CPU engine (the reference) and the CUDA engine compute its outputs.
// Both programs loop over the list, so a new family (grad-grad, bias +
// activation, gated) is one struct here and one line in the list; the checks
// (every activation, attribute variant, dtype and size; aligned and unaligned;
// in place), the sanitizer runs and the bandwidth table then cover it.

#ifndef TF_OPS_TESTS_GPU_OP_FAMILIES_H_
#define TF_OPS_TESTS_GPU_OP_FAMILIES_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "tf_ops/cc/activation_math.h"
#include "tf_ops/cc/dtype.h"
#include "tf_ops/cc/elementwise_cpu.h"
#include "tf_ops/cu/elementwise_gpu.h"

namespace tf_ops {

// Each dtype's engine name, label, and the tolerance the GPU must meet against
// the CPU engine (relative to max(|cpu|, 1)).
template <typename T>
struct DtypeInfo;
template <>
struct DtypeInfo<__half> {
  static constexpr Dtype kDtype = Dtype::kHalf;
  static constexpr const char* kName = "float16";
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
  static constexpr const char* kName = "float32";
  static constexpr double kRtol = 4e-6;  // device vs host libm, a few ulp
};
template <>
struct DtypeInfo<double> {
  static constexpr Dtype kDtype = Dtype::kDouble;
  static constexpr const char* kName = "float64";
  static constexpr double kRtol = 1e-14;
};

template <typename T>
using HostBuffers = std::vector<std::vector<T>>;

// Device (or host) buffers of one call: inputs, then outputs (an output may be
// null where the family allows it).
struct Args {
  std::vector<const void*> in;
  std::vector<void*> out;
};

// Buffers one call shares: (output, input) pairs, each output written over
// that input (TensorFlow may hand a kernel its input buffer as output).
using Aliases = std::vector<std::pair<int, int>>;

// Every family provides:
//   kName                       label in reports
//   kInputs, kOutputs           buffer counts
//   InputSize(i, n), OutputSize(i, n)   elements of each buffer
//   InPlace()                   the aliasings its kernel allows, each checked
//   kOutputsOptional            any output may be null (each is then checked
//                               alone too)
//   MakeInputs<Op, T>(op, samples, n)   inputs from samples: kSamples random
//                               vectors of n elements, specials first
//   Cpu(op, dtype, args, n)     the reference: the CPU engine
//   Gpu(op, dtype, args, n, stream)     the CUDA engine; nullptr or an error

// How many random sample vectors MakeInputs may draw from.
constexpr int kSamples = 3;

// y = f(x).
struct ForwardFamily {
  static constexpr const char* kName = "forward";
  static constexpr int kInputs = 1;
  static constexpr int kOutputs = 1;
  static constexpr bool kOutputsOptional = false;
  static int64_t InputSize(int, int64_t n) { return n; }
  static int64_t OutputSize(int, int64_t n) { return n; }
  static std::vector<Aliases> InPlace() { return {{{0, 0}}}; }  // y over x

  template <typename Op, typename T>
  static HostBuffers<T> MakeInputs(const Op&, const HostBuffers<T>& samples,
                                   int64_t) {
    return {samples[0]};
  }
  template <typename Op>
  static void Cpu(const Op& op, Dtype dtype, const Args& a, int64_t n) {
    CpuForward(op, dtype, a.in[0], a.out[0], 0, n);
  }
  template <typename Op>
  static const char* Gpu(const Op& op, Dtype dtype, const Args& a, int64_t n,
                         void* stream) {
    return LaunchForward(op, dtype, a.in[0], a.out[0], n, stream);
  }
};

// dx = g * f'(v), v being the features, or the outputs where the grad op
// takes them (Elu).
struct BackwardFamily {
  static constexpr const char* kName = "backward";
  static constexpr int kInputs = 2;  // g, v
  static constexpr int kOutputs = 1;
  static constexpr bool kOutputsOptional = false;
  static int64_t InputSize(int, int64_t n) { return n; }
  static int64_t OutputSize(int, int64_t n) { return n; }
  static std::vector<Aliases> InPlace() {
    return {{{0, 0}}, {{0, 1}}};  // dx over g, dx over v
  }

  template <typename Op, typename T>
  static HostBuffers<T> MakeInputs(const Op& op, const HostBuffers<T>& samples,
                                   int64_t n) {
    std::vector<T> v = samples[0];
    if (Op::kGradTakesOutputs) {
      CpuForward(op, DtypeInfo<T>::kDtype, samples[0].data(), v.data(), 0, n);
    }
    return {samples[1], v};
  }
  template <typename Op>
  static void Cpu(const Op& op, Dtype dtype, const Args& a, int64_t n) {
    CpuBackward(op, dtype, a.in[0], a.in[1], a.out[0], 0, n);
  }
  template <typename Op>
  static const char* Gpu(const Op& op, Dtype dtype, const Args& a, int64_t n,
                         void* stream) {
    return LaunchBackward(op, dtype, a.in[0], a.in[1], a.out[0], n, stream);
  }
};

// (d_g, d_v) = (u f'(v), u g f''(v)): the grad op's gradient. Its inputs are an
// upstream gradient and the backward family's (g, v); either output may be
// left out.
struct GradGradFamily {
  static constexpr const char* kName = "grad-grad";
  static constexpr int kInputs = 3;  // u, g, v
  static constexpr int kOutputs = 2;  // d_g, d_v
  static constexpr bool kOutputsOptional = true;
  static int64_t InputSize(int, int64_t n) { return n; }
  static int64_t OutputSize(int, int64_t n) { return n; }
  static std::vector<Aliases> InPlace() {
    return {{{0, 0}, {1, 1}}, {{0, 2}}, {{1, 2}}};  // d_g over u or v, d_v over g or v
  }

  template <typename Op, typename T>
  static HostBuffers<T> MakeInputs(const Op& op, const HostBuffers<T>& samples,
                                   int64_t n) {
    const HostBuffers<T> gv = BackwardFamily::MakeInputs<Op, T>(op, samples, n);
    return {samples[2], gv[0], gv[1]};
  }
  template <typename Op>
  static void Cpu(const Op& op, Dtype dtype, const Args& a, int64_t n) {
    CpuGradGrad(op, dtype, a.in[0], a.in[1], a.in[2], a.out[0], a.out[1], 0, n);
  }
  template <typename Op>
  static const char* Gpu(const Op& op, Dtype dtype, const Args& a, int64_t n,
                         void* stream) {
    return LaunchGradGrad(op, dtype, a.in[0], a.in[1], a.in[2], a.out[0],
                          a.out[1], n, stream);
  }
};

// Every family the kernels have; X(FamilyStruct).
#define TF_OPS_GPU_FAMILIES(X) \
  X(ForwardFamily)             \
  X(BackwardFamily)            \
  X(GradGradFamily)

}  // namespace tf_ops

#endif  // TF_OPS_TESTS_GPU_OP_FAMILIES_H_
