// The op families the GPU self-test (gpu_selftest.cu) and its benchmark
// (gpu_bench.cu) run, and the lists that drive them: TF_OPS_GPU_FAMILIES
// (both programs) and TF_OPS_GPU_FUSED_FAMILIES (the fused ops; the
// self-test only, for now).
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

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "tests/gpu/selftest_size.h"
#include "tf_ops/cc/activation/activation_math.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/activation/activation_cpu.h"
#include "tf_ops/cc/fused/fused_cpu.h"
#include "tf_ops/cu/activation/activation_gpu.h"
#include "tf_ops/cu/fused/fused_gpu.h"

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
//   Slack<T>(in, want, n)       per output, an absolute slack per element on
//                               top of the dtype's tolerance, or nothing:
//                               only sums need it (NoSums: none)

// How many random sample vectors MakeInputs may draw from.
constexpr int kSamples = 3;

// Element-wise families: each output element is one rounded result, held to
// the dtype's tolerance alone.
struct NoSums {
  template <typename T>
  static std::vector<std::vector<double>> Slack(const HostBuffers<T>&,
                                                const HostBuffers<T>&,
                                                int64_t) {
    return {};
  }
};

// y = f(x).
struct ForwardFamily : NoSums {
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
struct BackwardFamily : NoSums {
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
struct GradGradFamily : NoSums {
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

// ------------------------------------------------------- fused ops ------
// The fused ops' shapes come from n, the size under test: a channel count
// (and for NCHW an inner size) picked by n % 5, then the fewest rows that
// reach n elements. The size lists thus cover one row and many, 1 channel,
// odd counts, counts past the 32 channels of a block, an inner size past
// fused_gpu.cu's inner chunk. n = 0 is an empty problem.

// The first input's elements repeat the sample from `skip` on, so long
// problems reuse a sample of n; skip = 11 leaves out the special values
// (MakeSample puts 11 first) where a sum over a channel would otherwise be
// NaN whatever the kernel does.
template <typename T>
std::vector<T> Tiled(const std::vector<T>& sample, int64_t count,
                     int64_t skip = 0) {
  std::vector<T> v(count);
  const int64_t n = static_cast<int64_t>(sample.size());
  for (int64_t i = 0; i < count; ++i) v[i] = sample[(skip + i) % n];
  return v;
}

struct BiasShape {
  BiasLayout layout;
  int64_t elements;
};

template <bool kNchw>
BiasShape BiasShapeFor(int64_t n) {
  if (n == 0) return {{0, 1}, 0};
  constexpr int64_t kChannels[5] = {1, 3, 7, 64, 67};
  // NCHW: (channels, inner); 20001 is past the inner chunk (16384).
  constexpr int64_t kNchwShapes[5][2] = {
      {1, 2}, {3, 5}, {7, 33}, {64, 3}, {2, 20001}};
  // --small (selftest_size.h): fewer channels (the gradient's reduction is
  // a block per channel); 33 still needs a second block of 32 channels.
  constexpr int64_t kSmallChannels[5] = {1, 3, 7, 33, 5};
  constexpr int64_t kSmallNchwShapes[5][2] = {
      {1, 2}, {3, 5}, {7, 33}, {5, 3}, {2, 20001}};
  const bool small = SmallShapes();
  BiasLayout layout;
  if (kNchw) {
    const int64_t* shape = small ? kSmallNchwShapes[n % 5] : kNchwShapes[n % 5];
    layout = {shape[0], shape[1]};
  } else {
    layout = {small ? kSmallChannels[n % 5] : kChannels[n % 5], 1};
  }
  const int64_t per_outer = layout.channels * layout.inner;
  return {layout, (n + per_outer - 1) / per_outer * per_outer};
}

// y = f(x + bias).
template <bool kNchw>
struct BiasForwardFamily : NoSums {
  static constexpr const char* kName =
      kNchw ? "bias-forward NCHW" : "bias-forward NHWC";
  static constexpr int kInputs = 2;   // x, bias
  static constexpr int kOutputs = 1;  // y
  static constexpr bool kOutputsOptional = false;
  static int64_t InputSize(int i, int64_t n) {
    const BiasShape s = BiasShapeFor<kNchw>(n);
    return i == 0 ? s.elements : s.layout.channels;
  }
  static int64_t OutputSize(int, int64_t n) {
    return BiasShapeFor<kNchw>(n).elements;
  }
  static std::vector<Aliases> InPlace() { return {{{0, 0}}}; }  // y over x

  template <typename Op, typename T>
  static HostBuffers<T> MakeInputs(const Op&, const HostBuffers<T>& samples,
                                   int64_t n) {
    return {Tiled(samples[0], InputSize(0, n)),
            Tiled(samples[1], InputSize(1, n), 11)};
  }
  template <typename Op>
  static void Cpu(const Op& op, Dtype dtype, const Args& a, int64_t n) {
    const BiasShape s = BiasShapeFor<kNchw>(n);
    CpuBiasForward(op, dtype, a.in[0], a.in[1], a.out[0], s.layout, 0,
                   s.elements);
  }
  template <typename Op>
  static const char* Gpu(const Op& op, Dtype dtype, const Args& a, int64_t n,
                         void* stream) {
    const BiasShape s = BiasShapeFor<kNchw>(n);
    return LaunchBiasForward(op, dtype, a.in[0], a.in[1], a.out[0], s.layout,
                             s.elements, stream);
  }
};

// y = f(x + a), a of x's shape: the bias loops with one channel per element
// (the add ops' layout, fused_checks.h's AddLayoutOf).
struct AddForwardFamily : NoSums {
  static constexpr const char* kName = "add-forward";
  static constexpr int kInputs = 2;   // x, addend
  static constexpr int kOutputs = 1;  // y
  static constexpr bool kOutputsOptional = false;
  static int64_t InputSize(int, int64_t n) { return n; }
  static int64_t OutputSize(int, int64_t n) { return n; }
  static std::vector<Aliases> InPlace() { return {{{0, 0}}, {{1, 0}}}; }

  template <typename Op, typename T>
  static HostBuffers<T> MakeInputs(const Op&, const HostBuffers<T>& samples,
                                   int64_t n) {
    return {Tiled(samples[0], n), Tiled(samples[1], n, 11)};
  }
  template <typename Op>
  static void Cpu(const Op& op, Dtype dtype, const Args& a, int64_t n) {
    CpuBiasForward(op, dtype, a.in[0], a.in[1], a.out[0], BiasLayout{n, 1}, 0,
                   n);
  }
  template <typename Op>
  static const char* Gpu(const Op& op, Dtype dtype, const Args& a, int64_t n,
                         void* stream) {
    return LaunchBiasForward(op, dtype, a.in[0], a.in[1], a.out[0],
                             BiasLayout{n, 1}, n, stream);
  }
};

// A bias gradient's launch, `launch(dx, db, scratch)` with dx of dx_elements
// and db of db_elements, run twice: first into buffers of its own, then into
// a.out[0] and a.out[1] (which may be inputs). Fails unless both runs give db
// the same bits. --small runs only the second (on the CPU every barrier
// costs a thread switch per thread; the GPU's run checks the bits).
template <typename Launch>
const char* RunTwiceWithSameSums(Dtype dtype, const Args& a,
                                 int64_t dx_elements, int64_t db_elements,
                                 int64_t scratch_bytes, const Launch& launch) {
  const size_t element_bytes =
      dtype == Dtype::kDouble ? 8 : dtype == Dtype::kFloat ? 4 : 2;
  const size_t db_bytes = element_bytes * db_elements;
  const size_t dx_bytes = element_bytes * dx_elements;
  void *scratch = nullptr, *dx_first = nullptr, *db_first = nullptr;
  if (cudaMalloc(&scratch, scratch_bytes + 1) != cudaSuccess ||
      cudaMalloc(&dx_first, dx_bytes + 1) != cudaSuccess ||
      cudaMalloc(&db_first, db_bytes + 1) != cudaSuccess) {
    cudaFree(scratch);
    cudaFree(dx_first);
    return "cudaMalloc failed";
  }
  const bool twice = !SmallShapes();
  const char* err = twice ? launch(dx_first, db_first, scratch) : nullptr;
  if (err == nullptr) err = launch(a.out[0], a.out[1], scratch);
  if (twice && err == nullptr && db_bytes > 0) {
    std::vector<char> first(db_bytes), second(db_bytes);
    if (cudaMemcpy(first.data(), db_first, db_bytes,
                   cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(second.data(), a.out[1], db_bytes,
                   cudaMemcpyDeviceToHost) != cudaSuccess) {
      err = "cudaMemcpy of the bias gradients failed";
    } else if (std::memcmp(first.data(), second.data(), db_bytes) != 0) {
      err = "the bias gradient differs between two runs (not deterministic)";
    }
  }
  cudaFree(scratch);
  cudaFree(dx_first);
  cudaFree(db_first);
  return err;
}

// db's slack for the self-test: each engine adds in its own order; both are
// within 8 sqrt(m) u sum|dx| of the exact sum (m terms, u the unit roundoff
// of the accumulator: float for half and bfloat16, double otherwise), a
// bound rounding errors meet and a wrong or missing term of any size does
// not. Element i of dx (`elements` of them) adds to channel channel_of(i).
template <typename T, typename ChannelOf>
std::vector<double> SumSlack(const std::vector<T>& dx, int64_t elements,
                             int64_t channels, ChannelOf channel_of) {
  std::vector<double> abs_sum(channels, 0.0);
  std::vector<int64_t> terms(channels, 0);
  for (int64_t i = 0; i < elements; ++i) {
    const int64_t c = channel_of(i);
    abs_sum[c] +=
        std::fabs(static_cast<double>(static_cast<ComputeType<T>>(dx[i])));
    ++terms[c];
  }
  const double u = sizeof(T) == 2 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
  std::vector<double> slack(channels);
  for (int64_t c = 0; c < channels; ++c) {
    slack[c] = 8.0 * std::sqrt(static_cast<double>(terms[c])) * u * abs_sum[c];
  }
  return slack;
}

// The inputs (g, x, bias) of the families with a bias gradient: finite g and
// x (no specials), so that every channel's sum means something; the forward
// families and the plain ones cover the specials. Family gives the sizes.
template <typename Family>
struct FiniteBiasGradInputs {
  template <typename Op, typename T>
  static HostBuffers<T> MakeInputs(const Op&, const HostBuffers<T>& samples,
                                   int64_t n) {
    return {Tiled(samples[1], Family::InputSize(0, n), 11),
            Tiled(samples[0], Family::InputSize(1, n), 11),
            Tiled(samples[2], Family::InputSize(2, n), 11)};
  }
};

// (dx, db) = (g f'(x + bias), the sums of dx per channel). Gpu runs the
// launcher twice and fails unless both give db the same bits.
template <bool kNchw>
struct BiasGradFamily : FiniteBiasGradInputs<BiasGradFamily<kNchw>> {
  static constexpr const char* kName =
      kNchw ? "bias-grad NCHW" : "bias-grad NHWC";
  static constexpr int kInputs = 3;   // g, x, bias
  static constexpr int kOutputs = 2;  // dx, db
  static constexpr bool kOutputsOptional = false;
  static int64_t InputSize(int i, int64_t n) {
    const BiasShape s = BiasShapeFor<kNchw>(n);
    return i < 2 ? s.elements : s.layout.channels;
  }
  static int64_t OutputSize(int o, int64_t n) { return InputSize(o == 0 ? 0 : 2, n); }
  static std::vector<Aliases> InPlace() {
    return {{{0, 0}}, {{0, 1}}};  // dx over g, dx over x
  }

  template <typename Op>
  static void Cpu(const Op& op, Dtype dtype, const Args& a, int64_t n) {
    const BiasShape s = BiasShapeFor<kNchw>(n);
    const BiasGradTiling tiling = MakeBiasGradTiling(s.layout, s.elements);
    std::vector<double> partials(tiling.partials());  // holds float or double
    CpuBiasGradTiles(op, dtype, a.in[0], a.in[1], a.in[2], a.out[0],
                     partials.data(), tiling, 0, tiling.tiles());
    CpuBiasGradReduce(dtype, partials.data(), tiling, a.out[1], 0,
                      s.layout.channels);
  }
  template <typename Op>
  static const char* Gpu(const Op& op, Dtype dtype, const Args& a, int64_t n,
                         void* stream) {
    const BiasShape s = BiasShapeFor<kNchw>(n);
    return RunTwiceWithSameSums(
        dtype, a, s.elements, s.layout.channels,
        BiasGradGpuScratchBytes(dtype, s.layout, s.elements),
        [&](void* dx, void* db, void* scratch) {
          return LaunchBiasGrad(op, dtype, a.in[0], a.in[1], a.in[2], dx, db,
                                scratch, s.layout, s.elements, stream);
        });
  }

  // db: SumSlack.
  template <typename T>
  static std::vector<std::vector<double>> Slack(const HostBuffers<T>&,
                                                const HostBuffers<T>& want,
                                                int64_t n) {
    const BiasShape s = BiasShapeFor<kNchw>(n);
    const int64_t channels = s.layout.channels, inner = s.layout.inner;
    return {{}, SumSlack<T>(want[0], s.elements, channels, [&](int64_t i) {
              return (i / inner) % channels;
            })};
  }
};

// Gated shapes: half = the width of each half, picked by n % 5; rows enough
// for n outputs.
struct GatedShape {
  int64_t half;
  int64_t outputs;  // rows * half; the features have twice as many
};
inline GatedShape GatedShapeFor(int64_t n) {
  if (n == 0) return {1, 0};
  constexpr int64_t kHalves[5] = {1, 3, 7, 64, 67};
  constexpr int64_t kSmallHalves[5] = {1, 3, 7, 33, 5};  // --small
  const int64_t half = (SmallShapes() ? kSmallHalves : kHalves)[n % 5];
  return {half, (n + half - 1) / half * half};
}

// y = f(a) b, [a, b] the halves of x's last axis.
struct GatedForwardFamily : NoSums {
  static constexpr const char* kName = "gated-forward";
  static constexpr int kInputs = 1;   // x
  static constexpr int kOutputs = 1;  // y
  static constexpr bool kOutputsOptional = false;
  static int64_t InputSize(int, int64_t n) { return 2 * GatedShapeFor(n).outputs; }
  static int64_t OutputSize(int, int64_t n) { return GatedShapeFor(n).outputs; }
  static std::vector<Aliases> InPlace() { return {}; }  // y is smaller than x

  template <typename Op, typename T>
  static HostBuffers<T> MakeInputs(const Op&, const HostBuffers<T>& samples,
                                   int64_t n) {
    return {Tiled(samples[0], InputSize(0, n))};
  }
  template <typename Op>
  static void Cpu(const Op& op, Dtype dtype, const Args& a, int64_t n) {
    const GatedShape s = GatedShapeFor(n);
    CpuGatedForward(op, dtype, a.in[0], nullptr, a.out[0], s.half, 0,
                    s.outputs);
  }
  template <typename Op>
  static const char* Gpu(const Op& op, Dtype dtype, const Args& a, int64_t n,
                         void* stream) {
    const GatedShape s = GatedShapeFor(n);
    return LaunchGatedForward(op, dtype, a.in[0], nullptr, a.out[0], s.half,
                              s.outputs, stream);
  }
};

// dx = [g b f'(a), g f(a)].
struct GatedGradFamily : NoSums {
  static constexpr const char* kName = "gated-grad";
  static constexpr int kInputs = 2;   // g, x
  static constexpr int kOutputs = 1;  // dx
  static constexpr bool kOutputsOptional = false;
  static int64_t InputSize(int i, int64_t n) {
    return (i == 0 ? 1 : 2) * GatedShapeFor(n).outputs;
  }
  static int64_t OutputSize(int, int64_t n) { return 2 * GatedShapeFor(n).outputs; }
  static std::vector<Aliases> InPlace() { return {{{0, 1}}}; }  // dx over x

  template <typename Op, typename T>
  static HostBuffers<T> MakeInputs(const Op&, const HostBuffers<T>& samples,
                                   int64_t n) {
    return {Tiled(samples[1], InputSize(0, n)),
            Tiled(samples[0], InputSize(1, n))};
  }
  template <typename Op>
  static void Cpu(const Op& op, Dtype dtype, const Args& a, int64_t n) {
    const GatedShape s = GatedShapeFor(n);
    CpuGatedGrad(op, dtype, a.in[0], a.in[1], a.out[0], s.half, 0, s.outputs);
  }
  template <typename Op>
  static const char* Gpu(const Op& op, Dtype dtype, const Args& a, int64_t n,
                         void* stream) {
    const GatedShape s = GatedShapeFor(n);
    return LaunchGatedGrad(op, dtype, a.in[0], a.in[1], a.out[0], s.half,
                           s.outputs, stream);
  }
};

// y = f(a + bias_a) (b + bias_b): the gate with a bias before the split.
struct BiasGatedForwardFamily : NoSums {
  static constexpr const char* kName = "bias-gated-forward";
  static constexpr int kInputs = 2;   // x, bias
  static constexpr int kOutputs = 1;  // y
  static constexpr bool kOutputsOptional = false;
  static int64_t InputSize(int i, int64_t n) {
    const GatedShape s = GatedShapeFor(n);
    return i == 0 ? 2 * s.outputs : 2 * s.half;
  }
  static int64_t OutputSize(int, int64_t n) { return GatedShapeFor(n).outputs; }
  static std::vector<Aliases> InPlace() { return {}; }

  template <typename Op, typename T>
  static HostBuffers<T> MakeInputs(const Op&, const HostBuffers<T>& samples,
                                   int64_t n) {
    return {Tiled(samples[0], InputSize(0, n)),
            Tiled(samples[1], InputSize(1, n), 11)};
  }
  template <typename Op>
  static void Cpu(const Op& op, Dtype dtype, const Args& a, int64_t n) {
    const GatedShape s = GatedShapeFor(n);
    CpuGatedForward(op, dtype, a.in[0], a.in[1], a.out[0], s.half, 0,
                    s.outputs);
  }
  template <typename Op>
  static const char* Gpu(const Op& op, Dtype dtype, const Args& a, int64_t n,
                         void* stream) {
    const GatedShape s = GatedShapeFor(n);
    return LaunchGatedForward(op, dtype, a.in[0], a.in[1], a.out[0], s.half,
                              s.outputs, stream);
  }
};

// (dx, db): the gated grad at the features plus the bias, and the sums of dx
// over the rows. Gpu runs twice and fails unless db has the same bits.
struct BiasGatedGradFamily : FiniteBiasGradInputs<BiasGatedGradFamily> {
  static constexpr const char* kName = "bias-gated-grad";
  static constexpr int kInputs = 3;   // g, x, bias
  static constexpr int kOutputs = 2;  // dx, db
  static constexpr bool kOutputsOptional = false;
  static int64_t InputSize(int i, int64_t n) {
    const GatedShape s = GatedShapeFor(n);
    return i == 0 ? s.outputs : i == 1 ? 2 * s.outputs : 2 * s.half;
  }
  static int64_t OutputSize(int o, int64_t n) { return InputSize(o + 1, n); }
  static std::vector<Aliases> InPlace() { return {{{0, 1}}}; }  // dx over x

  template <typename Op>
  static void Cpu(const Op& op, Dtype dtype, const Args& a, int64_t n) {
    const GatedShape s = GatedShapeFor(n);
    const BiasGradTiling tiling =
        MakeGatedBiasGradTiling(s.half, s.outputs / s.half);
    std::vector<double> partials(tiling.partials());  // holds float or double
    CpuBiasGatedGradTiles(op, dtype, a.in[0], a.in[1], a.in[2], a.out[0],
                          partials.data(), tiling, 0, tiling.tiles());
    CpuBiasGradReduce(dtype, partials.data(), tiling, a.out[1], 0, 2 * s.half);
  }
  template <typename Op>
  static const char* Gpu(const Op& op, Dtype dtype, const Args& a, int64_t n,
                         void* stream) {
    const GatedShape s = GatedShapeFor(n);
    return RunTwiceWithSameSums(
        dtype, a, 2 * s.outputs, 2 * s.half,
        BiasGatedGradGpuScratchBytes(dtype, s.half, s.outputs),
        [&](void* dx, void* db, void* scratch) {
          return LaunchBiasGatedGrad(op, dtype, a.in[0], a.in[1], a.in[2], dx,
                                     db, scratch, s.half, s.outputs, stream);
        });
  }

  // db: SumSlack over the columns of dx (rows x 2 half).
  template <typename T>
  static std::vector<std::vector<double>> Slack(const HostBuffers<T>&,
                                                const HostBuffers<T>& want,
                                                int64_t n) {
    const GatedShape s = GatedShapeFor(n);
    const int64_t cols = 2 * s.half;
    return {{}, SumSlack<T>(want[0], 2 * s.outputs, cols,
                            [&](int64_t i) { return i % cols; })};
  }
};

// Every family the kernels have; X(FamilyStruct).
#define TF_OPS_GPU_FAMILIES(X) \
  X(ForwardFamily)             \
  X(BackwardFamily)            \
  X(GradGradFamily)

// The fused ops' families: checked by the self-test like the others, not yet
// timed by the benchmark (whose bandwidth targets are the element-wise
// kernels'; the bias gradient's self-test Gpu also runs twice).
#define TF_OPS_GPU_FUSED_FAMILIES(X) \
  X(BiasForwardFamily<false>)        \
  X(BiasForwardFamily<true>)         \
  X(AddForwardFamily)                \
  X(BiasGradFamily<false>)           \
  X(BiasGradFamily<true>)            \
  X(GatedForwardFamily)              \
  X(GatedGradFamily)                 \
  X(BiasGatedForwardFamily)          \
  X(BiasGatedGradFamily)

}  // namespace tf_ops

#endif  // TF_OPS_TESTS_GPU_OP_FAMILIES_H_
