// The group-norm ops' CUDA kernels (group_norm_gpu.h), from group_norm_math.h
// and the activation functors (DerivativeAtFeatures: activation_derivative.h).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tf_ops/cc/activation/activation_derivative.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/group_norm/group_norm_math.h"
#include "tf_ops/cu/core/launch_common.cuh"
#include "tf_ops/cu/group_norm/group_norm_gpu.h"

namespace tf_ops {
namespace group_norm {
namespace {

using gpu::BlocksFor;
using gpu::DispatchDtype;
using gpu::GlobalThread;
using gpu::GlobalThreads;
using gpu::kThreadsPerBlock;
using gpu::LastError;
using gpu::Load;
using gpu::Store;

struct Units {
  GroupNormShape s;
  int64_t row_tiles;
  __host__ __device__ bool channels_last() const { return s.i == 1; }
  __host__ __device__ int64_t count() const {
    return s.n * (channels_last() ? row_tiles : s.c);
  }
  __host__ __device__ int64_t partials() const {
    return s.n * row_tiles * 2 * s.c;
  }
};

Units UnitsOf(const GroupNormShape& s) {
  Units u{s, 1};
  if (s.i == 1) u.row_tiles = std::max<int64_t>(1, (s.b + kGpuRowBlock - 1) / kGpuRowBlock);
  return u;
}

// The values a thread needs to compute element j of channel ch of sample n.
template <typename T>
struct Params {
  const T* x;
  const T* dy;
  const ComputeType<T>* gamma;
  const ComputeType<T>* beta;
  const ComputeType<T>* mean;
  const ComputeType<T>* rstd;
};

// Per channel of a sample: z = x * a + b, xhat = x * r + q.
template <typename C>
struct Affine {
  C a, b, r, q;
};
template <typename T>
__device__ Affine<ComputeType<T>> AffineOf(const Params<T>& p,
                                           const GroupNormShape& s, int64_t n,
                                           int64_t ch) {
  using C = ComputeType<T>;
  const int64_t at = n * s.groups + ch / s.per_group();
  const C m = p.mean[at], r = p.rstd[at];
  const C a = p.gamma[ch] * r;
  return {a, p.beta[ch] - m * a, r, -m * r};
}

// The two summands of element j (channel ch, sample n): forward x - k and
// (x - k)^2 (k the group's shift); backward dz and dz * xhat.
template <typename T, typename Op, bool kGrad>
struct Terms {
  Op op;
  Params<T> p;
  GroupNormShape s;
  __device__ void At(int64_t j, int64_t n, int64_t ch, double* ta,
                     double* tb) const {
    using C = ComputeType<T>;
    if (!kGrad) {
      const C k = Load(p.x[n * s.b * s.c * s.i + (ch / s.per_group()) *
                                                    s.per_group() * s.i]);
      const C d = Load(p.x[j]) - k;
      *ta = static_cast<double>(d);
      *tb = static_cast<double>(d * d);
    } else {
      const Affine<C> f = AffineOf(p, s, n, ch);
      const C xv = Load(p.x[j]);
      const C dz = Load(p.dy[j]) * DerivativeAtFeatures(op, xv * f.a + f.b);
      *ta = static_cast<double>(dz);
      *tb = static_cast<double>(dz * (xv * f.r + f.q));
    }
  }
};

template <typename K>
__global__ void SumsKernel(K k, Units u, double* partials) {
  __shared__ double sa[kThreadsPerBlock], sb[kThreadsPerBlock];
  const GroupNormShape& s = u.s;
  for (int64_t unit = blockIdx.x; unit < u.count(); unit += gridDim.x) {
    if (u.channels_last()) {
      const int64_t n = unit / u.row_tiles, tile = unit % u.row_tiles;
      const int64_t r0 = tile * kGpuRowBlock;
      const int64_t r1 = r0 + kGpuRowBlock < s.b ? r0 + kGpuRowBlock : s.b;
      double* pa = partials + (n * u.row_tiles + tile) * 2 * s.c;
      for (int64_t ch = threadIdx.x; ch < s.c; ch += blockDim.x) {
        double a = 0.0, b = 0.0;
        for (int64_t row = r0; row < r1; ++row) {
          double ta, tb;
          k.At((n * s.b + row) * s.c + ch, n, ch, &ta, &tb);
          a += ta;
          b += tb;
        }
        pa[ch] = a;
        pa[s.c + ch] = b;
      }
      continue;
    }
    const int64_t n = unit / s.c, ch = unit % s.c;
    double a = 0.0, b = 0.0;
    for (int64_t e = threadIdx.x; e < s.b * s.i; e += blockDim.x) {
      const int64_t bb = e / s.i, ii = e % s.i;
      double ta, tb;
      k.At(((n * s.b + bb) * s.c + ch) * s.i + ii, n, ch, &ta, &tb);
      a += ta;
      b += tb;
    }
    sa[threadIdx.x] = a;
    sb[threadIdx.x] = b;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) {
        sa[threadIdx.x] += sa[threadIdx.x + half];
        sb[threadIdx.x] += sb[threadIdx.x + half];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      double* pa = partials + n * 2 * s.c;
      pa[ch] = sa[0];
      pa[s.c + ch] = sb[0];
    }
    __syncthreads();
  }
}

// A thread per (sample, group): the group's sums over its tiles and channels.
template <typename T>
__global__ void StatsKernel(Units u, const T* x, const double* partials,
                            double epsilon, ComputeType<T>* mean,
                            ComputeType<T>* rstd) {
  using C = ComputeType<T>;
  const GroupNormShape& s = u.s;
  const int64_t per = s.per_group();
  for (int64_t at = GlobalThread(); at < s.n * s.groups; at += GlobalThreads()) {
    const int64_t n = at / s.groups, g = at % s.groups;
    double s1 = 0.0, s2 = 0.0;
    for (int64_t tile = 0; tile < u.row_tiles; ++tile) {
      const double* p = partials + (n * u.row_tiles + tile) * 2 * s.c;
      for (int64_t ch = g * per; ch < (g + 1) * per; ++ch) {
        s1 += p[ch];
        s2 += p[s.c + ch];
      }
    }
    const double k = static_cast<double>(
        Load(x[n * s.b * s.c * s.i + g * per * s.i]));
    const GroupStats st =
        StatsOf(k, s1, s2, static_cast<double>(s.group_size()), epsilon);
    mean[at] = static_cast<C>(st.mean);
    rstd[at] = static_cast<C>(st.rstd);
  }
}

// A thread per (sample, group): the dx coefficients.
template <typename T>
__global__ void GradCoefficientsKernel(Units u, Params<T> p,
                                       const double* partials, double* coefs) {
  const GroupNormShape& s = u.s;
  const int64_t per = s.per_group();
  for (int64_t at = GlobalThread(); at < s.n * s.groups; at += GlobalThreads()) {
    const int64_t n = at / s.groups, g = at % s.groups;
    double a = 0.0, b = 0.0;
    for (int64_t ch = g * per; ch < (g + 1) * per; ++ch) {
      double pc = 0.0, qc = 0.0;
      for (int64_t tile = 0; tile < u.row_tiles; ++tile) {
        const double* t = partials + (n * u.row_tiles + tile) * 2 * s.c;
        pc += t[ch];
        qc += t[s.c + ch];
      }
      a += static_cast<double>(p.gamma[ch]) * pc;
      b += static_cast<double>(p.gamma[ch]) * qc;
    }
    const GradCoefficients k = GradCoefficientsOf(
        static_cast<double>(p.mean[at]), static_cast<double>(p.rstd[at]), a, b,
        static_cast<double>(s.group_size()));
    coefs[2 * at] = k.k2;
    coefs[2 * at + 1] = k.k3;
  }
}

// A thread per channel: dgamma and dbeta over samples and tiles, in order.
template <typename T>
__global__ void ParamGradKernel(Units u, const double* partials,
                                ComputeType<T>* dgamma, ComputeType<T>* dbeta) {
  using C = ComputeType<T>;
  const GroupNormShape& s = u.s;
  for (int64_t ch = GlobalThread(); ch < s.c; ch += GlobalThreads()) {
    double dg = 0.0, db = 0.0;
    for (int64_t n = 0; n < s.n; ++n) {
      double pc = 0.0, qc = 0.0;
      for (int64_t tile = 0; tile < u.row_tiles; ++tile) {
        const double* t = partials + (n * u.row_tiles + tile) * 2 * s.c;
        pc += t[ch];
        qc += t[s.c + ch];
      }
      db += pc;
      dg += qc;
    }
    dgamma[ch] = static_cast<C>(dg);
    dbeta[ch] = static_cast<C>(db);
  }
}

// Element-wise: y = f(x * a + b), or dx = dz * a + x * k2 + k3.
template <typename T, typename Op, bool kGrad>
__global__ void ElementKernel(Op op, Params<T> p, GroupNormShape s,
                              const double* coefs, T* out) {
  using C = ComputeType<T>;
  const int64_t total = s.elements();
  for (int64_t j = GlobalThread(); j < total; j += GlobalThreads()) {
    const int64_t ch = (j / s.i) % s.c, n = j / (s.b * s.c * s.i);
    const Affine<C> f = AffineOf(p, s, n, ch);
    const C xv = Load(p.x[j]);
    if (!kGrad) {
      out[j] = Store<T>(op.Forward(xv * f.a + f.b));
    } else {
      const C dz = Load(p.dy[j]) * DerivativeAtFeatures(op, xv * f.a + f.b);
      const double* k = coefs + 2 * (n * s.groups + ch / s.per_group());
      out[j] = Store<T>(dz * f.a + xv * static_cast<C>(k[0]) +
                        static_cast<C>(k[1]));
    }
  }
}

}  // namespace

int64_t GroupNormGpuScratchBytes(const GroupNormShape& shape) {
  return (UnitsOf(shape).partials() + 2 * shape.n * shape.groups) * 8;
}

const char* LaunchGroupNormForward(const ActivationChoice& act, Dtype dtype,
                                   const GroupNormShape& shape, double epsilon,
                                   const void* x, const void* gamma,
                                   const void* beta, void* y, void* mean,
                                   void* rstd, void* scratch, void* stream_raw) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_raw);
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    using C = ComputeType<T>;
    const Units u = UnitsOf(shape);
    if (shape.elements() == 0) return LastError();
    double* partials = static_cast<double*>(scratch);
    const Params<T> p{static_cast<const T*>(x), nullptr,
                      static_cast<const C*>(gamma), static_cast<const C*>(beta),
                      static_cast<const C*>(mean), static_cast<const C*>(rstd)};
    const int blocks = static_cast<int>(std::min<int64_t>(u.count(), gpu::kMaxBlocks));
    TF_OPS_LAUNCH(blocks, kThreadsPerBlock, 0, stream,
                  SumsKernel<Terms<T, Identity, false>>)(
        Terms<T, Identity, false>{Identity(), p, shape}, u, partials);
    TF_OPS_LAUNCH(BlocksFor(shape.n * shape.groups), kThreadsPerBlock, 0, stream,
                  StatsKernel<T>)(u, p.x, partials, epsilon, static_cast<C*>(mean),
                                  static_cast<C*>(rstd));
    VisitActivation(act, [&](const auto& op) {
      using Op = std::decay_t<decltype(op)>;
      TF_OPS_LAUNCH(BlocksFor(shape.elements()), kThreadsPerBlock, 0, stream,
                    ElementKernel<T, Op, false>)(op, p, shape, nullptr,
                                                 static_cast<T*>(y));
    });
    return LastError();
  });
}

const char* LaunchGroupNormGrad(const ActivationChoice& act, Dtype dtype,
                                const GroupNormShape& shape, const void* dy,
                                const void* x, const void* gamma,
                                const void* beta, const void* mean,
                                const void* rstd, void* dx, void* dgamma,
                                void* dbeta, void* scratch, void* stream_raw) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_raw);
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    using C = ComputeType<T>;
    const Units u = UnitsOf(shape);
    if (shape.elements() == 0) {
      cudaMemsetAsync(dgamma, 0, shape.c * sizeof(C), stream);
      cudaMemsetAsync(dbeta, 0, shape.c * sizeof(C), stream);
      return LastError();
    }
    double* partials = static_cast<double*>(scratch);
    double* coefs = partials + u.partials();
    const Params<T> p{static_cast<const T*>(x), static_cast<const T*>(dy),
                      static_cast<const C*>(gamma), static_cast<const C*>(beta),
                      static_cast<const C*>(mean), static_cast<const C*>(rstd)};
    const int blocks = static_cast<int>(std::min<int64_t>(u.count(), gpu::kMaxBlocks));
    VisitActivation(act, [&](const auto& op) {
      using Op = std::decay_t<decltype(op)>;
      TF_OPS_LAUNCH(blocks, kThreadsPerBlock, 0, stream,
                    SumsKernel<Terms<T, Op, true>>)(
          Terms<T, Op, true>{op, p, shape}, u, partials);
      TF_OPS_LAUNCH(BlocksFor(shape.n * shape.groups), kThreadsPerBlock, 0,
                    stream, GradCoefficientsKernel<T>)(u, p, partials, coefs);
      TF_OPS_LAUNCH(BlocksFor(shape.c), kThreadsPerBlock, 0, stream,
                    ParamGradKernel<T>)(u, partials, static_cast<C*>(dgamma),
                                        static_cast<C*>(dbeta));
      TF_OPS_LAUNCH(BlocksFor(shape.elements()), kThreadsPerBlock, 0, stream,
                    ElementKernel<T, Op, true>)(op, p, shape, coefs,
                                                static_cast<T*>(dx));
    });
    return LastError();
  });
}

}  // namespace group_norm
}  // namespace tf_ops
