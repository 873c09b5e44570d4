// The softmax family's CUDA kernels (softmax_gpu.h). A row belongs to one
// group of threads (row_groups.cuh): a warp (rows of <= kWarpRowCols columns)
// or a block. Thread t of the group reads columns t, t + lanes, ...; partial
// maxima and sums meet in the group's fixed reduction. The math is
// softmax_math.h's, as on the CPU.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/softmax/softmax_math.h"
#include "tf_ops/cu/core/launch_common.cuh"
#include "tf_ops/cu/core/row_groups.cuh"
#include "tf_ops/cu/softmax/softmax_gpu.h"

namespace tf_ops {
namespace {

using gpu::DispatchDtype;
using gpu::GroupMax;
using gpu::GroupSum;
using gpu::kThreadsPerBlock;
using gpu::kWarpsPerBlock;
using gpu::Load;
using gpu::RowGroup;
using gpu::RowGroupBlocks;
using gpu::Store;
using gpu::WithRowGroup;
using softmax::NegInf;

template <bool kBlockRow, typename T>
__global__ void SoftmaxKernel(const T* x, T* y, int64_t rows, int64_t cols,
                              bool log) {
  using C = ComputeType<T>;
  __shared__ C shared[kWarpsPerBlock];
  const RowGroup<kBlockRow> group;
  for (int64_t r = group.first; r < rows; r += group.step) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    C m = NegInf<C>();
    for (int64_t j = group.lane; j < cols; j += group.lanes) {
      const C v = Load(xr[j]);
      m = v > m ? v : m;
    }
    m = GroupMax<kBlockRow>(m, shared);
    C s = C(0);
    for (int64_t j = group.lane; j < cols; j += group.lanes) {
      s += Exp(Load(xr[j]) - m);
    }
    s = GroupSum<kBlockRow>(s, shared);
    const C lse = m + softmax::Log(s);
    const C inv = C(1) / s;
    for (int64_t j = group.lane; j < cols; j += group.lanes) {
      const C v = Load(xr[j]);
      yr[j] = Store<T>(log ? v - lse : softmax::Probability(v, m, inv));
    }
  }
}

template <bool kBlockRow, typename T>
__global__ void SoftmaxGradKernel(const T* g, const T* y, T* dx, int64_t rows,
                                  int64_t cols, bool log, float scale) {
  using C = ComputeType<T>;
  __shared__ C shared[kWarpsPerBlock];
  const RowGroup<kBlockRow> group;
  for (int64_t r = group.first; r < rows; r += group.step) {
    const T* gr = g + r * cols;
    const T* yr = y + r * cols;
    T* dr = dx + r * cols;
    C acc = C(0);
    for (int64_t j = group.lane; j < cols; j += group.lanes) {
      acc += log ? Load(gr[j]) : Load(gr[j]) * Load(yr[j]);
    }
    acc = GroupSum<kBlockRow>(acc, shared);
    for (int64_t j = group.lane; j < cols; j += group.lanes) {
      const C gj = Load(gr[j]), yj = Load(yr[j]);
      dr[j] = Store<T>(log ? softmax::LogSoftmaxGrad(gj, yj, acc)
                           : softmax::SoftmaxGrad(gj, yj, acc, C(scale)));
    }
  }
}

template <bool kBlockRow, typename T>
__global__ void MaskedSoftmaxKernel(const T* x, MaskLayout mask, float scale,
                                    T* y, int64_t rows, int64_t cols) {
  using C = ComputeType<T>;
  __shared__ C shared[kWarpsPerBlock];
  const RowGroup<kBlockRow> group;
  const C sc = C(scale);
  for (int64_t r = group.first; r < rows; r += group.step) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const bool* mr =
        mask.mask == nullptr ? nullptr : mask.mask + MaskRowOffset(mask, r);
    const int64_t last = mask.causal ? CausalQuery(mask, r) : cols - 1;
    C m = NegInf<C>();
    C any_masked = C(0);
    for (int64_t j = group.lane; j < cols; j += group.lanes) {
      const bool kept = j <= last && (mr == nullptr || mr[j * mask.col_stride]);
      const C v = kept ? sc * Load(xr[j]) : NegInf<C>();
      m = v > m ? v : m;
      any_masked = kept ? any_masked : C(1);
    }
    m = GroupMax<kBlockRow>(m, shared);
    any_masked = GroupMax<kBlockRow>(any_masked, shared);
    const bool zeros = m == NegInf<C>() && any_masked > C(0);
    C s = C(0);
    for (int64_t j = group.lane; j < cols; j += group.lanes) {
      const bool kept = j <= last && (mr == nullptr || mr[j * mask.col_stride]);
      s += kept ? Exp(sc * Load(xr[j]) - m) : C(0);
    }
    s = GroupSum<kBlockRow>(s, shared);
    const C inv = C(1) / s;
    for (int64_t j = group.lane; j < cols; j += group.lanes) {
      const bool kept = j <= last && (mr == nullptr || mr[j * mask.col_stride]);
      const C p = softmax::Probability(sc * Load(xr[j]), m, inv);
      yr[j] = Store<T>(kept && !zeros ? p : C(0));
    }
  }
}

template <bool kBlockRow, typename T, typename L>
__global__ void CrossEntropyKernel(const T* x, const L* labels, T* loss,
                                   T* dx, int64_t rows, int64_t cols,
                                   softmax::CrossEntropyParams p) {
  using C = ComputeType<T>;
  __shared__ C shared[kWarpsPerBlock];
  const RowGroup<kBlockRow> group;
  const C eps = p.label_smoothing, z = p.z_loss, classes = C(cols);
  for (int64_t r = group.first; r < rows; r += group.step) {
    const T* xr = x + r * cols;
    T* dr = dx + r * cols;
    const int64_t t = labels[r];
    if (t == p.ignore_index || t < 0 || t >= cols) {
      const C fill = t == p.ignore_index ? C(0) : C(NAN);
      if (group.lane == 0) loss[r] = Store<T>(fill);
      for (int64_t j = group.lane; j < cols; j += group.lanes) {
        dr[j] = Store<T>(fill);
      }
      continue;  // the whole group takes this branch: no barrier skipped
    }
    // Read before the barriers below: dlogits may be the logits' buffer.
    const C x_label = Load(xr[t]);
    C m = NegInf<C>(), x_sum = C(0);
    for (int64_t j = group.lane; j < cols; j += group.lanes) {
      const C v = Load(xr[j]);
      m = v > m ? v : m;
      x_sum += v;
    }
    m = GroupMax<kBlockRow>(m, shared);
    x_sum = GroupSum<kBlockRow>(x_sum, shared);
    C s = C(0);
    for (int64_t j = group.lane; j < cols; j += group.lanes) {
      s += Exp(Load(xr[j]) - m);
    }
    s = GroupSum<kBlockRow>(s, shared);
    const C lse = m + softmax::Log(s);
    if (group.lane == 0) {
      loss[r] = Store<T>(softmax::CrossEntropyLoss(lse, x_label, x_sum,
                                                   eps, classes, z));
    }
    const C inv = C(1) / s;
    for (int64_t j = group.lane; j < cols; j += group.lanes) {
      dr[j] = Store<T>(softmax::CrossEntropyGrad(
          softmax::Probability(Load(xr[j]), m, inv), j == t, lse, eps, classes,
          z));
    }
  }
}

}  // namespace

const char* LaunchSoftmax(Dtype dtype, const void* x, void* y, int64_t rows,
                          int64_t cols, bool log, void* stream) {
  if (rows == 0 || cols == 0) return nullptr;
  return DispatchDtype(dtype, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    return WithRowGroup(cols, kWarpRowCols, [&](auto block_row) {
      TF_OPS_LAUNCH(RowGroupBlocks(rows, block_row), kThreadsPerBlock, 0,
                    static_cast<cudaStream_t>(stream),
                    SoftmaxKernel<decltype(block_row)::value, T>)(
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
    return WithRowGroup(cols, kWarpRowCols, [&](auto block_row) {
      TF_OPS_LAUNCH(RowGroupBlocks(rows, block_row), kThreadsPerBlock, 0,
                    static_cast<cudaStream_t>(stream),
                    SoftmaxGradKernel<decltype(block_row)::value, T>)(
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
    return WithRowGroup(cols, kWarpRowCols, [&](auto block_row) {
      TF_OPS_LAUNCH(RowGroupBlocks(rows, block_row), kThreadsPerBlock, 0,
                    static_cast<cudaStream_t>(stream),
                    MaskedSoftmaxKernel<decltype(block_row)::value, T>)(
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
    return WithRowGroup(cols, kWarpRowCols, [&](auto block_row) {
      const auto launch = [&](auto* label_type) {
        using L = std::remove_pointer_t<decltype(label_type)>;
        TF_OPS_LAUNCH(RowGroupBlocks(rows, block_row), kThreadsPerBlock, 0,
                      static_cast<cudaStream_t>(stream),
                      CrossEntropyKernel<decltype(block_row)::value, T, L>)(
            static_cast<const T*>(logits), static_cast<const L*>(labels),
            static_cast<T*>(loss), static_cast<T*>(dlogits), rows, cols,
            params);
      };
      if (labels64) {
        launch(static_cast<int64_t*>(nullptr));
      } else {
        launch(static_cast<int32_t*>(nullptr));
      }
    });
  });
}

}  // namespace tf_ops
