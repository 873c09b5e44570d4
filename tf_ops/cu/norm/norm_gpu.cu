// The normalisation ops' CUDA kernels (norm_gpu.h), from norm_math.h.
//
// Rows (row_groups.cuh): a row of up to kWarpRowMax elements gets a warp, a
// longer row the whole block; a row's sums are the group's fixed reduction,
// the same value in every thread. Each thread strides over the same elements
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
#include "tf_ops/cu/core/row_groups.cuh"
#include "tf_ops/cu/norm/norm_gpu.h"

namespace tf_ops {
namespace {

using gpu::AccType;
using gpu::DispatchDtype;
using gpu::GroupSum;
using gpu::kThreadsPerBlock;
using gpu::kWarpsPerBlock;
using gpu::LastError;
using gpu::Load;
using gpu::RowGroup;
using gpu::RowGroupBlocks;
using gpu::Store;
using gpu::WithRowGroup;

template <typename T, bool kBlockRow>
__global__ void NormForwardKernel(int64_t rows, int64_t n, bool centered,
                                  ComputeType<T> eps, const T* x, const T* r,
                                  const ComputeType<T>* gamma,
                                  const ComputeType<T>* beta, T* h, T* y,
                                  ComputeType<T>* mean_out,
                                  ComputeType<T>* rstd_out) {
  using C = ComputeType<T>;
  __shared__ C shared[kWarpsPerBlock];
  const RowGroup<kBlockRow> m;
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
      mean = norm::RowMean(centered, GroupSum<kBlockRow>(s, shared), count);
    }
    C sq = 0;
    for (int64_t j = m.lane; j < n; j += m.lanes) {
      const C d = norm::Deviation(Load(src[j]), mean);
      sq += d * d;
    }
    const C rstd = norm::RowRstd(GroupSum<kBlockRow>(sq, shared), count, eps);
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
  const RowGroup<kBlockRow> m;
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
    const C sum_gg = centered ? GroupSum<kBlockRow>(s_gg, shared) : C(0);
    const C sum_ggx = GroupSum<kBlockRow>(s_ggx, shared);
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
    return WithRowGroup(shape.cols, kWarpRowMax, [&](auto block_row) {
      TF_OPS_LAUNCH(RowGroupBlocks(shape.rows, block_row), kThreadsPerBlock,
                    0, stream,
                    NormForwardKernel<T, decltype(block_row)::value>)(
          shape.rows, shape.cols, shape.centered, static_cast<C>(epsilon),
          static_cast<const T*>(x), static_cast<const T*>(residual),
          static_cast<const C*>(gamma), static_cast<const C*>(beta),
          static_cast<T*>(h), static_cast<T*>(y), static_cast<C*>(mean),
          static_cast<C*>(rstd));
    });
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
      const char* error = WithRowGroup(n, kWarpRowMax, [&](auto block_row) {
        TF_OPS_LAUNCH(RowGroupBlocks(rows, block_row), kThreadsPerBlock, 0,
                      stream,
                      NormGradRowsKernel<T, decltype(block_row)::value>)(
            rows, n, shape.centered, static_cast<const T*>(dy),
            static_cast<const T*>(x), static_cast<const C*>(gamma),
            static_cast<const C*>(shape.centered ? mean : nullptr),
            static_cast<const C*>(rstd), static_cast<const T*>(dh),
            static_cast<T*>(dx));
      });
      if (error != nullptr) return error;
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
