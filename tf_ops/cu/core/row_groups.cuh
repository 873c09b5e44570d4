// Row-wise CUDA kernels (the norm and softmax families): each row of `cols`
// contiguous elements belongs to one group of threads, a warp for short rows
// (kWarpsPerBlock rows per block) or the whole block for long ones. This file
// is the one statement of those two forms: which row a group starts on and
// how it strides, the sum or max over a group (warp shuffles, then a fixed
// pass over the warps' values in shared memory: no atomics, the same bits on
// every run), the grid, and the switch between the forms by row length.
//
// A kernel is written once, templated on `bool kBlockRow`, and launched as
//   WithRowGroup(cols, kMaxWarpCols, [&](auto block_row) {
//     TF_OPS_LAUNCH(RowGroupBlocks(rows, block_row), kThreadsPerBlock, 0,
//                   stream, Kernel<decltype(block_row)::value, T>)(...);
//   });
// CUDA code only; no TensorFlow or Eigen headers.

#ifndef TF_OPS_CU_CORE_ROW_GROUPS_CUH_
#define TF_OPS_CU_CORE_ROW_GROUPS_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tf_ops/cu/core/launch_common.cuh"

namespace tf_ops {
namespace gpu {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = kThreadsPerBlock / kWarpSize;

// The rows of one group: the first, the step to the next, and this thread's
// index (lane) and the group's size (lanes) within a row.
template <bool kBlockRow>
struct RowGroup {
  int64_t first, step;
  int lane, lanes;
  __device__ RowGroup() {
    if (kBlockRow) {
      first = blockIdx.x;
      step = gridDim.x;
      lane = threadIdx.x;
      lanes = blockDim.x;
    } else {
      first = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock +
              threadIdx.x / kWarpSize;
      step = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
      lane = threadIdx.x % kWarpSize;
      lanes = kWarpSize;
    }
  }
};

struct SumOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    return a + b;
  }
};
struct MaxOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    return b > a ? b : a;
  }
};

// v combined over the group, the same value in every thread: a butterfly of
// warp shuffles, then (block rows) the warps' values in warp order. `shared`
// holds kWarpsPerBlock values and is free again on return.
template <bool kBlockRow, typename C, typename Op>
__device__ __forceinline__ C GroupReduce(C v, C* shared, Op op) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  if (!kBlockRow) return v;
  const int warp = threadIdx.x / kWarpSize;
  if (threadIdx.x % kWarpSize == 0) shared[warp] = v;
  __syncthreads();
  C r = shared[0];
  for (int w = 1; w < kWarpsPerBlock; ++w) r = op(r, shared[w]);
  __syncthreads();  // shared is reused by the next reduction
  return r;
}
template <bool kBlockRow, typename C>
__device__ __forceinline__ C GroupSum(C v, C* shared) {
  return GroupReduce<kBlockRow>(v, shared, SumOp());
}
template <bool kBlockRow, typename C>
__device__ __forceinline__ C GroupMax(C v, C* shared) {
  return GroupReduce<kBlockRow>(v, shared, MaxOp());
}

// Blocks for `rows` rows: one per row (block rows) or per kWarpsPerBlock
// rows, at most kMaxBlocks (the kernels stride over the rest).
inline int RowGroupBlocks(int64_t rows, bool block_row) {
  return BlocksFor(rows, block_row ? 1 : kWarpsPerBlock);
}

// Calls launch(std::integral_constant<bool, kBlockRow>) with the form for
// rows of `cols` elements: a warp up to max_warp_cols, else a block; then
// returns the launch's error (nullptr on success).
template <typename Fn>
const char* WithRowGroup(int64_t cols, int64_t max_warp_cols,
                         const Fn& launch) {
  if (cols > max_warp_cols) {
    launch(std::integral_constant<bool, true>());
  } else {
    launch(std::integral_constant<bool, false>());
  }
  return LastError();
}

}  // namespace gpu
}  // namespace tf_ops

#endif  // TF_OPS_CU_CORE_ROW_GROUPS_CUH_
