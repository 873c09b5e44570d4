// The CPU engine of the rotary embedding (rotary_math.h): y = RoPE(x), or
// the transpose dx = RoPE^T(dy) (the backward), for any axis layout
// (rotary_layout.h). TF-free, like norm_cpu.h: the kernels
// (rotary_kernels.cc) split the work units over TensorFlow's thread pool and
// call this per shard; the engine sanitizer test calls it directly.
//
// Buffers are untyped with their Dtype; values compute in float for half,
// bfloat16 and float, in double for double, and are rounded once. The
// positions (a scalar start or the table) are in that compute type; the
// inverse frequencies are InverseFrequency's D/2 doubles, rounded to it.
//
// Work units: where the feature axis is last (inner = 1), a unit is the
// rows of one sequence index and one block of the leading axes, in sequence
// order, so a shard computes each position's sines and cosines once (D/2 of
// each) and applies them to every head (and batch, for shared positions).
// Otherwise a unit is one [D, inner] block, each element turned by its own
// angle. y may be x (in place).

#ifndef TF_OPS_CC_ROTARY_ROTARY_CPU_H_
#define TF_OPS_CC_ROTARY_ROTARY_CPU_H_

#include <cstdint>

#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/rotary/rotary_layout.h"

namespace tf_ops {
namespace rotary {

struct RotaryArgs {
  Dtype dtype = Dtype::kFloat;
  RotaryLayout layout;
  const void* positions = nullptr;            // compute type
  const double* inverse_frequencies = nullptr;  // D/2
  double magnitude = 1.0;
  bool transpose = false;  // the backward: rotate by -theta
};

// The units to split over threads and the elements of x one unit covers.
int64_t CpuRotaryUnits(const RotaryLayout& layout);
int64_t CpuRotaryUnitElements(const RotaryLayout& layout);

// Units [begin, end).
void CpuRotary(const RotaryArgs& args, const void* x, void* y, int64_t begin,
               int64_t end);

}  // namespace rotary
}  // namespace tf_ops

#endif  // TF_OPS_CC_ROTARY_ROTARY_CPU_H_
