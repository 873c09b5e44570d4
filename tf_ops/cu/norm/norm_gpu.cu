// The normalisation ops' CUDA kernels (norm_gpu.h), from norm_math.h.
//
// Rows: blocks of 256 threads; a row of up to kWarpRowMax elements gets a
// warp (8 rows per block), a longer row the whole block. A row's sums are a
// butterfly of __shfl_xor_sync within each warp (every lane ends with the
// same value), then, for a block, the 8 warp sums from shared memory added
// in warp order by every thread. Each thread strides over the same elements
// in each pass, so the residual's h is read back by the thread that wrote
// it.
//
// dgamma and dbeta: pass 1 gives each (column chunk, tile of kGradRowBlock
// rows) a block whose threads sum one column each down the tile's rows into
// their own slot of the scratch; pass 2 adds each column's tile sums in tile
// order. The tiles come from the shape alone and nothing is atomic, so the
// result is the same bits on every run and every GPU.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/norm/norm_math.h"
#include "tf_ops/cu/core/launch_common.cuh"
#include "tf_ops/cu/norm/norm_gpu.h"

namespace tf_ops {
namespace {

using gpu::DispatchDtype;
using gpu::kMaxBlocks;
using gpu::kThreadsPerBlock;
using gpu::LastError;

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = kThreadsPerBlock / kWarp;

// What dgamma and dbeta sum in: float for half and bfloat16, double for
// float and double (the CPU engine's Acc).
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

template <typename C>
__device__ __forceinline__ C WarpSum(C v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// The sum over the row's threads: a warp (kBlockRow false) or the block.
template <bool kBlockRow, typename C>
__device__ __forceinline__ C RowSum(C v, C* shared) {
  v = WarpSum(v);
  if (!kBlockRow) return v;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  C total = 0;
  for (int w = 0; w < kWarpsPerBlock; ++w) total += shared[w];
  __syncthreads();  // shared is reused by the next sum
  return total;
}

// The row this thread's group works on first, the step to the next, and the
// thread's index and count within the row.
template <bool kBlockRow>
struct RowMap {
  int64_t first, step;
  int lane, lanes;
  __device__ RowMap() {
    if (kBlockRow) {
      first = blockIdx.x;
      step = gridDim.x;
      lane = threadIdx.x;
      lanes = blockDim.x;
    } else {
      first = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock +
              threadIdx.x / kWarp;
      step = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
      lane = threadIdx.x % kWarp;
      lanes = kWarp;
    }
  }
};

template <typename T, bool kBlockRow>
__global__ void NormForwardKernel(int64_t rows, int64_t n, bool centered,
                                  ComputeType<T> eps, const T* x, const T* r,
                                  const ComputeType<T>* gamma,
                                  const ComputeType<T>* beta, T* h, T* y,
                                  ComputeType<T>* mean_out,
                                  ComputeType<T>* rstd_out) {
  using C = ComputeType<T>;
  __shared__ C shared[kWarpsPerBlock];
  const RowMap<kBlockRow> m;
  const C count = static_cast<C>(n);
  for (int64_t row = m.first; row < rows; row += m.step) {
    const T* src = x + row * n;
    if (r != nullptr) {
      T* hr = h + row * n;
      const T* rr = r + row * n;
      for (int64_t j = m.lane; j < n; j += m.lanes) {
        hr[j] = Store<T>(Load(src[j]) + Load(rr[j]));
      }
      src = hr;  // read back by the thread that wrote each element
    }
    C mean = 0;
    if (centered) {
      C s = 0;
      for (int64_t j = m.lane; j < n; j += m.lanes) s += Load(src[j]);
      mean = norm::RowMean(centered, RowSum<kBlockRow>(s, shared), count);
    }
    C sq = 0;
    for (int64_t j = m.lane; j < n; j += m.lanes) {
      const C d = norm::Deviation(Load(src[j]), mean);
      sq += d * d;
    }
    const C rstd = norm::RowRstd(RowSum<kBlockRow>(sq, shared), count, eps);
    T* yr = y + row * n;
    for (int64_t j = m.lane; j < n; j += m.lanes) {
      const C b = beta != nullptr ? beta[j] : C(0);
      yr[j] = Store<T>(norm::NormOutput(norm::Normalized(Load(src[j]), mean, rstd),
                                        gamma[j], b));
    }
    if (m.lane == 0) {
      if (mean_out != nullptr) mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
  }
}

template <typename T, bool kBlockRow>
__global__ void NormGradRowsKernel(int64_t rows, int64_t n, bool centered,
                                   const T* dy, const T* x,
                                   const ComputeType<T>* gamma,
                                   const ComputeType<T>* mean_in,
                                   const ComputeType<T>* rstd_in, const T* dh,
                                   T* dx) {
  using C = ComputeType<T>;
  __shared__ C shared[kWarpsPerBlock];
  const RowMap<kBlockRow> m;
  const C count = static_cast<C>(n);
  for (int64_t row = m.first; row < rows; row += m.step) {
    const int64_t at = row * n;
    const C mean = centered && mean_in != nullptr ? mean_in[row] : C(0);
    const C rstd = rstd_in[row];
    C s_gg = 0, s_ggx = 0;
    for (int64_t j = m.lane; j < n; j += m.lanes) {
      const C gg = Load(dy[at + j]) * gamma[j];
      s_gg += gg;
      s_ggx += gg * norm::Normalized(Load(x[at + j]), mean, rstd);
    }
    const C sum_gg = centered ? RowSum<kBlockRow>(s_gg, shared) : C(0);
    const C sum_ggx = RowSum<kBlockRow>(s_ggx, shared);
    const norm::GradRowConstants<C> c =
        norm::GradConstants(centered, sum_gg, sum_ggx, count);
    for (int64_t j = m.lane; j < n; j += m.lanes) {
      const C gg = Load(dy[at + j]) * gamma[j];
      const C xhat = norm::Normalized(Load(x[at + j]), mean, rstd);
      C d = norm::NormInputGrad(gg, xhat, rstd, c);
      if (dh != nullptr) d += Load(dh[at + j]);
      dx[at + j] = Store<T>(d);
    }
  }
}

// Pass 1 of dgamma/dbeta: block (column chunk blockIdx.x, tile blockIdx.y).
template <typename T>
__global__ void NormGradColumnsKernel(int64_t rows, int64_t n, const T* dy,
                                      const T* x,
                                      const ComputeType<T>* mean_in,
                                      const ComputeType<T>* rstd_in,
                                      AccType<T>* partials) {
  using C = ComputeType<T>;
  using Acc = AccType<T>;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= n) return;
  const int64_t tiles = (rows + kGradRowBlock - 1) / kGradRowBlock;
  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y) {
    const int64_t r0 = tile * kGradRowBlock;
    const int64_t r1 = r0 + kGradRowBlock < rows ? r0 + kGradRowBlock : rows;
    Acc sum_gamma = 0, sum_beta = 0;
    for (int64_t row = r0; row < r1; ++row) {
      const C mean = mean_in != nullptr ? mean_in[row] : C(0);
      const C g = Load(dy[row * n + c]);
      sum_gamma += static_cast<Acc>(
          g * norm::Normalized(Load(x[row * n + c]), mean, rstd_in[row]));
      sum_beta += static_cast<Acc>(g);
    }
    partials[tile * 2 * n + c] = sum_gamma;
    partials[tile * 2 * n + n + c] = sum_beta;
  }
}

template <typename T>
__global__ void NormGradReduceKernel(int64_t n, int64_t tiles,
                                     const AccType<T>* partials,
                                     ComputeType<T>* dgamma,
                                     ComputeType<T>* dbeta) {
  using Acc = AccType<T>;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       c < n; c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc sg = 0, sb = 0;
    for (int64_t t = 0; t < tiles; ++t) {
      sg += partials[t * 2 * n + c];
      sb += partials[t * 2 * n + n + c];
    }
    dgamma[c] = static_cast<ComputeType<T>>(sg);
    if (dbeta != nullptr) dbeta[c] = static_cast<ComputeType<T>>(sb);
  }
}

int64_t GradTiles(int64_t rows) {
  return (rows + kGradRowBlock - 1) / kGradRowBlock;
}

int RowBlocks(int64_t rows, bool block_row) {
  const int64_t per_block = block_row ? 1 : kWarpsPerBlock;
  return static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>((rows + per_block - 1) / per_block, kMaxBlocks)));
}

}  // namespace

const char* LaunchNormForward(Dtype dtype, const NormShape& shape,
                              double epsilon, const void* x,
                              const void* residual, const void* gamma,
                              const void* beta, void* h, void* y, void* mean,
                              void* rstd, void* stream_raw) {
  if (shape.rows == 0) return nullptr;
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_raw);
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    using C = ComputeType<T>;
    const bool block_row = shape.cols > kWarpRowMax;
    const int grid = RowBlocks(shape.rows, block_row);
    const auto args = [&](auto kernel) {
      TF_OPS_LAUNCH(grid, kThreadsPerBlock, 0, stream, kernel)(
          shape.rows, shape.cols, shape.centered, static_cast<C>(epsilon),
          static_cast<const T*>(x), static_cast<const T*>(residual),
          static_cast<const C*>(gamma), static_cast<const C*>(beta),
          static_cast<T*>(h), static_cast<T*>(y), static_cast<C*>(mean),
          static_cast<C*>(rstd));
    };
    if (block_row) {
      args(NormForwardKernel<T, true>);
    } else {
      args(NormForwardKernel<T, false>);
    }
    return LastError();
  });
}

int64_t NormGradGpuScratchBytes(const NormShape& shape) {
  return std::max<int64_t>(1, GradTiles(shape.rows) * 2 * shape.cols *
                                  static_cast<int64_t>(sizeof(double)));
}

const char* LaunchNormGrad(Dtype dtype, const NormShape& shape, const void* dy,
                           const void* x, const void* gamma, const void* mean,
                           const void* rstd, const void* dh, void* dx,
                           void* dgamma, void* dbeta, void* scratch,
                           void* stream_raw) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_raw);
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    using C = ComputeType<T>;
    using Acc = AccType<T>;
    const int64_t rows = shape.rows, n = shape.cols;
    if (n == 0) return nullptr;
    if (rows > 0) {
      const bool block_row = n > kWarpRowMax;
      const int grid = RowBlocks(rows, block_row);
      const auto rows_pass = [&](auto kernel) {
        TF_OPS_LAUNCH(grid, kThreadsPerBlock, 0, stream, kernel)(
            rows, n, shape.centered, static_cast<const T*>(dy),
            static_cast<const T*>(x), static_cast<const C*>(gamma),
            static_cast<const C*>(shape.centered ? mean : nullptr),
            static_cast<const C*>(rstd), static_cast<const T*>(dh),
            static_cast<T*>(dx));
      };
      if (block_row) {
        rows_pass(NormGradRowsKernel<T, true>);
      } else {
        rows_pass(NormGradRowsKernel<T, false>);
      }
      const dim3 col_grid(
          static_cast<unsigned>((n + kThreadsPerBlock - 1) / kThreadsPerBlock),
          static_cast<unsigned>(std::min<int64_t>(GradTiles(rows), 65535)));
      TF_OPS_LAUNCH(col_grid, kThreadsPerBlock, 0, stream,
                    NormGradColumnsKernel<T>)(
          rows, n, static_cast<const T*>(dy), static_cast<const T*>(x),
          static_cast<const C*>(shape.centered ? mean : nullptr),
          static_cast<const C*>(rstd), static_cast<Acc*>(scratch));
    }
    TF_OPS_LAUNCH(gpu::BlocksFor(n), kThreadsPerBlock, 0, stream,
                  NormGradReduceKernel<T>)(
        n, GradTiles(rows), static_cast<const Acc*>(scratch),
        static_cast<C*>(dgamma), static_cast<C*>(dbeta));
    return LastError();
  });
}

}  // namespace tf_ops
