// f'(z) at the features z of an activation functor (activation_math.h), for
// the ops that keep the features and never store y = f(z): the fused ops
// (fused_math.h) and the normalizations' activation (batch norm, group
// norm). For an activation whose grad op takes the outputs (Elu), f' at y,
// recomputed here. Plain C++17 that nvcc also compiles; T as for
// activation_math.h.

#ifndef TF_OPS_CC_ACTIVATION_ACTIVATION_DERIVATIVE_H_
#define TF_OPS_CC_ACTIVATION_ACTIVATION_DERIVATIVE_H_

#include "tf_ops/cc/core/math_primitives.h"  // TF_OPS_HOST_DEVICE

namespace tf_ops {

// Op::kGradTakesOutputs, false for a formula without it (GeluFormula, which
// the CPU engine runs in place of Gelu).
template <typename Op, typename = void>
struct TakesOutputs {
  static constexpr bool value = false;
};
template <typename Op>
struct TakesOutputs<Op, decltype(void(Op::kGradTakesOutputs))> {
  static constexpr bool value = Op::kGradTakesOutputs;
};

// f'(z) at the features z, whatever the functor's Derivative takes.
template <typename Op, typename T>
TF_OPS_HOST_DEVICE T DerivativeAtFeatures(const Op& op, T z) {
  if constexpr (TakesOutputs<Op>::value) {
    return op.Derivative(op.Forward(z));
  } else {
    return op.Derivative(z);
  }
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_ACTIVATION_ACTIVATION_DERIVATIVE_H_
