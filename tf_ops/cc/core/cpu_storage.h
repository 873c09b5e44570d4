// How the CPU engine reads each storage dtype into its compute type and
// writes results back, rounded once: float and double as they are, half and
// bfloat16 through the branch-free conversions of narrow_float.h (which
// vectorise); and how a loop gets a functor with its formula fixed. Used by
// the fused ops' loops (fused_cpu.cc).

#ifndef TF_OPS_CC_CPU_STORAGE_H_
#define TF_OPS_CC_CPU_STORAGE_H_

#include <cstdint>

#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/core/narrow_float.h"

namespace tf_ops {
namespace cpu_storage {

// Each policy: Stored (the buffer's element), Load/Store (to and from the
// compute type), and Acc, what sums of computed values accumulate in: float
// for half and bfloat16, double for float and double.
struct Float {
  using Stored = float;
  using Acc = double;
  static float Load(float v) { return v; }
  static float Store(float v) { return v; }
};
struct Double {
  using Stored = double;
  using Acc = double;
  static double Load(double v) { return v; }
  static double Store(double v) { return v; }
};
struct Half {
  using Stored = uint16_t;
  using Acc = float;
  static float Load(uint16_t v) { return narrow_float::HalfToFloat(v); }
  static uint16_t Store(float v) { return narrow_float::FloatToHalf(v); }
};
struct BFloat16 {
  using Stored = uint16_t;
  using Acc = float;
  static float Load(uint16_t v) { return narrow_float::BFloat16ToFloat(v); }
  static uint16_t Store(float v) { return narrow_float::FloatToBFloat16(v); }
};

// Calls fn with the storage policy of dtype.
template <typename Fn>
void WithStorage(Dtype dtype, Fn&& fn) {
  switch (dtype) {
    case Dtype::kHalf:
      return fn(Half());
    case Dtype::kBFloat16:
      return fn(BFloat16());
    case Dtype::kFloat:
      return fn(Float());
    case Dtype::kDouble:
      return fn(Double());
  }
}

// An op whose attribute switches between formulas (Gelu's `approximate`)
// defines Specialize(fn), calling fn with the chosen formula as its own type,
// so that each loop holds one formula and vectorises. Other ops run as they
// are.
template <typename Op, typename Fn>
auto WithFixedFormula(const Op& op, Fn&& fn, int)
    -> decltype(op.Specialize(fn), void()) {
  op.Specialize(fn);
}
template <typename Op, typename Fn>
void WithFixedFormula(const Op& op, Fn&& fn, long) {
  fn(op);
}

}  // namespace cpu_storage
}  // namespace tf_ops

#endif  // TF_OPS_CC_CPU_STORAGE_H_
