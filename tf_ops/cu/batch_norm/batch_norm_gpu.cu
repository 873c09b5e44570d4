// The batch-norm ops' CUDA kernels (batch_norm_gpu.h). Every pass over the
// tensor is one of two kernels with an element kernel, as in the CPU engine:
// PartialsKernel (a reduction: each block sums one fixed chunk of one channel
// by a fixed shared-memory tree into its own slot) for the statistics and the
// grad's sums, ElementKernel (grid-stride) for the normalisation and the
// training grad's dx. Between them, one thread per channel: the setup from
// given statistics, the statistics from the chunks' sums (added in a fixed
// order), the parameter gradients and the dx coefficients. No atomics
// anywhere. The forward launchers (training, inference) are one template, as
// are the grad launchers.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tf_ops/cc/activation/activation_choice.h"
#include "tf_ops/cc/batch_norm/batch_norm_math.h"
#include "tf_ops/cu/batch_norm/batch_norm_gpu.h"
#include "tf_ops/cu/core/launch_common.cuh"

namespace tf_ops {
namespace {

using gpu::AccType;
using gpu::BlocksFor;
using gpu::DispatchDtype;
using gpu::GlobalThread;
using gpu::GlobalThreads;
using gpu::kThreadsPerBlock;
using gpu::LastError;
using gpu::Load;
using gpu::Store;

// Elements of one channel per chunk (one block's share of a reduction).
constexpr int64_t kChunk = 4096;

// Element m of channel c.
__host__ __device__ __forceinline__ int64_t Offset(BatchNormLayout l,
                                                   int64_t c, int64_t m) {
  return (m / l.inner) * l.channels * l.inner + c * l.inner + m % l.inner;
}

int64_t ChunksOf(BatchNormLayout l) {
  return std::max<int64_t>(1, (l.count() + kChunk - 1) / kChunk);
}

int64_t Total(BatchNormLayout l) { return l.outer * l.channels * l.inner; }

// Scratch layout (doubles): partial sums a and b (C * chunks each, as Acc),
// then per-channel arrays in the compute type.
enum ChannelArray { kMean, kScale, kShift, kRstd, kC1, kC0, kDbeta, kDgamma,
                    kChannelArrays };

template <typename T>
struct Scratch {
  AccType<T>* a;
  AccType<T>* b;
  double* base;
  int64_t channels;
  __host__ __device__ ComputeType<T>* channel(int k) const {
    return reinterpret_cast<ComputeType<T>*>(base + k * channels);
  }
};
template <typename T>
Scratch<T> ScratchOf(double* scratch, BatchNormLayout l) {
  const int64_t p = l.channels * ChunksOf(l);
  return {reinterpret_cast<AccType<T>*>(scratch),
          reinterpret_cast<AccType<T>*>(scratch + p), scratch + 2 * p,
          l.channels};
}

template <typename U>
__device__ __forceinline__ U ValueOr(const void* p, int64_t c, U absent) {
  return p == nullptr ? absent : static_cast<const U*>(p)[c];
}

// ---------------------------------------------------- element kernels ---
// Each: T, Values (what At(c) reads for channel c) and Apply(i, values) for
// element i, returning the two values a reduction adds up.

template <typename Cm>
struct Pair {
  Cm a, b;
};

// Shifted sums about the channel's first element: x - pivot, its square.
template <typename T>
struct StatsKernel {
  using Cm = ComputeType<T>;
  using Values = Cm;
  const T* x;
  BatchNormLayout l;
  __device__ Values At(int64_t c) const {
    return l.count() == 0 ? Cm(0) : Load(x[Offset(l, c, 0)]);
  }
  __device__ Pair<Cm> Apply(int64_t i, Cm pivot) const {
    const Cm d = Load(x[i]) - pivot;
    return {d, d * d};
  }
};

// y = f(x * scale + shift).
template <typename Op, typename T>
struct ForwardKernel {
  using Cm = ComputeType<T>;
  struct Values {
    Cm scale, shift;
  };
  Op op;
  const T* x;
  T* y;
  Scratch<T> sc;
  __device__ Values At(int64_t c) const {
    return {sc.channel(kScale)[c], sc.channel(kShift)[c]};
  }
  __device__ Pair<Cm> Apply(int64_t i, const Values& v) const {
    y[i] = Store<T>(NormalizeForward(op, Load(x[i]), v.scale, v.shift));
    return {};
  }
};

// What both grad kernels read: dy, x and the scratch's per-channel values;
// dx, written, may be null (the sums alone).
template <typename Op, typename T>
struct GradKernelInputs {
  Op op;
  const T* dy;
  const T* x;
  T* dx;
  Scratch<T> sc;
};

// Sums of dz and dz * (x - mean); dx = scale * dz where dx is given (the
// inference grad).
template <typename Op, typename T>
struct GradSumsKernel : GradKernelInputs<Op, T> {
  using Cm = ComputeType<T>;
  struct Values {
    Cm mean, scale, shift;
  };
  __device__ Values At(int64_t c) const {
    return {this->sc.channel(kMean)[c], this->sc.channel(kScale)[c],
            this->sc.channel(kShift)[c]};
  }
  __device__ Pair<Cm> Apply(int64_t i, const Values& v) const {
    const Cm xv = Load(this->x[i]);
    const Cm dz =
        NormalizeDz(this->op, Load(this->dy[i]), xv, v.scale, v.shift);
    if (this->dx != nullptr) this->dx[i] = Store<T>(v.scale * dz);
    return {dz, dz * (xv - v.mean)};
  }
};

// The training grad's dx = scale * dz + c1 * (x - mean) + c0.
template <typename Op, typename T>
struct TrainingDxKernel : GradKernelInputs<Op, T> {
  using Cm = ComputeType<T>;
  struct Values {
    Cm mean;
    ChannelAffine<Cm> affine;
    TrainingDxCoefficients<Cm> c;
  };
  __device__ Values At(int64_t c) const {
    const Scratch<T>& sc = this->sc;
    return {sc.channel(kMean)[c],
            {sc.channel(kScale)[c], sc.channel(kShift)[c], Cm(0)},
            {sc.channel(kC1)[c], sc.channel(kC0)[c]}};
  }
  __device__ Pair<Cm> Apply(int64_t i, const Values& v) const {
    this->dx[i] = Store<T>(TrainingDx(this->op, Load(this->dy[i]),
                                      Load(this->x[i]), v.mean, v.affine,
                                      v.c));
    return {};
  }
};

// -------------------------------------------------- the two passes ------

// Adds the block's (a, b) by a fixed tree; thread 0 gets the sums.
template <typename A>
__device__ void BlockSum(A* sa, A* sb, A a, A b) {
  sa[threadIdx.x] = a;
  sb[threadIdx.x] = b;
  __syncthreads();
  for (int s = kThreadsPerBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      sa[threadIdx.x] += sa[threadIdx.x + s];
      sb[threadIdx.x] += sb[threadIdx.x + s];
    }
    __syncthreads();
  }
}

// The sums of each (channel, chunk) into pa, pb[channel * chunks + chunk].
template <typename A, typename K>
__global__ void PartialsKernel(K k, BatchNormLayout l, int64_t chunks, A* pa,
                               A* pb) {
  __shared__ A sa[kThreadsPerBlock];
  __shared__ A sb[kThreadsPerBlock];
  const int64_t n = l.count();
  for (int64_t tile = blockIdx.x; tile < l.channels * chunks;
       tile += gridDim.x) {
    const int64_t c = tile / chunks, chunk = tile % chunks;
    const typename K::Values v = k.At(c);
    A a = 0, b = 0;
    const int64_t end = n < (chunk + 1) * kChunk ? n : (chunk + 1) * kChunk;
    for (int64_t m = chunk * kChunk + threadIdx.x; m < end; m += blockDim.x) {
      const auto s = k.Apply(Offset(l, c, m), v);
      a += static_cast<A>(s.a);
      b += static_cast<A>(s.b);
    }
    BlockSum(sa, sb, a, b);
    if (threadIdx.x == 0) {
      pa[tile] = sa[0];
      pb[tile] = sb[0];
    }
    __syncthreads();
  }
}

template <typename K>
__global__ void ElementKernel(K k, BatchNormLayout l, int64_t total) {
  for (int64_t i = GlobalThread(); i < total; i += GlobalThreads()) {
    k.Apply(i, k.At((i / l.inner) % l.channels));
  }
}

// ----------------------------------------------------- per channel ------

// Channel c's chunk sums, added in order.
template <typename T>
__device__ void ChannelSums(const Scratch<T>& sc, int64_t c, int64_t chunks,
                            AccType<T>* a, AccType<T>* b) {
  AccType<T> sa = 0, sb = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    sa += sc.a[c * chunks + k];
    sb += sc.b[c * chunks + k];
  }
  *a = sa;
  *b = sb;
}

template <typename T>
__device__ void SetAffine(Scratch<T> sc, int64_t c, ComputeType<T> mean,
                          ComputeType<T> variance, const void* gamma,
                          const void* beta, float epsilon) {
  using Cm = ComputeType<T>;
  const ChannelAffine<Cm> a =
      AffineOf(mean, variance, ValueOr(gamma, c, Cm(1)),
               ValueOr(beta, c, Cm(0)), static_cast<Cm>(epsilon));
  sc.channel(kMean)[c] = mean;
  sc.channel(kScale)[c] = a.scale;
  sc.channel(kShift)[c] = a.shift;
  sc.channel(kRstd)[c] = a.rstd;
}

// The affine of the given statistics.
template <typename T>
__global__ void SetupKernel(const void* mean, const void* variance,
                            const void* gamma, const void* beta,
                            float epsilon, Scratch<T> sc) {
  using Cm = ComputeType<T>;
  for (int64_t c = GlobalThread(); c < sc.channels; c += GlobalThreads()) {
    SetAffine(sc, c, static_cast<const Cm*>(mean)[c],
              static_cast<const Cm*>(variance)[c], gamma, beta, epsilon);
  }
}

// The batch statistics from the chunks' shifted sums, and their affine.
template <typename T>
__global__ void StatsFinishKernel(StatsKernel<T> stats, int64_t chunks,
                                  const void* gamma, const void* beta,
                                  float epsilon, void* mean, void* variance,
                                  Scratch<T> sc) {
  using A = AccType<T>;
  using Cm = ComputeType<T>;
  const BatchNormLayout l = stats.l;
  for (int64_t c = GlobalThread(); c < l.channels; c += GlobalThreads()) {
    A a, b;
    ChannelSums(sc, c, chunks, &a, &b);
    const ChannelMoments<A> m = MomentsFromSums(
        static_cast<A>(stats.At(c)), a, b, static_cast<A>(l.count()));
    const Cm mc = static_cast<Cm>(m.mean), vc = static_cast<Cm>(m.variance);
    static_cast<Cm*>(mean)[c] = mc;
    static_cast<Cm*>(variance)[c] = vc;
    SetAffine(sc, c, mc, vc, gamma, beta, epsilon);
  }
}

// dbeta = sum(dz), dgamma = rstd * sum(dz * (x - mean)) into the scratch
// and, where given, the outputs.
template <typename T>
__global__ void GradFinishKernel(int64_t chunks, void* dgamma, void* dbeta,
                                 Scratch<T> sc) {
  using A = AccType<T>;
  using Cm = ComputeType<T>;
  for (int64_t c = GlobalThread(); c < sc.channels; c += GlobalThreads()) {
    A a, b;
    ChannelSums(sc, c, chunks, &a, &b);
    const Cm db = static_cast<Cm>(a);
    const Cm dg = sc.channel(kRstd)[c] * static_cast<Cm>(b);
    sc.channel(kDbeta)[c] = db;
    sc.channel(kDgamma)[c] = dg;
    if (dgamma != nullptr) static_cast<Cm*>(dgamma)[c] = dg;
    if (dbeta != nullptr) static_cast<Cm*>(dbeta)[c] = db;
  }
}

// The training grad's dx coefficients from the parameter gradients over
// `count` elements.
template <typename T>
__global__ void CoefficientsKernel(const void* dgamma, const void* dbeta,
                                   const void* d_mean, const void* d_variance,
                                   double count, Scratch<T> sc) {
  using Cm = ComputeType<T>;
  for (int64_t c = GlobalThread(); c < sc.channels; c += GlobalThreads()) {
    const TrainingDxCoefficients<Cm> co = TrainingDxOf(
        sc.channel(kScale)[c], sc.channel(kRstd)[c],
        static_cast<const Cm*>(dbeta)[c], static_cast<const Cm*>(dgamma)[c],
        ValueOr(d_mean, c, Cm(0)), ValueOr(d_variance, c, Cm(0)),
        static_cast<Cm>(count));
    sc.channel(kC1)[c] = co.c1;
    sc.channel(kC0)[c] = co.c0;
  }
}

// ----------------------------------------------------------- launches ---

template <typename T, typename K>
void LaunchPartials(const K& k, BatchNormLayout l, Scratch<T> sc,
                    cudaStream_t stream) {
  const int64_t chunks = ChunksOf(l);
  TF_OPS_LAUNCH(BlocksFor(l.channels * chunks, 1), kThreadsPerBlock, 0,
                stream, PartialsKernel<AccType<T>, K>)(k, l, chunks, sc.a,
                                                       sc.b);
}

template <typename K>
void LaunchElements(const K& k, BatchNormLayout l, cudaStream_t stream) {
  if (Total(l) == 0) return;
  TF_OPS_LAUNCH(BlocksFor(Total(l)), kThreadsPerBlock, 0, stream,
                ElementKernel<K>)(k, l, Total(l));
}

// Training (kTraining: the batch statistics into mean and variance) or
// inference (the given mean and variance); then y where given.
template <bool kTraining>
const char* LaunchForward(const ActivationChoice& act, Dtype dtype,
                          const void* x_raw, const void* gamma,
                          const void* beta, const void* mean,
                          const void* variance, float epsilon, void* y_raw,
                          BatchNormLayout l, double* scratch,
                          cudaStream_t stream) {
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* x = static_cast<const T*>(x_raw);
    const Scratch<T> sc = ScratchOf<T>(scratch, l);
    if (l.channels == 0) return LastError();
    if (kTraining) {
      const StatsKernel<T> stats{x, l};
      LaunchPartials<T>(stats, l, sc, stream);
      TF_OPS_LAUNCH(BlocksFor(l.channels), kThreadsPerBlock, 0, stream,
                    StatsFinishKernel<T>)(
          stats, ChunksOf(l), gamma, beta, epsilon, const_cast<void*>(mean),
          const_cast<void*>(variance), sc);
    } else {
      TF_OPS_LAUNCH(BlocksFor(l.channels), kThreadsPerBlock, 0, stream,
                    SetupKernel<T>)(mean, variance, gamma, beta, epsilon, sc);
    }
    if (y_raw == nullptr) return LastError();
    VisitActivation(act, [&](const auto& op) {
      using Op = std::decay_t<decltype(op)>;
      LaunchElements(ForwardKernel<Op, T>{op, x, static_cast<T*>(y_raw), sc},
                     l, stream);
    });
    return LastError();
  });
}

// The grad ops: the sums of pass 1 (writing dx = scale * dz for the
// inference grad), then for the training grad dx from them in pass 2; the
// input grad is pass 2 alone, its parameter gradients the inputs
// dgamma_in and dbeta_in over `count` elements.
enum class GradKind { kTraining, kInference, kTrainingInputGrad };

template <GradKind kKind>
const char* LaunchGrad(const ActivationChoice& act, Dtype dtype,
                       const void* dy_raw, const void* x_raw,
                       const void* gamma, const void* beta, const void* mean,
                       const void* variance, const void* d_mean,
                       const void* d_variance, const void* dgamma_in,
                       const void* dbeta_in, double count, float epsilon,
                       void* dx_raw, void* dgamma, void* dbeta,
                       BatchNormLayout l, double* scratch,
                       cudaStream_t stream) {
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* x = static_cast<const T*>(x_raw);
    const T* dy = static_cast<const T*>(dy_raw);
    T* dx = static_cast<T*>(dx_raw);
    const Scratch<T> sc = ScratchOf<T>(scratch, l);
    if (l.channels == 0) return LastError();
    TF_OPS_LAUNCH(BlocksFor(l.channels), kThreadsPerBlock, 0, stream,
                  SetupKernel<T>)(mean, variance, gamma, beta, epsilon, sc);
    VisitActivation(act, [&](const auto& op) {
      using Op = std::decay_t<decltype(op)>;
      if (kKind != GradKind::kTrainingInputGrad) {
        T* dx_pass1 = kKind == GradKind::kInference ? dx : nullptr;
        LaunchPartials<T>(
            GradSumsKernel<Op, T>{{op, dy, x, dx_pass1, sc}}, l, sc, stream);
        TF_OPS_LAUNCH(BlocksFor(l.channels), kThreadsPerBlock, 0, stream,
                      GradFinishKernel<T>)(ChunksOf(l), dgamma, dbeta, sc);
      }
      if (kKind == GradKind::kInference || dx == nullptr) return;
      const bool given = kKind == GradKind::kTrainingInputGrad;
      TF_OPS_LAUNCH(BlocksFor(l.channels), kThreadsPerBlock, 0, stream,
                    CoefficientsKernel<T>)(
          given ? dgamma_in : sc.channel(kDgamma),
          given ? dbeta_in : sc.channel(kDbeta), d_mean, d_variance,
          given ? count : static_cast<double>(l.count()), sc);
      LaunchElements(TrainingDxKernel<Op, T>{{op, dy, x, dx, sc}}, l, stream);
    });
    return LastError();
  });
}

}  // namespace

int64_t BatchNormGpuScratchDoubles(BatchNormLayout layout) {
  return 2 * layout.channels * ChunksOf(layout) +
         kChannelArrays * layout.channels;
}

const char* LaunchBatchNormTraining(const ActivationChoice& act,
                                    Dtype dtype, const void* x,
                                    const void* gamma, const void* beta,
                                    float epsilon, void* y, void* mean,
                                    void* variance, BatchNormLayout layout,
                                    double* scratch, void* stream) {
  return LaunchForward<true>(act, dtype, x, gamma, beta, mean, variance,
                             epsilon, y, layout, scratch,
                             static_cast<cudaStream_t>(stream));
}

const char* LaunchBatchNormInference(const ActivationChoice& act,
                                     Dtype dtype, const void* x,
                                     const void* gamma, const void* beta,
                                     const void* mean, const void* variance,
                                     float epsilon, void* y,
                                     BatchNormLayout layout, double* scratch,
                                     void* stream) {
  return LaunchForward<false>(act, dtype, x, gamma, beta, mean, variance,
                              epsilon, y, layout, scratch,
                              static_cast<cudaStream_t>(stream));
}

const char* LaunchBatchNormTrainingGrad(
    const ActivationChoice& act, Dtype dtype, const void* dy,
    const void* x, const void* gamma, const void* beta, const void* mean,
    const void* variance, const void* d_mean, const void* d_variance,
    float epsilon, void* dx, void* dgamma, void* dbeta,
    BatchNormLayout layout, double* scratch, void* stream) {
  return LaunchGrad<GradKind::kTraining>(
      act, dtype, dy, x, gamma, beta, mean, variance, d_mean, d_variance,
      nullptr, nullptr, 0.0, epsilon, dx, dgamma, dbeta, layout, scratch,
      static_cast<cudaStream_t>(stream));
}

const char* LaunchBatchNormTrainingInputGrad(
    const ActivationChoice& act, Dtype dtype, const void* dy,
    const void* x, const void* gamma, const void* beta, const void* mean,
    const void* variance, const void* d_mean, const void* d_variance,
    const void* dgamma, const void* dbeta, double count, float epsilon,
    void* dx, BatchNormLayout layout, double* scratch, void* stream) {
  return LaunchGrad<GradKind::kTrainingInputGrad>(
      act, dtype, dy, x, gamma, beta, mean, variance, d_mean, d_variance,
      dgamma, dbeta, count, epsilon, dx, nullptr, nullptr, layout, scratch,
      static_cast<cudaStream_t>(stream));
}

const char* LaunchBatchNormInferenceGrad(
    const ActivationChoice& act, Dtype dtype, const void* dy,
    const void* x, const void* gamma, const void* beta, const void* mean,
    const void* variance, float epsilon, void* dx, void* dgamma, void* dbeta,
    BatchNormLayout layout, double* scratch, void* stream) {
  return LaunchGrad<GradKind::kInference>(
      act, dtype, dy, x, gamma, beta, mean, variance, nullptr, nullptr,
      nullptr, nullptr, 0.0, epsilon, dx, dgamma, dbeta, layout, scratch,
      static_cast<cudaStream_t>(stream));
}

}  // namespace tf_ops
