// What the fused ops compute, element by element, from the activation
// functors of activation_math.h: nothing here is per activation.
//
//   TfOps>Bias{Act}        y = f(x + b)
//   TfOps>Add{Act}         y = f(x + a)            (a of x's shape: a bias
//                                                   per element; its gradient
//                                                   is the plain grad op's,
//                                                   tf_ops/python/fused/
//                                                   gradients.py)
//   TfOps>Bias{Act}Grad    dx = g f'(x + b)        (db = the sum of dx over
//                                                   every axis but the
//                                                   channel's: the engines)
//   TfOps>Gated{Act}       y = f(a) b              ([a, b] = the two halves
//   TfOps>Gated{Act}Grad   da = g b f'(a),          of the last axis)
//                          db = g f(a)
//
// f'(z) is the functor's Derivative at the features (DerivativeAtFeatures,
// activation_derivative.h): the fused ops keep the features (x, b) and never
// store y.
//
// Plain C++17 that nvcc also compiles; T is float or double on the CPU and in
// CUDA code, or XlaValue in the XLA lowering, as for activation_math.h.

#ifndef TF_OPS_CC_FUSED_MATH_H_
#define TF_OPS_CC_FUSED_MATH_H_

#include "tf_ops/cc/activation/activation_derivative.h"
#include "tf_ops/cc/activation/activation_math.h"

namespace tf_ops {

// TfOps>Bias{Act}: f(x + b).
template <typename Op, typename T>
TF_OPS_HOST_DEVICE T BiasForwardOf(const Op& op, T x, T b) {
  return op.Forward(x + b);
}

// TfOps>Bias{Act}Grad, first output: g f'(x + b).
template <typename Op, typename T>
TF_OPS_HOST_DEVICE T BiasGradOf(const Op& op, T g, T x, T b) {
  return g * DerivativeAtFeatures(op, x + b);
}

// TfOps>Gated{Act}: f(a) b.
template <typename Op, typename T>
TF_OPS_HOST_DEVICE T GatedForwardOf(const Op& op, T a, T b) {
  return op.Forward(a) * b;
}

// TfOps>Gated{Act}Grad: the gradients for the two halves.
template <typename T>
struct GatedGradValues {
  T d_a;
  T d_b;
};
template <typename Op, typename T>
TF_OPS_HOST_DEVICE GatedGradValues<T> GatedGradOf(const Op& op, T g, T a,
                                                  T b) {
  return {g * b * DerivativeAtFeatures(op, a), g * op.Forward(a)};
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_FUSED_MATH_H_
