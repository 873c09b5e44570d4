// The fused ops' CUDA kernels (fused_gpu.h): grid-stride element loops for
// the bias forward and the gated ops, and the bias gradient's two passes.
//
// The bias gradient is a deterministic reduction without atomics. The tensor,
// seen as [outer, channels, inner], is cut into tiles by BiasGradPlan, from
// the shape alone (never from the GPU's size or the grid):
//   inner = 1 (NHWC): a tile is up to 32 channels by a chunk of rows; its
//     threads stride down the rows of one channel each, and a fixed tree in
//     shared memory adds the threads of each channel;
//   inner > 1 (NCHW): a tile is one channel, a chunk of `outer` and a chunk
//     of `inner`; its threads stride over it and a fixed tree adds them all.
// Each tile writes dx for its elements and one sum per channel into its own
// slot of the scratch buffer (pass 1). Pass 2 gives each channel a block that
// adds the channel's tile sums, each thread a fixed strided subset, then a
// fixed tree. Which block runs a tile never changes what it computes, so the
// result is the same bits on every run.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/fused/fused_math.h"
#include "tf_ops/cu/fused/fused_gpu.h"
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

__device__ __forceinline__ int64_t Min(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// ----------------------------------------------------- element loops ----

template <typename Op, typename T>
__global__ void BiasForwardKernel(Op op, const T* x, const T* bias, T* y,
                                  int64_t channels, int64_t inner, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalThreads()) {
    const int64_t c = (inner == 1 ? i : i / inner) % channels;
    y[i] = Store<T>(BiasForwardOf(op, Load(x[i]), Load(bias[c])));
  }
}

// Output element i = (r, j): a = x[r, j], b = x[r, half + j], each plus
// its bias unless bias is null (the same for every thread: no divergence).
template <typename Op, typename T>
__global__ void GatedForwardKernel(Op op, const T* x, const T* bias, T* y,
                                   int64_t half, int64_t n_out) {
  for (int64_t i = GlobalThread(); i < n_out; i += GlobalThreads()) {
    const int64_t r = i / half;
    const int64_t at = i + r * half;  // r * 2 * half + (i - r * half)
    ComputeType<T> a = Load(x[at]), b = Load(x[at + half]);
    if (bias != nullptr) {
      const int64_t j = i - r * half;
      a += Load(bias[j]);
      b += Load(bias[j + half]);
    }
    y[i] = Store<T>(GatedForwardOf(op, a, b));
  }
}

// Reads a and b before writing either: dx may be x.
template <typename Op, typename T>
__global__ void GatedGradKernel(Op op, const T* g, const T* x, T* dx,
                                int64_t half, int64_t n_out) {
  for (int64_t i = GlobalThread(); i < n_out; i += GlobalThreads()) {
    const int64_t r = i / half;
    const int64_t at = i + r * half;
    const auto v = GatedGradOf(op, Load(g[i]), Load(x[at]), Load(x[at + half]));
    dx[at] = Store<T>(v.d_a);
    dx[at + half] = Store<T>(v.d_b);
  }
}

// ------------------------------------------------------ bias gradient ----

// The tiles of the bias gradient, from the shape alone (see the top).
struct BiasGradPlan {
  int64_t channels = 0, inner = 1, outer = 0;
  // Threads of a block: col_threads across channels (inner = 1) or along
  // inner (inner > 1), row_threads down the rows; their product is
  // kThreadsPerBlock, both powers of two.
  int col_threads = 1, row_threads = kThreadsPerBlock;
  // inner = 1: channel_blocks of col_threads channels; inner > 1: one
  // channel per tile (channel_blocks = channels).
  int64_t channel_blocks = 0;
  // Rows (of `outer`) per tile and their chunks; inner > 1 also cuts inner
  // into inner_chunks of inner_len.
  int64_t rows_per_tile = 1, row_chunks = 0;
  int64_t inner_len = 1, inner_chunks = 1;

  __host__ __device__ int64_t tiles() const {
    return channel_blocks * row_chunks * inner_chunks;
  }
  // Tile sums per channel; partial k of channel c is at k * channels + c.
  __host__ __device__ int64_t per_channel() const {
    return row_chunks * inner_chunks;
  }
  int64_t partials() const { return per_channel() * channels; }
};

// Elements a tile aims at: enough work per block to hide the reduction;
// chunks per channel are capped so that pass 2 stays short.
constexpr int64_t kTileElements = 8192;
constexpr int64_t kMaxRowChunks = 1024;
constexpr int64_t kMaxInner = 16384;  // inner elements per tile, inner > 1

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int PowerOfTwoAtLeast(int64_t v, int cap) {
  int p = 1;
  while (p < v && p < cap) p *= 2;
  return p;
}

BiasGradPlan MakePlan(BiasLayout layout, int64_t n) {
  BiasGradPlan p;
  p.channels = layout.channels;
  p.inner = layout.inner;
  const int64_t per_outer = layout.channels * layout.inner;
  p.outer = per_outer == 0 ? 0 : n / per_outer;
  if (p.outer == 0) return p;  // no tiles; pass 2 writes zeros
  if (p.inner == 1) {
    p.col_threads = PowerOfTwoAtLeast(p.channels, 32);
    p.row_threads = kThreadsPerBlock / p.col_threads;
    p.channel_blocks = CeilDiv(p.channels, p.col_threads);
    p.rows_per_tile = std::max(CeilDiv(kTileElements, p.col_threads),
                               CeilDiv(p.outer, kMaxRowChunks));
  } else {
    p.col_threads = PowerOfTwoAtLeast(p.inner, kThreadsPerBlock);
    p.row_threads = kThreadsPerBlock / p.col_threads;
    p.channel_blocks = p.channels;
    p.inner_len = std::min(p.inner, kMaxInner);
    p.inner_chunks = CeilDiv(p.inner, p.inner_len);
    p.rows_per_tile = std::max(CeilDiv(kTileElements, p.inner_len),
                               CeilDiv(p.outer, kMaxRowChunks));
  }
  p.row_chunks = CeilDiv(p.outer, p.rows_per_tile);
  return p;
}

// A fixed tree over s[0, count) of one block, count a power of two, lanes
// `stride` apart: s[lane] ends holding the sum over s[lane + k * stride].
// Every thread of the block must call it.
template <typename Acc>
__device__ __forceinline__ void TreeSum(Acc* s, int count, int stride) {
  for (int half = count / 2; half >= 1; half /= 2) {
    __syncthreads();
    const int t = threadIdx.x;
    if (t < half * stride) s[t] += s[t + half * stride];
  }
  __syncthreads();
}

// Pass 1, inner = 1: a tile is (channel block cb, row chunk rc).
template <typename Op, typename T>
__global__ void BiasGradTilesNhwc(Op op, const T* g, const T* x, const T* bias,
                                  T* dx, AccType<T>* partials,
                                  BiasGradPlan p) {
  using Acc = AccType<T>;
  __shared__ Acc s[kThreadsPerBlock];
  const int tx = threadIdx.x % p.col_threads;
  const int ty = threadIdx.x / p.col_threads;
  for (int64_t tile = blockIdx.x; tile < p.tiles(); tile += gridDim.x) {
    const int64_t cb = tile % p.channel_blocks, rc = tile / p.channel_blocks;
    const int64_t c = cb * p.col_threads + tx;
    const int64_t r_end = Min(p.outer, (rc + 1) * p.rows_per_tile);
    Acc acc = 0;
    if (c < p.channels) {
      const ComputeType<T> b = Load(bias[c]);
      for (int64_t r = rc * p.rows_per_tile + ty; r < r_end;
           r += p.row_threads) {
        const int64_t i = r * p.channels + c;
        const ComputeType<T> d = BiasGradOf(op, Load(g[i]), Load(x[i]), b);
        dx[i] = Store<T>(d);
        acc += static_cast<Acc>(d);
      }
    }
    s[threadIdx.x] = acc;
    // Lane (ty, tx) is s[ty * col_threads + tx]: sum over ty per tx.
    TreeSum(s, p.row_threads, p.col_threads);
    if (ty == 0 && c < p.channels) partials[rc * p.channels + c] = s[tx];
    __syncthreads();  // s is reused by the next tile
  }
}

// Pass 1, inner > 1: a tile is (channel c, row chunk rc, inner chunk ic).
template <typename Op, typename T>
__global__ void BiasGradTilesNchw(Op op, const T* g, const T* x, const T* bias,
                                  T* dx, AccType<T>* partials,
                                  BiasGradPlan p) {
  using Acc = AccType<T>;
  __shared__ Acc s[kThreadsPerBlock];
  const int tx = threadIdx.x % p.col_threads;
  const int ty = threadIdx.x / p.col_threads;
  for (int64_t tile = blockIdx.x; tile < p.tiles(); tile += gridDim.x) {
    const int64_t c = tile % p.channels;
    const int64_t k = tile / p.channels;  // rc * inner_chunks + ic
    const int64_t rc = k / p.inner_chunks, ic = k % p.inner_chunks;
    const int64_t r_end = Min(p.outer, (rc + 1) * p.rows_per_tile);
    const int64_t i_begin = ic * p.inner_len;
    const int64_t i_end = Min(p.inner, i_begin + p.inner_len);
    const ComputeType<T> b = Load(bias[c]);
    Acc acc = 0;
    for (int64_t r = rc * p.rows_per_tile + ty; r < r_end; r += p.row_threads) {
      const int64_t row = (r * p.channels + c) * p.inner;
      for (int64_t j = i_begin + tx; j < i_end; j += p.col_threads) {
        const int64_t i = row + j;
        const ComputeType<T> d = BiasGradOf(op, Load(g[i]), Load(x[i]), b);
        dx[i] = Store<T>(d);
        acc += static_cast<Acc>(d);
      }
    }
    s[threadIdx.x] = acc;
    TreeSum(s, kThreadsPerBlock, 1);
    if (threadIdx.x == 0) partials[k * p.channels + c] = s[0];
    __syncthreads();
  }
}

// Pass 1 of BiasGated's grad: the plan of an NHWC bias over the outputs
// (channels = half), each thread's column j writing dx and summing both
// features j and half + j; the sums of row chunk rc for feature c are at
// rc * 2 * half + c.
template <typename Op, typename T>
__global__ void BiasGatedGradTiles(Op op, const T* g, const T* x,
                                   const T* bias, T* dx, AccType<T>* partials,
                                   BiasGradPlan p) {
  using Acc = AccType<T>;
  __shared__ Acc s_a[kThreadsPerBlock];
  __shared__ Acc s_b[kThreadsPerBlock];
  const int64_t half = p.channels;
  const int tx = threadIdx.x % p.col_threads;
  const int ty = threadIdx.x / p.col_threads;
  for (int64_t tile = blockIdx.x; tile < p.tiles(); tile += gridDim.x) {
    const int64_t cb = tile % p.channel_blocks, rc = tile / p.channel_blocks;
    const int64_t j = cb * p.col_threads + tx;
    const int64_t r_end = Min(p.outer, (rc + 1) * p.rows_per_tile);
    Acc acc_a = 0, acc_b = 0;
    if (j < half) {
      const ComputeType<T> bias_a = Load(bias[j]), bias_b = Load(bias[j + half]);
      for (int64_t r = rc * p.rows_per_tile + ty; r < r_end;
           r += p.row_threads) {
        const int64_t at = r * 2 * half + j;
        const auto v = GatedGradOf(op, Load(g[r * half + j]),
                                   Load(x[at]) + bias_a,
                                   Load(x[at + half]) + bias_b);
        dx[at] = Store<T>(v.d_a);
        dx[at + half] = Store<T>(v.d_b);
        acc_a += static_cast<Acc>(v.d_a);
        acc_b += static_cast<Acc>(v.d_b);
      }
    }
    s_a[threadIdx.x] = acc_a;
    s_b[threadIdx.x] = acc_b;
    TreeSum(s_a, p.row_threads, p.col_threads);
    TreeSum(s_b, p.row_threads, p.col_threads);
    if (ty == 0 && j < half) {
      partials[rc * 2 * half + j] = s_a[tx];
      partials[rc * 2 * half + half + j] = s_b[tx];
    }
    __syncthreads();  // s_a and s_b are reused by the next tile
  }
}

// Pass 2: db[c] = the sum of channel c's tile sums, rounded once.
template <typename T>
__global__ void BiasGradReduce(const AccType<T>* partials, T* db,
                               int64_t channels, int64_t per_channel) {
  using Acc = AccType<T>;
  __shared__ Acc s[kThreadsPerBlock];
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    Acc acc = 0;
    for (int64_t k = threadIdx.x; k < per_channel; k += blockDim.x) {
      acc += partials[k * channels + c];
    }
    s[threadIdx.x] = acc;
    TreeSum(s, kThreadsPerBlock, 1);
    if (threadIdx.x == 0) {
      db[c] = Store<T>(static_cast<ComputeType<T>>(s[0]));
    }
    __syncthreads();
  }
}

size_t AccBytes(Dtype dtype) {
  return dtype == Dtype::kHalf || dtype == Dtype::kBFloat16 ? sizeof(float)
                                                            : sizeof(double);
}

}  // namespace

int64_t BiasGradGpuScratchBytes(Dtype dtype, BiasLayout layout, int64_t n) {
  return MakePlan(layout, n).partials() * static_cast<int64_t>(AccBytes(dtype));
}

// BiasGated's grad plan: an NHWC bias plan over the outputs.
BiasGradPlan MakeGatedPlan(int64_t half, int64_t n_out) {
  return MakePlan(BiasLayout{half, 1}, n_out);
}

int64_t BiasGatedGradGpuScratchBytes(Dtype dtype, int64_t half,
                                     int64_t n_out) {
  return 2 * MakeGatedPlan(half, n_out).partials() *
         static_cast<int64_t>(AccBytes(dtype));
}

template <typename Op>
const char* LaunchBiasForward(const Op& op, Dtype dtype, const void* x,
                              const void* bias, void* y, BiasLayout layout,
                              int64_t n, void* stream) {
  if (n <= 0 || layout.channels <= 0) return nullptr;
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    TF_OPS_LAUNCH(BlocksFor(n), kThreadsPerBlock, 0,
                  static_cast<cudaStream_t>(stream), BiasForwardKernel<Op, T>)(
            op, static_cast<const T*>(x), static_cast<const T*>(bias),
            static_cast<T*>(y), layout.channels, layout.inner, n);
    return LastError();
  });
}

template <typename Op>
const char* LaunchBiasGrad(const Op& op, Dtype dtype, const void* g,
                           const void* x, const void* bias, void* dx,
                           void* db, void* scratch, BiasLayout layout,
                           int64_t n, void* stream) {
  if (layout.channels <= 0) return nullptr;
  const BiasGradPlan plan = MakePlan(layout, n);
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    using Acc = AccType<T>;
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    Acc* partials = static_cast<Acc*>(scratch);
    if (plan.tiles() > 0) {
      const int blocks = BlocksFor(plan.tiles(), 1);
      if (plan.inner == 1) {
        TF_OPS_LAUNCH(blocks, kThreadsPerBlock, 0, s, BiasGradTilesNhwc<Op, T>)(
            op, static_cast<const T*>(g), static_cast<const T*>(x),
            static_cast<const T*>(bias), static_cast<T*>(dx), partials, plan);
      } else {
        TF_OPS_LAUNCH(blocks, kThreadsPerBlock, 0, s, BiasGradTilesNchw<Op, T>)(
            op, static_cast<const T*>(g), static_cast<const T*>(x),
            static_cast<const T*>(bias), static_cast<T*>(dx), partials, plan);
      }
      if (const char* err = LastError()) return err;
    }
    TF_OPS_LAUNCH(BlocksFor(plan.channels, 1), kThreadsPerBlock, 0, s,
                  BiasGradReduce<T>)(
            partials, static_cast<T*>(db), plan.channels, plan.per_channel());
    return LastError();
  });
}

template <typename Op>
const char* LaunchGatedForward(const Op& op, Dtype dtype, const void* x,
                               const void* bias, void* y, int64_t half,
                               int64_t n_out, void* stream) {
  if (n_out <= 0 || half <= 0) return nullptr;
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    TF_OPS_LAUNCH(BlocksFor(n_out), kThreadsPerBlock, 0,
                  static_cast<cudaStream_t>(stream), GatedForwardKernel<Op, T>)(
            op, static_cast<const T*>(x), static_cast<const T*>(bias),
            static_cast<T*>(y), half, n_out);
    return LastError();
  });
}

template <typename Op>
const char* LaunchBiasGatedGrad(const Op& op, Dtype dtype, const void* g,
                                const void* x, const void* bias, void* dx,
                                void* db, void* scratch, int64_t half,
                                int64_t n_out, void* stream) {
  if (half <= 0) return nullptr;
  const BiasGradPlan plan = MakeGatedPlan(half, n_out);
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    using Acc = AccType<T>;
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    Acc* partials = static_cast<Acc*>(scratch);
    if (plan.tiles() > 0) {
      TF_OPS_LAUNCH(BlocksFor(plan.tiles(), 1), kThreadsPerBlock, 0, s,
                    BiasGatedGradTiles<Op, T>)(
              op, static_cast<const T*>(g), static_cast<const T*>(x),
              static_cast<const T*>(bias), static_cast<T*>(dx), partials,
              plan);
      if (const char* err = LastError()) return err;
    }
    // Feature c's sums are partials[k * 2 * half + c], k < row_chunks.
    TF_OPS_LAUNCH(BlocksFor(2 * half, 1), kThreadsPerBlock, 0, s,
                  BiasGradReduce<T>)(
            partials, static_cast<T*>(db), 2 * half, plan.row_chunks);
    return LastError();
  });
}

template <typename Op>
const char* LaunchGatedGrad(const Op& op, Dtype dtype, const void* g,
                            const void* x, void* dx, int64_t half,
                            int64_t n_out, void* stream) {
  if (n_out <= 0 || half <= 0) return nullptr;
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    TF_OPS_LAUNCH(BlocksFor(n_out), kThreadsPerBlock, 0,
                  static_cast<cudaStream_t>(stream), GatedGradKernel<Op, T>)(
            op, static_cast<const T*>(g), static_cast<const T*>(x),
            static_cast<T*>(dx), half, n_out);
    return LastError();
  });
}

#define TF_OPS_INSTANTIATE_FUSED_GPU(Name)                                    \
  template const char* LaunchBiasForward<Name>(const Name&, Dtype,            \
                                               const void*, const void*,      \
                                               void*, BiasLayout, int64_t,    \
                                               void*);                        \
  template const char* LaunchBiasGrad<Name>(                                  \
      const Name&, Dtype, const void*, const void*, const void*, void*,       \
      void*, void*, BiasLayout, int64_t, void*);                              \
  template const char* LaunchGatedForward<Name>(                              \
      const Name&, Dtype, const void*, const void*, void*, int64_t, int64_t,  \
      void*);                                                                 \
  template const char* LaunchBiasGatedGrad<Name>(                             \
      const Name&, Dtype, const void*, const void*, const void*, void*,       \
      void*, void*, int64_t, int64_t, void*);                                 \
  template const char* LaunchGatedGrad<Name>(const Name&, Dtype, const void*, \
                                             const void*, void*, int64_t,     \
                                             int64_t, void*);
TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_INSTANTIATE_FUSED_GPU)
#undef TF_OPS_INSTANTIATE_FUSED_GPU

}  // namespace tf_ops
