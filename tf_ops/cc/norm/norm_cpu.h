// The CPU engine of the normalisation ops (norm_math.h): layer norm and RMS
// norm over the last axis, with the optional residual add, forward and
// backward. TF-free, like fused_cpu.h: the kernels (norm_kernels.cc) split
// rows or tiles over TensorFlow's thread pool and call these per shard; the
// engine sanitizer test calls them directly.
//
// Buffers are untyped with their Dtype. Values compute in float for half,
// bfloat16 and float, in double for double (the row statistics too), and are
// rounded once. The statistics (mean, rstd) and the parameters (gamma, beta
// and their gradients) are in the compute type: float, or double for double
// (mixed precision reads float32 gamma with half x, as Keras keeps it).
// Loops are compiled per instruction set.
//
// In place: y and h may share the buffers of x and the residual, and dx
// those of dy, x (h) and dh; every element is written after its last read.

#ifndef TF_OPS_CC_NORM_NORM_CPU_H_
#define TF_OPS_CC_NORM_NORM_CPU_H_

#include <cstdint>

#include "tf_ops/cc/core/dtype.h"

namespace tf_ops {

// A tensor seen as rows x cols, normalised along cols.
struct NormShape {
  int64_t rows = 0;
  int64_t cols = 0;
  bool centered = true;  // layer norm; false: RMS norm
};

// Rows [begin, end): h = x + residual (when residual is not null; h must then
// be given), y = gamma * xhat + beta (beta may be null: 0), and the row's
// mean (layer norm only; may be null for RMS norm) and rstd.
void CpuNormForward(Dtype dtype, const NormShape& shape, double epsilon,
                    const void* x, const void* residual, const void* gamma,
                    const void* beta, void* h, void* y, void* mean, void* rstd,
                    int64_t begin, int64_t end);

// The backward's work in tiles of row_block whole rows, from the shape alone
// (never the thread count), so that dgamma and dbeta are bit-identical
// however tiles are spread over threads: each tile writes dx for its rows and
// its own partial sums of g * xhat and g per column (in the compute type);
// then CpuNormGradReduce adds each column's partials in tile order, in
// double.
struct NormGradTiling {
  NormShape shape;
  int64_t row_block = 1;
  int64_t row_tiles = 0;

  int64_t tiles() const { return row_tiles; }
  // Partials: [row_tiles][2][cols] (dgamma's, then dbeta's), counted in
  // slots of double (8 bytes), which hold either compute type.
  int64_t partials() const { return row_tiles * 2 * shape.cols; }
};
NormGradTiling MakeNormGradTiling(const NormShape& shape);

// The thread pool's cost model: rough cycles per forward row and per
// backward tile.
int64_t NormForwardCyclesPerRow(Dtype dtype, const NormShape& shape);
int64_t NormGradCyclesPerTile(Dtype dtype, const NormGradTiling& tiling);

// Tiles [tile_begin, tile_end): dx = the input gradient (+ dh when dh is not
// null), and the tiles' partials. mean may be null for RMS norm.
void CpuNormGradTiles(Dtype dtype, const NormGradTiling& tiling,
                      const void* dy, const void* x, const void* gamma,
                      const void* mean, const void* rstd, const void* dh,
                      void* dx, void* partials, int64_t tile_begin,
                      int64_t tile_end);

// dgamma[c] and dbeta[c] (dbeta may be null) for columns [begin, end), from
// the partials in a fixed order, in the compute type.
void CpuNormGradReduce(Dtype dtype, const NormGradTiling& tiling,
                       const void* partials, void* dgamma, void* dbeta,
                       int64_t begin, int64_t end);

}  // namespace tf_ops

#endif  // TF_OPS_CC_NORM_NORM_CPU_H_
