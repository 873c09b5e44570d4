// The CPU engine of the group-norm ops (group_norm_math.h), TF-free: the
// kernels (group_norm_kernels.cc) spread its units over TensorFlow's thread
// pool; the engine test may call it directly.
//
// x is [n, b, c, i] (group_norm_checks.h). Work is cut into units fixed by
// the shape alone (never the thread count): channels last (i = 1), a unit is
// a block of rows of one sample, all channels, read row by row and computed
// across channels; otherwise one channel of one sample (its b runs of i
// contiguous elements). Each unit writes its own per-channel partial sums
// (double, [n][tiles][2][c]), which the single-threaded steps add in a fixed
// order: mean, rstd, dgamma and dbeta are bit-identical for any thread count.
//
// Two passes over x forward (sums; y = f(x * a + b)) and two over x and dy
// backward (sums of dz and dz * xhat; dx), f' recomputed in the second. y
// may share x's buffer and dx dy's or x's: each element is written after its
// reads. Values compute in float (double for double x), rounded once; the
// per-channel and per-group tensors are in that compute type.

#ifndef TF_OPS_CC_GROUP_NORM_GROUP_NORM_CPU_H_
#define TF_OPS_CC_GROUP_NORM_GROUP_NORM_CPU_H_

#include <cstdint>

#include "tf_ops/cc/activation/activation_choice.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/group_norm/group_norm_math.h"

namespace tf_ops {
namespace group_norm {

struct GroupNormTiling {
  GroupNormShape shape;
  int64_t row_block = 1;  // rows (of b) per unit, channels last
  int64_t row_tiles = 1;  // units per sample along b (1 otherwise)

  bool channels_last() const { return shape.i == 1; }
  int64_t units() const {
    return shape.n * (channels_last() ? row_tiles : shape.c);
  }
  // Doubles of partial sums.
  int64_t partials() const { return shape.n * row_tiles * 2 * shape.c; }
  // Rough cycles per unit, for the pool's cost model.
  int64_t cycles_per_unit(int activation_cycles) const;
};
GroupNormTiling MakeGroupNormTiling(const GroupNormShape& shape);

// The buffers of a call; null where a step does not use them. coefs: the
// backward's per-(sample, group) dx coefficients, 2 doubles each.
struct GroupNormBuffers {
  const void* x = nullptr;
  const void* dy = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  void* mean = nullptr;  // [n, groups], written by the forward's stats step
  void* rstd = nullptr;
  void* y = nullptr;
  void* dx = nullptr;
  void* dgamma = nullptr;
  void* dbeta = nullptr;
  double* partials = nullptr;
  double* coefs = nullptr;
};

// Forward: units [begin, end) of the sums; then every group's mean and rstd
// (one thread); then units of y.
void CpuGroupNormSums(Dtype dtype, const GroupNormTiling& t,
                      const GroupNormBuffers& io, int64_t begin, int64_t end);
void CpuGroupNormStats(Dtype dtype, const GroupNormTiling& t, double epsilon,
                       const GroupNormBuffers& io);
void CpuGroupNormApply(const ActivationChoice& act, Dtype dtype,
                       const GroupNormTiling& t, const GroupNormBuffers& io,
                       int64_t begin, int64_t end);

// Backward: units of the sums of dz and dz * xhat; then dgamma, dbeta and the
// dx coefficients (one thread); then units of dx.
void CpuGroupNormGradSums(const ActivationChoice& act, Dtype dtype,
                          const GroupNormTiling& t, const GroupNormBuffers& io,
                          int64_t begin, int64_t end);
void CpuGroupNormGradReduce(Dtype dtype, const GroupNormTiling& t,
                            const GroupNormBuffers& io);
void CpuGroupNormGradApply(const ActivationChoice& act, Dtype dtype,
                           const GroupNormTiling& t, const GroupNormBuffers& io,
                           int64_t begin, int64_t end);

}  // namespace group_norm
}  // namespace tf_ops

#endif  // TF_OPS_CC_GROUP_NORM_GROUP_NORM_CPU_H_
