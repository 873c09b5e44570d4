// The batch-norm ops' CUDA kernels (batch_norm_gpu.h). Per op: a per-channel
// setup, a chunked partial-sum pass (statistics, or the grad's sums of dz and
// dz * (x - mean)), a per-channel finish that adds each channel's chunks in a
// fixed order, and a grid-stride element pass. No atomics anywhere.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tf_ops/cc/batch_norm/batch_norm_activation.h"
#include "tf_ops/cc/batch_norm/batch_norm_math.h"
#include "tf_ops/cu/batch_norm/batch_norm_gpu.h"
#include "tf_ops/cu/core/launch_common.cuh"

namespace tf_ops {
namespace {

using gpu::BlocksFor;
using gpu::DispatchDtype;
using gpu::GlobalThread;
using gpu::GlobalThreads;
using gpu::kThreadsPerBlock;
using gpu::LastError;

// Elements of one channel per chunk (one block's share of a reduction).
constexpr int64_t kChunk = 4096;

template <typename T>
using AccType = std::conditional_t<
    std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value,
    float, double>;

template <typename T>
__device__ __forceinline__ ComputeType<T> Load(T v) {
  return static_cast<ComputeType<T>>(v);
}
template <typename T>
__device__ __forceinline__ T Store(ComputeType<T> v) {
  return static_cast<T>(v);
}

// Element m of channel c.
__device__ __forceinline__ int64_t Offset(BatchNormLayout l, int64_t c,
                                          int64_t m) {
  return (m / l.inner) * l.channels * l.inner + c * l.inner + m % l.inner;
}

int64_t ChunksOf(BatchNormLayout l) {
  return std::max<int64_t>(1, (l.count() + kChunk - 1) / kChunk);
}

// Scratch layout (doubles): partial sums a and b (C * chunks each, as Acc),
// then per-channel arrays in the compute type.
enum ChannelArray { kMean, kScale, kShift, kRstd, kC1, kC0, kChannelArrays };

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

// ----------------------------------------------------- partial sums ----

template <typename T>
__global__ void StatsPartialsKernel(const T* x, BatchNormLayout l,
                                    int64_t chunks, AccType<T>* pa,
                                    AccType<T>* pb) {
  using A = AccType<T>;
  __shared__ A sa[kThreadsPerBlock];
  __shared__ A sb[kThreadsPerBlock];
  const int64_t n = l.count();
  for (int64_t tile = blockIdx.x; tile < l.channels * chunks;
       tile += gridDim.x) {
    const int64_t c = tile / chunks, k = tile % chunks;
    const ComputeType<T> pivot = Load(x[Offset(l, c, 0)]);
    A a = 0, b = 0;
    const int64_t end = n < (k + 1) * kChunk ? n : (k + 1) * kChunk;
    for (int64_t m = k * kChunk + threadIdx.x; m < end; m += blockDim.x) {
      const A d = static_cast<A>(Load(x[Offset(l, c, m)]) - pivot);
      a += d;
      b += d * d;
    }
    BlockSum(sa, sb, a, b);
    if (threadIdx.x == 0) {
      pa[tile] = sa[0];
      pb[tile] = sb[0];
    }
    __syncthreads();
  }
}

template <typename Op, typename T>
__global__ void GradPartialsKernel(Op op, const T* dy, const T* x, T* dx,
                                   BatchNormLayout l, int64_t chunks,
                                   Scratch<T> sc) {
  using A = AccType<T>;
  using Cm = ComputeType<T>;
  __shared__ A sa[kThreadsPerBlock];
  __shared__ A sb[kThreadsPerBlock];
  const int64_t n = l.count();
  for (int64_t tile = blockIdx.x; tile < l.channels * chunks;
       tile += gridDim.x) {
    const int64_t c = tile / chunks, k = tile % chunks;
    const Cm mean = sc.channel(kMean)[c], s = sc.channel(kScale)[c],
             h = sc.channel(kShift)[c];
    A a = 0, b = 0;
    const int64_t end = n < (k + 1) * kChunk ? n : (k + 1) * kChunk;
    for (int64_t m = k * kChunk + threadIdx.x; m < end; m += blockDim.x) {
      const int64_t at = Offset(l, c, m);
      const Cm xv = Load(x[at]);
      const Cm d = NormalizeDz(op, Load(dy[at]), xv, s, h);
      if (dx != nullptr) dx[at] = Store<T>(s * d);
      a += static_cast<A>(d);
      b += static_cast<A>(d * (xv - mean));
    }
    BlockSum(sa, sb, a, b);
    if (threadIdx.x == 0) {
      sc.a[tile] = sa[0];
      sc.b[tile] = sb[0];
    }
    __syncthreads();
  }
}

// --------------------------------------------------- per channel -------

template <typename T>
__device__ void SetAffine(Scratch<T> sc, int64_t c, ComputeType<T> mean,
                          ComputeType<T> variance, const void* gamma,
                          const void* beta, double epsilon) {
  using Cm = ComputeType<T>;
  const ChannelAffine<Cm> a =
      AffineOf(mean, variance, ValueOr(gamma, c, Cm(1)),
               ValueOr(beta, c, Cm(0)), static_cast<Cm>(epsilon));
  sc.channel(kMean)[c] = mean;
  sc.channel(kScale)[c] = a.scale;
  sc.channel(kShift)[c] = a.shift;
  sc.channel(kRstd)[c] = a.rstd;
}

template <typename T>
__global__ void SetupKernel(const void* mean, const void* variance,
                            const void* gamma, const void* beta,
                            double epsilon, Scratch<T> sc) {
  using Cm = ComputeType<T>;
  for (int64_t c = GlobalThread(); c < sc.channels; c += GlobalThreads()) {
    SetAffine(sc, c, static_cast<const Cm*>(mean)[c],
              static_cast<const Cm*>(variance)[c], gamma, beta, epsilon);
  }
}

template <typename T>
__global__ void StatsFinishKernel(const T* x, BatchNormLayout l,
                                  int64_t chunks, const void* gamma,
                                  const void* beta, double epsilon,
                                  void* mean, void* variance, Scratch<T> sc) {
  using A = AccType<T>;
  using Cm = ComputeType<T>;
  for (int64_t c = GlobalThread(); c < l.channels; c += GlobalThreads()) {
    A a = 0, b = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      a += sc.a[c * chunks + k];
      b += sc.b[c * chunks + k];
    }
    const A pivot = l.count() == 0 ? A(0)
                                   : static_cast<A>(Load(x[Offset(l, c, 0)]));
    const ChannelMoments<A> m =
        MomentsFromSums(pivot, a, b, static_cast<A>(l.count()));
    const Cm mc = static_cast<Cm>(m.mean), vc = static_cast<Cm>(m.variance);
    static_cast<Cm*>(mean)[c] = mc;
    static_cast<Cm*>(variance)[c] = vc;
    SetAffine(sc, c, mc, vc, gamma, beta, epsilon);
  }
}

// dgamma, dbeta and, for training, the dx coefficients.
template <typename T>
__global__ void GradFinishKernel(BatchNormLayout l, int64_t chunks,
                                 bool training, const void* d_mean,
                                 const void* d_variance, void* dgamma,
                                 void* dbeta, Scratch<T> sc) {
  using A = AccType<T>;
  using Cm = ComputeType<T>;
  for (int64_t c = GlobalThread(); c < l.channels; c += GlobalThreads()) {
    A a = 0, b = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      a += sc.a[c * chunks + k];
      b += sc.b[c * chunks + k];
    }
    const Cm sum_dz = static_cast<Cm>(a), sum_dz_xc = static_cast<Cm>(b);
    const Cm r = sc.channel(kRstd)[c];
    if (dgamma != nullptr) static_cast<Cm*>(dgamma)[c] = r * sum_dz_xc;
    if (dbeta != nullptr) static_cast<Cm*>(dbeta)[c] = sum_dz;
    if (training) {
      const TrainingDxCoefficients<Cm> co = TrainingDxOf(
          sc.channel(kScale)[c], r, sum_dz, sum_dz_xc,
          ValueOr(d_mean, c, Cm(0)), ValueOr(d_variance, c, Cm(0)),
          static_cast<Cm>(l.count()));
      sc.channel(kC1)[c] = co.c1;
      sc.channel(kC0)[c] = co.c0;
    }
  }
}

// --------------------------------------------------- element passes ----

template <typename Op, typename T>
__global__ void ForwardKernel(Op op, const T* x, T* y, BatchNormLayout l,
                              int64_t total, Scratch<T> sc) {
  for (int64_t i = GlobalThread(); i < total; i += GlobalThreads()) {
    const int64_t c = (i / l.inner) % l.channels;
    y[i] = Store<T>(NormalizeForward(op, Load(x[i]), sc.channel(kScale)[c],
                                     sc.channel(kShift)[c]));
  }
}

template <typename Op, typename T>
__global__ void TrainingDxKernel(Op op, const T* dy, const T* x, T* dx,
                                 BatchNormLayout l, int64_t total,
                                 Scratch<T> sc) {
  using Cm = ComputeType<T>;
  for (int64_t i = GlobalThread(); i < total; i += GlobalThreads()) {
    const int64_t c = (i / l.inner) % l.channels;
    const ChannelAffine<Cm> a{sc.channel(kScale)[c], sc.channel(kShift)[c],
                              Cm(0)};
    const TrainingDxCoefficients<Cm> co{sc.channel(kC1)[c],
                                        sc.channel(kC0)[c]};
    dx[i] = Store<T>(TrainingDx(op, Load(dy[i]), Load(x[i]),
                                sc.channel(kMean)[c], a, co));
  }
}

int64_t Total(BatchNormLayout l) { return l.outer * l.channels * l.inner; }

}  // namespace

int64_t BatchNormGpuScratchDoubles(BatchNormLayout layout) {
  return 2 * layout.channels * ChunksOf(layout) +
         kChannelArrays * layout.channels;
}

const char* LaunchBatchNormTraining(const BatchNormActivation& act,
                                    Dtype dtype, const void* x_raw,
                                    const void* gamma, const void* beta,
                                    double epsilon, void* y_raw, void* mean,
                                    void* variance, BatchNormLayout l,
                                    double* scratch, void* stream_raw) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_raw);
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* x = static_cast<const T*>(x_raw);
    const Scratch<T> sc = ScratchOf<T>(scratch, l);
    const int64_t chunks = ChunksOf(l);
    if (l.channels == 0) return LastError();
    if (l.count() > 0) {
      TF_OPS_LAUNCH(BlocksFor(l.channels * chunks, 1), kThreadsPerBlock, 0,
                    stream, StatsPartialsKernel<T>)(x, l, chunks, sc.a, sc.b);
    } else {
      cudaMemsetAsync(scratch, 0, 2 * l.channels * chunks * sizeof(double),
                      stream);
    }
    TF_OPS_LAUNCH(BlocksFor(l.channels), kThreadsPerBlock, 0, stream,
                  StatsFinishKernel<T>)(x, l, chunks, gamma, beta, epsilon,
                                        mean, variance, sc);
    if (Total(l) == 0) return LastError();
    VisitActivation(act, [&](const auto& op) {
      TF_OPS_LAUNCH(BlocksFor(Total(l)), kThreadsPerBlock, 0, stream,
                    ForwardKernel<std::decay_t<decltype(op)>, T>)(
          op, x, static_cast<T*>(y_raw), l, Total(l), sc);
    });
    return LastError();
  });
}

const char* LaunchBatchNormTrainingGrad(
    const BatchNormActivation& act, Dtype dtype, const void* dy_raw,
    const void* x_raw, const void* gamma, const void* beta, const void* mean,
    const void* variance, const void* d_mean, const void* d_variance,
    double epsilon, void* dx_raw, void* dgamma, void* dbeta,
    BatchNormLayout l, double* scratch, void* stream_raw) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_raw);
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* x = static_cast<const T*>(x_raw);
    const T* dy = static_cast<const T*>(dy_raw);
    const Scratch<T> sc = ScratchOf<T>(scratch, l);
    const int64_t chunks = ChunksOf(l);
    if (l.channels == 0) return LastError();
    cudaMemsetAsync(scratch, 0, 2 * l.channels * chunks * sizeof(double),
                    stream);
    TF_OPS_LAUNCH(BlocksFor(l.channels), kThreadsPerBlock, 0, stream,
                  SetupKernel<T>)(mean, variance, gamma, beta, epsilon, sc);
    VisitActivation(act, [&](const auto& op) {
      using Op = std::decay_t<decltype(op)>;
      if (l.count() > 0) {
        TF_OPS_LAUNCH(BlocksFor(l.channels * chunks, 1), kThreadsPerBlock, 0,
                      stream, GradPartialsKernel<Op, T>)(
            op, dy, x, static_cast<T*>(nullptr), l, chunks, sc);
      }
      TF_OPS_LAUNCH(BlocksFor(l.channels), kThreadsPerBlock, 0, stream,
                    GradFinishKernel<T>)(l, chunks, true, d_mean, d_variance,
                                         dgamma, dbeta, sc);
      if (Total(l) > 0) {
        TF_OPS_LAUNCH(BlocksFor(Total(l)), kThreadsPerBlock, 0, stream,
                      TrainingDxKernel<Op, T>)(
            op, dy, x, static_cast<T*>(dx_raw), l, Total(l), sc);
      }
    });
    return LastError();
  });
}

const char* LaunchBatchNormInference(const BatchNormActivation& act,
                                     Dtype dtype, const void* x_raw,
                                     const void* gamma, const void* beta,
                                     const void* mean, const void* variance,
                                     double epsilon, void* y_raw,
                                     BatchNormLayout l, double* scratch,
                                     void* stream_raw) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_raw);
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    const Scratch<T> sc = ScratchOf<T>(scratch, l);
    if (l.channels == 0) return LastError();
    TF_OPS_LAUNCH(BlocksFor(l.channels), kThreadsPerBlock, 0, stream,
                  SetupKernel<T>)(mean, variance, gamma, beta, epsilon, sc);
    if (Total(l) == 0) return LastError();
    VisitActivation(act, [&](const auto& op) {
      TF_OPS_LAUNCH(BlocksFor(Total(l)), kThreadsPerBlock, 0, stream,
                    ForwardKernel<std::decay_t<decltype(op)>, T>)(
          op, static_cast<const T*>(x_raw), static_cast<T*>(y_raw), l,
          Total(l), sc);
    });
    return LastError();
  });
}

const char* LaunchBatchNormInferenceGrad(
    const BatchNormActivation& act, Dtype dtype, const void* dy_raw,
    const void* x_raw, const void* gamma, const void* beta, const void* mean,
    const void* variance, double epsilon, void* dx_raw, void* dgamma,
    void* dbeta, BatchNormLayout l, double* scratch, void* stream_raw) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_raw);
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    const Scratch<T> sc = ScratchOf<T>(scratch, l);
    const int64_t chunks = ChunksOf(l);
    if (l.channels == 0) return LastError();
    cudaMemsetAsync(scratch, 0, 2 * l.channels * chunks * sizeof(double),
                    stream);
    TF_OPS_LAUNCH(BlocksFor(l.channels), kThreadsPerBlock, 0, stream,
                  SetupKernel<T>)(mean, variance, gamma, beta, epsilon, sc);
    VisitActivation(act, [&](const auto& op) {
      using Op = std::decay_t<decltype(op)>;
      if (l.count() > 0) {
        TF_OPS_LAUNCH(BlocksFor(l.channels * chunks, 1), kThreadsPerBlock, 0,
                      stream, GradPartialsKernel<Op, T>)(
            op, static_cast<const T*>(dy_raw), static_cast<const T*>(x_raw),
            static_cast<T*>(dx_raw), l, chunks, sc);
      }
      TF_OPS_LAUNCH(BlocksFor(l.channels), kThreadsPerBlock, 0, stream,
                    GradFinishKernel<T>)(l, chunks, false, nullptr, nullptr,
                                         dgamma, dbeta, sc);
    });
    return LastError();
  });
}

}  // namespace tf_ops
