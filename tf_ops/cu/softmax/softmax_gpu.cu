// The softmax family's CUDA kernels (softmax_gpu.h). A row belongs to one
// group of threads: a warp (rows of <= kWarpRowCols columns, 8 rows per
// block) or a block of 256 threads. Thread t of the group reads columns t,
// t + size, ...; partial max and sums meet in a butterfly of warp shuffles
// and, for a block, a fixed pass over the warps' results in shared memory.
// The math is softmax_math.h's, as on the CPU.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/softmax/softmax_math.h"
#include "tf_ops/cu/core/launch_common.cuh"
#include "tf_ops/cu/softmax/softmax_gpu.h"

namespace tf_ops {
namespace {

using gpu::DispatchDtype;
using gpu::LastError;
using softmax::NegInf;

constexpr int kBlockThreads = 256;
constexpr int kWarps = kBlockThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;

template <typename T>
__device__ __forceinline__ ComputeType<T> Load(T v) {
  return static_cast<ComputeType<T>>(v);
}
template <typename T>
__device__ __forceinline__ T Store(ComputeType<T> v) {
  return static_cast<T>(v);
}

// The group of threads that owns a row: a warp or the whole block.
template <bool kWarp>
struct Group {
  __device__ static int Lane() {
    return kWarp ? static_cast<int>(threadIdx.x % 32) : threadIdx.x;
  }
  __device__ static int Size() { return kWarp ? 32 : blockDim.x; }
  // First row and stride over rows of this group.
  __device__ static int64_t FirstRow() {
    return kWarp ? static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32
                 : blockIdx.x;
  }
  __device__ static int64_t RowStride() {
    return kWarp ? static_cast<int64_t>(gridDim.x) * kWarps : gridDim.x;
  }
};

struct MaxOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    return b > a ? b : a;
  }
};
struct SumOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    return a + b;
  }
};

// v reduced over the group, the same value in every thread. `shared` holds
// kWarps values (block groups only); it is free again on return.
template <bool kWarp, typename C, typename Op>
__device__ C Reduce(C v, C* shared, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) {
    v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  if (kWarp) return v;
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) shared[warp] = v;
  __syncthreads();
  C r = shared[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
    r = op(r, shared[w]);
  }
  __syncthreads();
  return r;
}

template <bool kWarp, typename T>
__global__ void SoftmaxKernel(const T* x, T* y, int64_t rows, int64_t cols,
                              bool log) {
  using C = ComputeType<T>;
  __shared__ C shared[kWarps];
  using G = Group<kWarp>;
  for (int64_t r = G::FirstRow(); r < rows; r += G::RowStride()) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    C m = NegInf<C>();
    for (int64_t j = G::Lane(); j < cols; j += G::Size()) {
      const C v = Load(xr[j]);
      m = v > m ? v : m;
    }
    m = Reduce<kWarp>(m, shared, MaxOp());
    C s = C(0);
    for (int64_t j = G::Lane(); j < cols; j += G::Size()) {
      s += Exp(Load(xr[j]) - m);
    }
    s = Reduce<kWarp>(s, shared, SumOp());
    const C lse = m + softmax::Log(s);
    const C inv = C(1) / s;
    for (int64_t j = G::Lane(); j < cols; j += G::Size()) {
      const C v = Load(xr[j]);
      yr[j] = Store<T>(log ? v - lse : softmax::Probability(v, m, inv));
    }
  }
}

template <bool kWarp, typename T>
__global__ void SoftmaxGradKernel(const T* g, const T* y, T* dx, int64_t rows,
                                  int64_t cols, bool log, float scale) {
  using C = ComputeType<T>;
  __shared__ C shared[kWarps];
  using G = Group<kWarp>;
  for (int64_t r = G::FirstRow(); r < rows; r += G::RowStride()) {
    const T* gr = g + r * cols;
    const T* yr = y + r * cols;
    T* dr = dx + r * cols;
    C acc = C(0);
    for (int64_t j = G::Lane(); j < cols; j += G::Size()) {
      acc += log ? Load(gr[j]) : Load(gr[j]) * Load(yr[j]);
    }
    acc = Reduce<kWarp>(acc, shared, SumOp());
    for (int64_t j = G::Lane(); j < cols; j += G::Size()) {
      const C gj = Load(gr[j]), yj = Load(yr[j]);
      dr[j] = Store<T>(log ? softmax::LogSoftmaxGrad(gj, yj, acc)
                           : softmax::SoftmaxGrad(gj, yj, acc, C(scale)));
    }
  }
}

template <bool kWarp, typename T>
__global__ void MaskedSoftmaxKernel(const T* x, MaskLayout mask, float scale,
                                    T* y, int64_t rows, int64_t cols) {
  using C = ComputeType<T>;
  __shared__ C shared[kWarps];
  using G = Group<kWarp>;
  const C sc = C(scale);
  for (int64_t r = G::FirstRow(); r < rows; r += G::RowStride()) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const bool* mr =
        mask.mask == nullptr ? nullptr : mask.mask + MaskRowOffset(mask, r);
    const int64_t last = mask.causal ? CausalQuery(mask, r) : cols - 1;
    C m = NegInf<C>();
    C any_masked = C(0);
    for (int64_t j = G::Lane(); j < cols; j += G::Size()) {
      const bool kept = j <= last && (mr == nullptr || mr[j * mask.col_stride]);
      const C v = kept ? sc * Load(xr[j]) : NegInf<C>();
      m = v > m ? v : m;
      any_masked = kept ? any_masked : C(1);
    }
    m = Reduce<kWarp>(m, shared, MaxOp());
    any_masked = Reduce<kWarp>(any_masked, shared, MaxOp());
    const bool zeros = m == NegInf<C>() && any_masked > C(0);
    C s = C(0);
    for (int64_t j = G::Lane(); j < cols; j += G::Size()) {
      const bool kept = j <= last && (mr == nullptr || mr[j * mask.col_stride]);
      s += kept ? Exp(sc * Load(xr[j]) - m) : C(0);
    }
    s = Reduce<kWarp>(s, shared, SumOp());
    const C inv = C(1) / s;
    for (int64_t j = G::Lane(); j < cols; j += G::Size()) {
      const bool kept = j <= last && (mr == nullptr || mr[j * mask.col_stride]);
      const C p = softmax::Probability(sc * Load(xr[j]), m, inv);
      yr[j] = Store<T>(kept && !zeros ? p : C(0));
    }
  }
}

template <bool kWarp, typename T, typename L>
__global__ void CrossEntropyKernel(const T* x, const L* labels, T* loss,
                                   T* dx, int64_t rows, int64_t cols,
                                   softmax::CrossEntropyParams p) {
  using C = ComputeType<T>;
  __shared__ C shared[kWarps];
  using G = Group<kWarp>;
  const C eps = p.label_smoothing, z = p.z_loss, classes = C(cols);
  for (int64_t r = G::FirstRow(); r < rows; r += G::RowStride()) {
    const T* xr = x + r * cols;
    T* dr = dx + r * cols;
    const int64_t t = labels[r];
    if (t == p.ignore_index || t < 0 || t >= cols) {
      const C fill = t == p.ignore_index ? C(0) : C(NAN);
      if (G::Lane() == 0) loss[r] = Store<T>(fill);
      for (int64_t j = G::Lane(); j < cols; j += G::Size()) {
        dr[j] = Store<T>(fill);
      }
      continue;  // the whole group takes this branch: no barrier skipped
    }
    // Read before the barriers below: dlogits may be the logits' buffer.
    const C x_label = Load(xr[t]);
    C m = NegInf<C>(), x_sum = C(0);
    for (int64_t j = G::Lane(); j < cols; j += G::Size()) {
      const C v = Load(xr[j]);
      m = v > m ? v : m;
      x_sum += v;
    }
    m = Reduce<kWarp>(m, shared, MaxOp());
    x_sum = Reduce<kWarp>(x_sum, shared, SumOp());
    C s = C(0);
    for (int64_t j = G::Lane(); j < cols; j += G::Size()) {
      s += Exp(Load(xr[j]) - m);
    }
    s = Reduce<kWarp>(s, shared, SumOp());
    const C lse = m + softmax::Log(s);
    if (G::Lane() == 0) {
      loss[r] = Store<T>(softmax::CrossEntropyLoss(lse, x_label, x_sum,
                                                   eps, classes, z));
    }
    const C inv = C(1) / s;
    for (int64_t j = G::Lane(); j < cols; j += G::Size()) {
      dr[j] = Store<T>(softmax::CrossEntropyGrad(
          softmax::Probability(Load(xr[j]), m, inv), j == t, lse, eps, classes,
          z));
    }
  }
}

// Blocks for `rows` rows: one per row (block groups) or per kWarps rows.
int Blocks(int64_t rows, bool warp) {
  const int64_t per_block = warp ? kWarps : 1;
  const int64_t blocks = (rows + per_block - 1) / per_block;
  return static_cast<int>(blocks < 65535 * 16 ? (blocks < 1 ? 1 : blocks)
                                              : 65535 * 16);
}

// Calls launch(bool_constant<kWarp>) with the group for `cols`.
template <typename Fn>
const char* WithGroup(int64_t cols, const Fn& launch) {
  if (cols <= kWarpRowCols) {
    launch(std::integral_constant<bool, true>());
  } else {
    launch(std::integral_constant<bool, false>());
  }
  return LastError();
}

}  // namespace

const char* LaunchSoftmax(Dtype dtype, const void* x, void* y, int64_t rows,
                          int64_t cols, bool log, void* stream) {
  if (rows == 0 || cols == 0) return nullptr;
  return DispatchDtype(dtype, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    return WithGroup(cols, [&](auto warp) {
      TF_OPS_LAUNCH(Blocks(rows, warp), kBlockThreads, 0,
                    static_cast<cudaStream_t>(stream),
                    SoftmaxKernel<decltype(warp)::value, T>)(
          static_cast<const T*>(x), static_cast<T*>(y), rows, cols, log);
    });
  });
}

const char* LaunchSoftmaxGrad(Dtype dtype, const void* g, const void* y,
                              void* dx, int64_t rows, int64_t cols, bool log,
                              float scale, void* stream) {
  if (rows == 0 || cols == 0) return nullptr;
  return DispatchDtype(dtype, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    return WithGroup(cols, [&](auto warp) {
      TF_OPS_LAUNCH(Blocks(rows, warp), kBlockThreads, 0,
                    static_cast<cudaStream_t>(stream),
                    SoftmaxGradKernel<decltype(warp)::value, T>)(
          static_cast<const T*>(g), static_cast<const T*>(y),
          static_cast<T*>(dx), rows, cols, log, scale);
    });
  });
}

const char* LaunchMaskedSoftmax(Dtype dtype, const void* x,
                                const MaskLayout& mask, float scale, void* y,
                                int64_t rows, int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return nullptr;
  return DispatchDtype(dtype, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    return WithGroup(cols, [&](auto warp) {
      TF_OPS_LAUNCH(Blocks(rows, warp), kBlockThreads, 0,
                    static_cast<cudaStream_t>(stream),
                    MaskedSoftmaxKernel<decltype(warp)::value, T>)(
          static_cast<const T*>(x), mask, scale, static_cast<T*>(y), rows,
          cols);
    });
  });
}

const char* LaunchSparseCrossEntropy(Dtype dtype, const void* logits,
                                     const void* labels, bool labels64,
                                     void* loss, void* dlogits, int64_t rows,
                                     int64_t cols,
                                     const softmax::CrossEntropyParams& params,
                                     void* stream) {
  if (rows == 0 || cols == 0) return nullptr;
  return DispatchDtype(dtype, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    return WithGroup(cols, [&](auto warp) {
      constexpr bool kWarp = decltype(warp)::value;
      const cudaStream_t s = static_cast<cudaStream_t>(stream);
      if (labels64) {
        TF_OPS_LAUNCH(Blocks(rows, warp), kBlockThreads, 0, s,
                      CrossEntropyKernel<kWarp, T, int64_t>)(
            static_cast<const T*>(logits), static_cast<const int64_t*>(labels),
            static_cast<T*>(loss), static_cast<T*>(dlogits), rows, cols,
            params);
      } else {
        TF_OPS_LAUNCH(Blocks(rows, warp), kBlockThreads, 0, s,
                      CrossEntropyKernel<kWarp, T, int32_t>)(
            static_cast<const T*>(logits), static_cast<const int32_t*>(labels),
            static_cast<T*>(loss), static_cast<T*>(dlogits), rows, cols,
            params);
      }
    });
  });
}

}  // namespace tf_ops
