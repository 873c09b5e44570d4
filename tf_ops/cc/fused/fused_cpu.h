// The CPU engine of the fused ops (fused_math.h): bias + activation and gated
// activations, forward and backward. TF-free, like activation_cpu.h: the
// kernels (fused_kernels.cc) split the work over TensorFlow's thread pool and
// call these per shard; the engine test calls them directly.
//
// Buffers are untyped with their Dtype; half and bfloat16 are computed in
// float and rounded once, double in double. Loops are compiled per
// instruction set, the widest the CPU has chosen at run time (cpu_isa.h).

#ifndef TF_OPS_CC_FUSED_CPU_H_
#define TF_OPS_CC_FUSED_CPU_H_

#include <cstdint>

#include "tf_ops/cc/core/dtype.h"

namespace tf_ops {

// A bias op's tensor of n elements viewed as [outer, channels, inner]: the
// bias has `channels` elements, element i adds bias[(i / inner) % channels].
// NHWC (bias on the last axis): inner = 1. NCHW: inner = H * W.
struct BiasLayout {
  int64_t channels;
  int64_t inner;
};

// y[i] = f(x[i] + bias[channel(i)]) for i in [begin, end). y may be x.
template <typename Op>
void CpuBiasForward(const Op& op, Dtype dtype, const void* x, const void* bias,
                    void* y, BiasLayout layout, int64_t begin, int64_t end);

// The bias grad op's work, cut into tiles that depend on the shape alone
// (never on the thread count), so that the bias gradient is bit-identical
// however the tiles are spread over threads:
//   the tensor is a matrix of rows x cols, cols = channels (inner = 1) or
//   inner (rows = outer * channels); a tile is row_block rows by col_block
//   columns. Each tile writes dx for its elements and the sums of its dx into
//   its own slots of `partials`, in a fixed order; BiasGradReduce then adds
//   the partials of each channel in a fixed order.
// Sums accumulate in float for half and bfloat16, in double for float and
// double (partials hold that type).
struct BiasGradTiling {
  BiasLayout layout;
  int64_t rows, cols;
  int64_t row_block, col_block;
  int64_t row_tiles, col_tiles;

  int64_t tiles() const { return row_tiles * col_tiles; }
  // Partial sums: one per (row tile, channel) when inner = 1, else one per
  // (row, column tile).
  int64_t partials() const {
    return layout.inner == 1 ? row_tiles * cols : rows * col_tiles;
  }
};
BiasGradTiling MakeBiasGradTiling(BiasLayout layout, int64_t n);

// dx[i] = g[i] * f'(x[i] + bias[channel(i)]) for the elements of tiles
// [tile_begin, tile_end), and their partial sums. dx may be g or x.
template <typename Op>
void CpuBiasGradTiles(const Op& op, Dtype dtype, const void* g, const void* x,
                      const void* bias, void* dx, void* partials,
                      const BiasGradTiling& tiling, int64_t tile_begin,
                      int64_t tile_end);

// bias_backprops[c] for c in [begin, end), from the partials, rounded once.
void CpuBiasGradReduce(Dtype dtype, const void* partials,
                       const BiasGradTiling& tiling, void* bias_backprops,
                       int64_t begin, int64_t end);

// Gated: features of rows x (2 * half) elements, outputs rows x half; output
// element i = (r, j) reads a = features[r, j] and b = features[r, half + j],
// each plus its element of `bias` (2 * half elements) unless bias is null.
// y[i] = f(a) * b for output elements i in [begin, end).
template <typename Op>
void CpuGatedForward(const Op& op, Dtype dtype, const void* x,
                     const void* bias, void* y, int64_t half, int64_t begin,
                     int64_t end);

// dx[r, j] = g[i] * b * f'(a), dx[r, half + j] = g[i] * f(a), for output
// elements i in [begin, end). dx may be x.
template <typename Op>
void CpuGatedGrad(const Op& op, Dtype dtype, const void* g, const void* x,
                  void* dx, int64_t half, int64_t begin, int64_t end);

// BiasGated's grad: CpuGatedGrad with the bias added to the features, and the
// bias gradient (db, 2 * half elements: the sums of dx over the rows) by
// the tiles of the bias ops. The tiling's matrix is the features' (cols =
// 2 * half: the channels, for partials() and CpuBiasGradReduce); its column
// blocks cut the output columns [0, half), each tile writing both halves.
BiasGradTiling MakeGatedBiasGradTiling(int64_t half, int64_t rows);
template <typename Op>
void CpuBiasGatedGradTiles(const Op& op, Dtype dtype, const void* g,
                           const void* x, const void* bias, void* dx,
                           void* partials, const BiasGradTiling& tiling,
                           int64_t tile_begin, int64_t tile_end);

}  // namespace tf_ops

#endif  // TF_OPS_CC_FUSED_CPU_H_
