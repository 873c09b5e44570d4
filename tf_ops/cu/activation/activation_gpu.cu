// The CUDA engine: grid-stride kernels that run an activation functor
// (activation_math.h) over a flat buffer, and their launchers.
//
// No TensorFlow or Eigen headers: this file compiles in seconds, and the GPU
// self-test (tests/gpu/gpu_selftest.cu) links the very same object code.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/activation/activation_math.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cu/activation/activation_gpu.h"
#include "tf_ops/cu/core/launch_common.cuh"

namespace tf_ops {
namespace {

using gpu::BlocksFor;
using gpu::DispatchDtype;
using gpu::GlobalThread;
using gpu::GlobalThreads;
using gpu::kThreadsPerBlock;
using gpu::LastError;

// Each thread moves 16 bytes per load and store (4 floats, 8 halves, 2
// doubles): fewer, wider memory transactions are what reach the copy
// bandwidth. The launcher uses this path when every buffer is 16-byte
// aligned (TF's GPU allocations are); the last n % Pack<T>::kSize elements,
// and unaligned buffers, take the one-element loop.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

template <typename Op, typename T>
__device__ __forceinline__ T ForwardOne(const Op& op, T x) {
  return static_cast<T>(ForwardOf(op, static_cast<ComputeType<T>>(x)));
}
template <typename Op, typename T>
__device__ __forceinline__ T BackwardOne(const Op& op, T g, T v) {
  using C = ComputeType<T>;
  return static_cast<T>(GradOf(op, static_cast<C>(g), static_cast<C>(v)));
}
// Both outputs of the grad-grad op for one element, each rounded once.
template <typename Op, typename T>
__device__ __forceinline__ void GradGradOne(const Op& op, T u, T g, T v,
                                            T* d_g, T* d_v) {
  using C = ComputeType<T>;
  const GradGradValues<C> r = GradGradOf(op, static_cast<C>(u),
                                         static_cast<C>(g), static_cast<C>(v));
  *d_g = static_cast<T>(r.d_gradients);
  *d_v = static_cast<T>(r.d_v);
}

// y[i] = f(x[i]) for i in [0, n): whole packs first when kPacked, then the
// remaining elements one by one.
template <typename Op, typename T, bool kPacked>
__global__ void ForwardKernel(Op op, const T* x, T* y, int64_t n) {
  int64_t done = 0;
  if (kPacked) {
    constexpr int kSize = Pack<T>::kSize;
    const int64_t packs = n / kSize;
    const Pack<T>* xp = reinterpret_cast<const Pack<T>*>(x);
    Pack<T>* yp = reinterpret_cast<Pack<T>*>(y);
    for (int64_t i = GlobalThread(); i < packs; i += GlobalThreads()) {
      Pack<T> p = xp[i];
#pragma unroll
      for (int k = 0; k < kSize; ++k) p.v[k] = ForwardOne(op, p.v[k]);
      yp[i] = p;
    }
    done = packs * kSize;
  }
  for (int64_t i = done + GlobalThread(); i < n; i += GlobalThreads()) {
    y[i] = ForwardOne(op, x[i]);
  }
}

template <typename Op, typename T, bool kPacked>
__global__ void BackwardKernel(Op op, const T* g, const T* v, T* dx,
                               int64_t n) {
  int64_t done = 0;
  if (kPacked) {
    constexpr int kSize = Pack<T>::kSize;
    const int64_t packs = n / kSize;
    const Pack<T>* gp = reinterpret_cast<const Pack<T>*>(g);
    const Pack<T>* vp = reinterpret_cast<const Pack<T>*>(v);
    Pack<T>* dxp = reinterpret_cast<Pack<T>*>(dx);
    for (int64_t i = GlobalThread(); i < packs; i += GlobalThreads()) {
      Pack<T> pg = gp[i];
      const Pack<T> pv = vp[i];
#pragma unroll
      for (int k = 0; k < kSize; ++k) pg.v[k] = BackwardOne(op, pg.v[k], pv.v[k]);
      dxp[i] = pg;
    }
    done = packs * kSize;
  }
  for (int64_t i = done + GlobalThread(); i < n; i += GlobalThreads()) {
    dx[i] = BackwardOne(op, g[i], v[i]);
  }
}

// The grad-grad op: kWhich selects the outputs (kBoth, kDgOnly, kDvOnly), so
// that an output nobody needs is not written.
enum Outputs { kBoth, kDgOnly, kDvOnly };

template <typename Op, typename T, bool kPacked, Outputs kWhich>
__global__ void GradGradKernel(Op op, const T* u, const T* g, const T* v,
                               T* d_g, T* d_v, int64_t n) {
  int64_t done = 0;
  if (kPacked) {
    constexpr int kSize = Pack<T>::kSize;
    const int64_t packs = n / kSize;
    const Pack<T>* up = reinterpret_cast<const Pack<T>*>(u);
    const Pack<T>* gp = reinterpret_cast<const Pack<T>*>(g);
    const Pack<T>* vp = reinterpret_cast<const Pack<T>*>(v);
    for (int64_t i = GlobalThread(); i < packs; i += GlobalThreads()) {
      // All loads before any store: the outputs may alias the inputs.
      Pack<T> pu = up[i];
      Pack<T> pg = kWhich == kDgOnly ? pu : gp[i];
      const Pack<T> pv = vp[i];
#pragma unroll
      for (int k = 0; k < kSize; ++k) {
        GradGradOne(op, pu.v[k], pg.v[k], pv.v[k], &pu.v[k], &pg.v[k]);
      }
      if (kWhich != kDvOnly) reinterpret_cast<Pack<T>*>(d_g)[i] = pu;
      if (kWhich != kDgOnly) reinterpret_cast<Pack<T>*>(d_v)[i] = pg;
    }
    done = packs * kSize;
  }
  for (int64_t i = done + GlobalThread(); i < n; i += GlobalThreads()) {
    T a, b;
    GradGradOne(op, u[i], kWhich == kDgOnly ? u[i] : g[i], v[i], &a, &b);
    if (kWhich != kDvOnly) d_g[i] = a;
    if (kWhich != kDgOnly) d_v[i] = b;
  }
}

bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

template <typename Op>
const char* LaunchForward(const Op& op, Dtype dtype, const void* x,
                          void* y, int64_t n, void* stream) {
  if (n <= 0) return nullptr;
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    if (Aligned16(x) && Aligned16(y)) {
      TF_OPS_LAUNCH(BlocksFor(n / Pack<T>::kSize), kThreadsPerBlock, 0, s,
                    ForwardKernel<Op, T, true>)(
              op, xt, yt, n);
    } else {
      TF_OPS_LAUNCH(BlocksFor(n), kThreadsPerBlock, 0, s,
                    ForwardKernel<Op, T, false>)(op, xt, yt, n);
    }
    return LastError();
  });
}

template <typename Op>
const char* LaunchBackward(const Op& op, Dtype dtype, const void* g,
                           const void* v, void* dx, int64_t n, void* stream) {
  if (n <= 0) return nullptr;
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    const T* gt = static_cast<const T*>(g);
    const T* vt = static_cast<const T*>(v);
    T* dxt = static_cast<T*>(dx);
    if (Aligned16(g) && Aligned16(v) && Aligned16(dx)) {
      TF_OPS_LAUNCH(BlocksFor(n / Pack<T>::kSize), kThreadsPerBlock, 0, s,
                    BackwardKernel<Op, T, true>)(
              op, gt, vt, dxt, n);
    } else {
      TF_OPS_LAUNCH(BlocksFor(n), kThreadsPerBlock, 0, s,
                    BackwardKernel<Op, T, false>)(op, gt, vt, dxt, n);
    }
    return LastError();
  });
}

template <typename Op>
const char* LaunchGradGrad(const Op& op, Dtype dtype, const void* u,
                           const void* g, const void* v, void* d_g, void* d_v,
                           int64_t n, void* stream) {
  if (n <= 0 || (d_g == nullptr && d_v == nullptr)) return nullptr;
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    const T* ut = static_cast<const T*>(u);
    const T* gt = static_cast<const T*>(g);
    const T* vt = static_cast<const T*>(v);
    T* d_gt = static_cast<T*>(d_g);
    T* d_vt = static_cast<T*>(d_v);
    const bool packed = Aligned16(u) && Aligned16(g) && Aligned16(v) &&
                        Aligned16(d_g) && Aligned16(d_v);  // null is aligned
    auto launch = [&](auto which) {
      constexpr Outputs kWhich = decltype(which)::value;
      if (packed) {
        TF_OPS_LAUNCH(BlocksFor(n / Pack<T>::kSize), kThreadsPerBlock, 0, s,
                      GradGradKernel<Op, T, true, kWhich>)(
                op, ut, gt, vt, d_gt, d_vt, n);
      } else {
        TF_OPS_LAUNCH(BlocksFor(n), kThreadsPerBlock, 0, s,
                      GradGradKernel<Op, T, false, kWhich>)(
                op, ut, gt, vt, d_gt, d_vt, n);
      }
    };
    if (d_v == nullptr) {
      launch(std::integral_constant<Outputs, kDgOnly>());
    } else if (d_g == nullptr) {
      launch(std::integral_constant<Outputs, kDvOnly>());
    } else {
      launch(std::integral_constant<Outputs, kBoth>());
    }
    return LastError();
  });
}

#define TF_OPS_INSTANTIATE_GPU(Name)                                       \
  template const char* LaunchForward<Name>(const Name&, Dtype,          \
                                           const void*, void*, int64_t,    \
                                           void*);                         \
  template const char* LaunchBackward<Name>(const Name&, Dtype,         \
                                            const void*, const void*,      \
                                            void*, int64_t, void*);        \
  template const char* LaunchGradGrad<Name>(                               \
      const Name&, Dtype, const void*, const void*, const void*, void*,    \
      void*, int64_t, void*);
TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_INSTANTIATE_GPU)
#undef TF_OPS_INSTANTIATE_GPU

}  // namespace tf_ops
